"""The durable record of when each version was first seen: the one fact a build cannot redo.

The build's state database may be dropped at any time (a new schema, a corrupt file): everything
in it is rebuilt from content/ by reading the archives again, except the first-seen publish time
of a version dropped by hand, which becomes the `time` field clients see. Those times live here
too, in an append-only JSON Lines file beside the state, with no schema to migrate: a line per
package per build that saw new versions, and a line when a package left the registry. Lines are
written (and fsynced) only when the build's transaction commits, so a failed build records
nothing. A torn last line (a crash mid-append) is skipped on reading; the rest is kept.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

log = logging.getLogger(__name__)

LEDGER_FILE: Final = "first-seen.jsonl"


class FirstSeenLedger:
    """Buffered appends (`record`, `forget`), written by `flush`; `load` replays the file.

    A first build records a line per package (a million versions: ~100k lines): past SPILL_LINES
    the buffered lines go to a spill file beside the ledger, so memory stays flat; `flush` appends
    the spill to the ledger; `discard` drops it (the build calls it as it begins, under its lock:
    a crashed build's spill holds lines that were never committed)."""

    SPILL_LINES: Final = 1000

    def __init__(self, path: Path):
        self.path = path
        self.spill = path.with_name(path.name + ".pending")
        self._pending: list[str] = []

    def record(self, name: str, stamps: Mapping[str, str]) -> None:
        if stamps:
            self._add({"name": name, "time": dict(stamps)})

    def forget(self, name: str) -> None:
        self._add({"name": name, "forget": True})

    def _add(self, entry: dict[str, Any]) -> None:
        self._pending.append(json.dumps(entry, ensure_ascii=False, sort_keys=True) + "\n")
        if len(self._pending) >= self.SPILL_LINES:
            self._spill()

    def _spill(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.spill, "a", encoding="utf-8") as spill:
            spill.writelines(self._pending)
        self._pending.clear()

    def discard(self) -> None:
        self._pending.clear()
        self.spill.unlink(missing_ok=True)

    def flush(self) -> None:
        """Appends what was recorded since the last flush, durably (before the state commits)."""
        if not self._pending and not self.spill.exists():
            return
        self._spill()
        with open(self.spill, "rb") as spill, open(self.path, "ab") as ledger:
            shutil.copyfileobj(spill, ledger)
            ledger.flush()
            os.fsync(ledger.fileno())
        self.spill.unlink()

    def load(self) -> dict[str, dict[str, str]]:
        """Every package's first-seen times as the file says now (later lines win)."""
        times: dict[str, dict[str, str]] = {}
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return times
        for number, line in enumerate(text.splitlines(), 1):
            entry = _parse_line(line)
            if entry is None:
                if line.strip():
                    log.warning("%s, line %d: not a first-seen record; skipped", self.path, number)
                continue
            name, stamps = entry
            if stamps is None:
                times.pop(name, None)
            else:
                times.setdefault(name, {}).update(stamps)
        return times


def _parse_line(line: str) -> tuple[str, dict[str, str] | None] | None:
    """(name, stamps) or (name, None) for a forget line; None for anything unreadable."""
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        return None
    if entry.get("forget") is True:
        return entry["name"], None
    stamps = entry.get("time")
    if not isinstance(stamps, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in stamps.items()):
        return None
    return entry["name"], stamps
