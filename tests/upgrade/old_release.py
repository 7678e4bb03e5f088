"""The previous release (b384b22, before maintainers were bound to accounts), installed from this
repository's own history into a venv of its own in the test cache, so a test can make a registry
with it (real `registry-gen serve`, real npm) and then open that folder with today's code.

CI runs on a fresh clone with full history, so `git archive` finds the commit; the venv is built
once (its dependencies as that release pinned them) and reused while its stamp file is there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from filelock import FileLock

from bench.compare import export_revision

RELEASE = "b384b228342e0dd4acbdb755e513cc226d953c3b"
CACHE = Path(os.environ.get("REGISTRY_GEN_TEST_CACHE", Path.home() / ".cache" / "registry-gen-tests"))
RELEASE_DIR = CACHE / f"release-{RELEASE[:7]}"


def old_release_python() -> str:
    """The interpreter of a venv holding the previous release (with its PostgreSQL extra)."""
    python = RELEASE_DIR / "venv" / "bin" / "python"
    stamp = RELEASE_DIR / ".installed"
    CACHE.mkdir(parents=True, exist_ok=True)
    with FileLock(str(CACHE / f".release-{RELEASE[:7]}.lock"), timeout=900):
        if not stamp.exists():
            shutil.rmtree(RELEASE_DIR, ignore_errors=True)  # a half-built one from an interrupted run
            source = export_revision(RELEASE, RELEASE_DIR / "src")
            subprocess.run([sys.executable, "-m", "venv", str(RELEASE_DIR / "venv")], check=True, timeout=300)
            install = subprocess.run(
                [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", f"{source}[postgres]"],
                capture_output=True, text=True, timeout=900,
            )  # fmt: skip
            if install.returncode != 0:
                raise RuntimeError(f"installing release {RELEASE[:7]} failed:\n{install.stdout}\n{install.stderr}")
            stamp.write_text(RELEASE + "\n")
    return str(python)


def old_cli(python: str, root: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """`registry-gen ARGS` of the release behind `python`, run in `root` (its registry.yaml)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("REGISTRY_") and key != "PYTHONPATH"}
    return subprocess.run([python, "-m", "registry_gen", *args], input=stdin, capture_output=True, text=True,
                          cwd=root, env=env, timeout=300)  # fmt: skip
