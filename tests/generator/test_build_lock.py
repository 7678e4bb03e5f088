"""The build lock a build takes with a plain flock (issue 15: filelock loads only when the lock is
busy) excludes, and is excluded by, the filelock.FileLock the API, watch mode and `build_lock()`
take on the same file: real processes on both sides."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from registry_gen.build import build_lock, run_build
from registry_gen.buildlock import holding_build_lock
from registry_gen.errors import LockTimeout
from registry_gen.settings import Settings
from tests.support import make_tarball

HOLD = """import sys, time
from filelock import FileLock
lock = FileLock(sys.argv[1])
lock.acquire()
print("held", flush=True)
sys.stdin.read()  # until the test closes our stdin
"""
TRY = """import sys
from filelock import FileLock, Timeout
try:
    FileLock(sys.argv[1]).acquire(timeout=0.2)
except Timeout:
    print("busy")
else:
    print("taken")
"""


def other_process_takes(lock_file: Path) -> str:
    """'taken' or 'busy': what a filelock.FileLock in another process gets right now."""
    return subprocess.run([sys.executable, "-c", TRY, str(lock_file)], capture_output=True, text=True, timeout=60, check=True).stdout.strip()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    make_tarball(tmp_path / "content", "locked", "1.0.0")
    return Settings(content_dir=tmp_path / "content", out_dir=tmp_path / "public", base_url="http://127.0.0.1:9/")


def test_the_plain_lock_excludes_another_process_filelock(settings: Settings) -> None:
    settings.out_dir.mkdir(parents=True)
    with holding_build_lock(settings.lock_file, timeout=1):
        assert other_process_takes(settings.lock_file) == "busy"
    assert other_process_takes(settings.lock_file) == "taken"


def test_a_build_waits_for_another_process_filelock_then_times_out(settings: Settings) -> None:
    settings.out_dir.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(settings.lock_file)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        waits: list[bool] = []
        with pytest.raises(LockTimeout, match="another build holds"):
            run_build(settings, lock_timeout=0.3, on_lock_wait=lambda: waits.append(True))
        assert waits == [True]
        assert not (settings.out_dir / "locked").exists()
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=60)
    result = run_build(settings, lock_timeout=5)
    assert result.packages == 1 and (settings.out_dir / "locked").is_dir()


def test_build_lock_still_hands_out_a_filelock_the_build_respects(settings: Settings) -> None:
    with build_lock(settings).acquire(timeout=5):
        with pytest.raises(LockTimeout):
            run_build(settings, lock_timeout=0.2)
    assert run_build(settings, lock_timeout=5).packages == 1
