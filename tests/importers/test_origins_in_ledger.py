"""The import origins live in the state ledger (SQLite step 4, PostgreSQL step 3): an earlier
release's `<data_dir>/import-origins/` folder is read once into it, on both stores, and left
renamed `import-origins.migrated`; the records then read, change and go as before, and
`registry-gen migrate` carries them with the rest of the ledger (state.transfer)."""

from __future__ import annotations

import json
from pathlib import Path

from registry_gen.importers.origins import FileMark, OriginLedger, OriginRecord
from registry_gen.settings import Settings
from registry_gen.state.transfer import ledger_counts

MARK = {"size": 120, "sha512": "sha512-AAAA", "mtime_ns": 1_700_000_000_000_000_000}


def old_folder(settings: Settings) -> Path:
    """What an earlier release wrote: one JSON file per package (a scoped one in its scope's
    folder), and one torn file, which that release read as absent."""
    folder = settings.data_dir / "import-origins"
    (folder / "@scope").mkdir(parents=True)
    for name in ("lib-a", "@scope/lib-b"):
        data = {"name": name, "origin": "https://registry.example.test/", "files": {f"{name}/{name.split('/')[-1]}-1.0.0.tgz": MARK}}
        (folder / f"{name}.json").write_text(json.dumps(data, indent=2) + "\n")
    (folder / "torn.json").write_text('{"name": "torn", "orig')
    return folder


def test_the_old_folder_is_read_once_into_the_ledger_and_left_renamed(any_state_settings: Settings) -> None:
    settings = any_state_settings
    folder = old_folder(settings)
    ledger = OriginLedger(settings)
    record = ledger.read("@scope/lib-b")
    assert record == OriginRecord("@scope/lib-b", "https://registry.example.test/",
                                  {"@scope/lib-b/lib-b-1.0.0.tgz": FileMark(120, "sha512-AAAA", MARK["mtime_ns"])})  # fmt: skip
    assert not folder.exists()
    kept = folder.with_name("import-origins.migrated")
    assert sorted(p.relative_to(kept).as_posix() for p in kept.rglob("*.json")) == ["@scope/lib-b.json", "lib-a.json", "torn.json"]
    assert ledger.read("lib-a") is not None and ledger.read("torn") is None
    assert ledger_counts(settings)["import_origins"] == 2

    ledger.write(OriginRecord("lib-a", "verdaccio:/srv/storage", {}))
    assert ledger.read("lib-a") == OriginRecord("lib-a", "verdaccio:/srv/storage", {})
    ledger.forget("lib-a")
    assert ledger.read("lib-a") is None
    assert not folder.exists()  # written to the ledger, never to a new folder
