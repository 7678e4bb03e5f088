"""Every test module on disk is collected by `make test` (pytest skips folders named `build`,
`dist`, `venv`... by default; a test folder with such a name would silently never run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import LONGEST_FIRST

# It collects the whole suite in a child pytest (~30 s here): `make test` runs it, `make test-fast` not.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def collected_modules() -> list[str]:
    """The module of each test `make test` collects, in the order it collects them."""
    listing = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=True,
    ).stdout
    return [line.split("::", 1)[0] for line in listing.splitlines() if "::" in line]


def test_every_test_module_is_collected(collected_modules: list[str]) -> None:
    collected = set(collected_modules)
    on_disk = {p.relative_to(REPO).as_posix() for p in (REPO / "tests").rglob("test_*.py")}
    assert len(collected) > 30
    assert on_disk - collected == set()


def test_the_longest_modules_are_collected_first_in_their_order(collected_modules: list[str]) -> None:
    """conftest.LONGEST_FIRST names modules that exist, and the whole suite starts with them."""
    first = list(dict.fromkeys(collected_modules))[: len(LONGEST_FIRST)]
    assert first == list(LONGEST_FIRST)
