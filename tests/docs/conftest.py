"""The documentation's generator (docs/refgen) is imported from the docs folder, as Sphinx does."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

if str(DOCS) not in sys.path:
    sys.path.insert(0, str(DOCS))


def edit_descriptions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: ModuleType, attribute: str, drop: str, add: dict[str, str] | None
) -> None:
    """Point `module.attribute` (a descriptions YAML file of refgen) at a copy without the entry
    `drop` and with the entries `add`."""
    original: Path = getattr(module, attribute)
    notes = yaml.safe_load(original.read_text(encoding="utf-8"))
    notes.pop(drop, None)
    notes.update(add or {})
    edited = tmp_path / original.name
    edited.write_text(yaml.safe_dump(notes), encoding="utf-8")
    monkeypatch.setattr(module, attribute, edited)
