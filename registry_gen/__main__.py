from registry_gen.cli import main

raise SystemExit(main())
