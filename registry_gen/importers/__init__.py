"""Moving in and out: importers from Verdaccio storage, npm-protocol registries and lockfiles, and
the Verdaccio export. Parsers here are pure; `run` holds the one orchestrator per command."""
