"""The documentation's generator (docs/refgen) is imported from the docs folder, as Sphinx does."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

if str(DOCS) not in sys.path:
    sys.path.insert(0, str(DOCS))
