"""Taking the build lock (OUT's lock file, shared by `registry-gen build`, watch mode and the API)
without loading filelock when nobody else holds it.

filelock takes the lock with `flock(LOCK_EX)` on the lock file, so a plain `flock` on the same file
excludes it and is excluded by it, both ways. filelock's import costs ~8 ms, a tenth of a no-change
build (issue 15, goal 2): the first, non-blocking try is a plain `flock`; only when the lock is busy
does filelock load, to wait with its timeout and deadlock checks as before.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from registry_gen.errors import LockTimeout


def try_flock(path: Path) -> int | None:
    """The lock file's descriptor, holding its exclusive lock; None when someone else holds it, or
    anything is unusual (the file cannot be opened, or was replaced under us): then filelock decides."""
    try:  # as filelock opens it: never truncated, created readable and writable under the umask
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW, 0o666)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held, named = os.fstat(fd), os.stat(path)
        if (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino):
            return fd
    except OSError:
        pass  # busy (EWOULDBLOCK), or a file system without flock: filelock's checks answer
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return None


@contextmanager
def holding_build_lock(path: Path, timeout: float, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Holds the build lock for the `with` block. A busy lock calls `on_wait` once, then waits up
    to `timeout` seconds (LockTimeout after that): filelock's way, as run_build always did."""
    fd = try_flock(path)
    if fd is not None:
        try:
            yield
        finally:
            os.close(fd)  # closing the only descriptor releases the flock
        return
    from filelock import FileLock, Timeout

    lock = FileLock(str(path))
    try:
        try:
            lock.acquire(timeout=0)
        except Timeout:
            if on_wait is not None:
                on_wait()
            lock.acquire(timeout=timeout)
    except Timeout as exc:
        raise LockTimeout(f"another build holds {path}") from exc
    try:
        yield
    finally:
        lock.release()
