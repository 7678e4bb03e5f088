"""The first-seen ledger buffers a build's lines in a spill file past a bound (memory stays flat
whatever the build's size) and appends them to the ledger only when the build commits."""

from __future__ import annotations

from pathlib import Path

import pytest

from registry_gen.state.sqlite_cache import BuildState
from registry_gen.state.firstseen import LEDGER_FILE, FirstSeenLedger
from registry_gen.settings import Settings
from registry_gen.build import run_build
from tests.support import make_tarball


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FirstSeenLedger:
    monkeypatch.setattr(FirstSeenLedger, "SPILL_LINES", 3)
    return FirstSeenLedger(tmp_path / LEDGER_FILE)


def test_lines_past_the_bound_wait_in_the_spill_and_reach_the_ledger_in_order(ledger: FirstSeenLedger) -> None:
    for index in range(7):
        ledger.record(f"pkg-{index}", {"1.0.0": f"2026-01-0{index + 1}T00:00:00.000Z"})
    ledger.forget("pkg-0")
    assert ledger.spill.is_file() and not ledger.path.exists()  # nothing in the ledger before the commit
    assert len(ledger._pending) < FirstSeenLedger.SPILL_LINES  # noqa: SLF001 - the bound is the point
    ledger.flush()
    assert not ledger.spill.exists()
    times = ledger.load()
    assert sorted(times) == [f"pkg-{i}" for i in range(1, 7)]  # the forget line came last
    assert times["pkg-6"] == {"1.0.0": "2026-01-07T00:00:00.000Z"}


def test_a_discarded_build_leaves_the_ledger_as_it_was(ledger: FirstSeenLedger) -> None:
    ledger.record("kept", {"1.0.0": "2026-01-01T00:00:00.000Z"})
    ledger.flush()
    before = ledger.path.read_bytes()
    for index in range(5):
        ledger.record(f"gone-{index}", {"1.0.0": "2026-01-02T00:00:00.000Z"})
    ledger.discard()
    assert not ledger.spill.exists() and ledger.path.read_bytes() == before
    ledger.flush()  # nothing left to append
    assert ledger.path.read_bytes() == before


def test_a_crashed_builds_spill_is_dropped_when_the_next_build_begins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FirstSeenLedger, "SPILL_LINES", 1)
    settings = Settings(content_dir=tmp_path / "content", out_dir=tmp_path / "public")
    for name in ("alpha", "beta", "gamma"):
        make_tarball(settings.content_dir, name, "1.0.0")
    assert not run_build(settings).errors
    ledger = settings.state_file.parent / LEDGER_FILE
    assert sorted(FirstSeenLedger(ledger).load()) == ["alpha", "beta", "gamma"]  # spilled, then appended
    spill = ledger.with_name(ledger.name + ".pending")
    spill.write_text('{"name": "never-committed", "time": {"1.0.0": "2020-01-01T00:00:00.000Z"}}\n')
    state = BuildState(settings.state_file)
    state.begin()
    state.commit()
    state.close()
    assert not spill.exists() and "never-committed" not in FirstSeenLedger(ledger).load()
