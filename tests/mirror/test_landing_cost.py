"""What a tarball landing costs the origin ledger (the mirror's service in this process, against an
upstream the test starts on loopback): its row is committed once, before the archive, and still
says whose the archive is."""

from __future__ import annotations

from pathlib import Path

import pytest

from registry_gen.importers.origins import OriginLedger, OriginRecord
from registry_gen.mirror.service import MirrorService
from registry_gen.settings import load_settings
from registry_gen.storage import archive_key
from tests.importers.upstream_server import hostile_upstream
from tests.mirror.helpers import write_config


def ledger_writes(monkeypatch: pytest.MonkeyPatch) -> list[OriginRecord]:
    """The origin-ledger rows written (each its own durable commit) from now on."""
    writes: list[OriginRecord] = []
    write = OriginLedger.write

    def counted(self: OriginLedger, record: OriginRecord) -> None:
        writes.append(record)
        write(self, record)

    monkeypatch.setattr(OriginLedger, "write", counted)
    return writes


def test_a_tarball_landing_commits_one_ledger_row_that_still_names_its_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with hostile_upstream() as upstream:
        upstream.publish("lodged", "1.0.0")
        config = write_config(tmp_path / "registry", upstream.base)
        monkeypatch.chdir(config.parent)
        settings = load_settings(config)
        service = MirrorService(settings)
        assert service.document("lodged").ok
        service.settle()
        writes = ledger_writes(monkeypatch)
        assert service.tarball("lodged", "lodged-1.0.0.tgz").ok
        service.settle()
    key = archive_key("lodged", "1.0.0")
    assert [sorted(record.files) for record in writes] == [[key]]  # one commit, before the archive
    assert (settings.content_dir / key).is_file()
    ledger = OriginLedger(settings)
    record = ledger.read("lodged")
    assert record is not None and record.origin == writes[0].origin
    assert ledger.matches(key, record.files[key])  # by its digest: the archive is the mirror's
    assert ledger.refusal("lodged", record.origin) is None
