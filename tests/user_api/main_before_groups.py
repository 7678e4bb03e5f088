"""The code of `main` just before groups moved into the user store (ea401ee), exported once into
the test cache, so a test can make today's layout (accounts in users.sqlite3 at schema 5 or in
PostgreSQL at schema 6, groups in `data/groups.sqlite3`) with the very code that made it, through
its own CLI. It runs on this venv: its dependencies are the ones pinned then.

CI runs on a fresh clone with full history, so `git archive` finds the commit.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from filelock import FileLock

from bench.compare import export_revision
from tests.upgrade.old_release import CACHE

BEFORE_GROUPS_MOVED = "ea401eee01e34c434b625c431398e53b166cfcc3"
SOURCE_DIR = CACHE / f"main-{BEFORE_GROUPS_MOVED[:7]}"


def code_before_groups_moved() -> Path:
    """The exported tree (made once; a half-made one from an interrupted run is made again)."""
    stamp = SOURCE_DIR / ".exported"
    CACHE.mkdir(parents=True, exist_ok=True)
    with FileLock(str(CACHE / f".main-{BEFORE_GROUPS_MOVED[:7]}.lock"), timeout=300):
        if not stamp.exists():
            subprocess.run(["rm", "-rf", str(SOURCE_DIR)], check=True)
            export_revision(BEFORE_GROUPS_MOVED, SOURCE_DIR / "src")
            stamp.write_text(BEFORE_GROUPS_MOVED + "\n")
    return SOURCE_DIR / "src"


def cli_before_groups_moved(root: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """`registry-gen ARGS` of that code, run in `root` (its registry.yaml); fails loudly."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("REGISTRY_")}
    env["PYTHONPATH"] = str(code_before_groups_moved())  # ahead of this checkout's editable install
    done = subprocess.run([sys.executable, "-m", "registry_gen", *args], input=stdin, capture_output=True, text=True,
                          cwd=root, env=env, timeout=120)  # fmt: skip
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done
