"""What a person installing the project meets: `make run` installs only what running needs, and
building the package prints no setuptools warnings (licence, data folders)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEST_ONLY = {"pytest", "playwright", "moto", "schemathesis", "boto3", "webtest", "hypothesis", "pyinstrument", "psycopg"}

pytestmark = pytest.mark.slow


def test_make_run_installs_no_test_only_package(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    planned = subprocess.run(["make", "-n", "run", f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "pip install --quiet -e .\n" in planned and "[test" not in planned
    # Really install what `make run` installs, into a fresh venv.
    subprocess.run(
        ["make", f"VENV={venv}", f"PYTHON={sys.executable}", f"{venv}/.installed-runtime"], cwd=ROOT, check=True, capture_output=True, timeout=600
    )
    listed = subprocess.run([venv / "bin/pip", "list", "--format=freeze"], capture_output=True, text=True, check=True).stdout
    installed = {line.split("==")[0].lower() for line in listed.splitlines()}
    assert "registry-gen" in installed and "waitress" in installed
    assert installed & TEST_ONLY == set()
    version = subprocess.run([venv / "bin/registry-gen", "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.startswith("registry-gen ")


def test_building_the_package_prints_no_setuptools_warning(tmp_path: Path) -> None:
    source = tmp_path / "source"  # a copy: setuptools builds inside the source folder
    source.mkdir()
    for part in ("pyproject.toml", "README.md", "registry_gen", "site_template", "user_api"):
        if (ROOT / part).is_dir():
            shutil.copytree(ROOT / part, source / part, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(ROOT / part, source / part)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", str(source), "-w", str(tmp_path / "wheel")],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    for warning in ("would be ignored", "as a TOML table is deprecated", "SetuptoolsDeprecationWarning", "BuildBackendWarning"):
        assert warning not in output
    wheel = next((tmp_path / "wheel").glob("registry_gen-*.whl"))
    names = subprocess.run([sys.executable, "-m", "zipfile", "-l", str(wheel)], capture_output=True, text=True, check=True).stdout
    for packaged in ("registry_gen/site_template/version.html", "registry_gen/site_template/static/site.css", "user_api/templates/login.html",
                     "registry_gen/build/run.py", "registry_gen/state/sqlite_ledger.py"):  # the build and the state are packages
        assert packaged in names
