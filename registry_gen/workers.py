"""Worker processes for the build that never outlive it and never hold its sockets.

`registry-gen build`, `watch` and `serve` read and write packages in worker processes when a
build is large. Two things went wrong with plain forked workers: a `kill -9` of the parent left
them running (for hours), and a forked worker of `serve` held a copy of the listening socket, so
the restarted server could not bind its port.

So workers come from the `forkserver` start method: the fork server is a fresh exec'd interpreter
(close-on-exec drops every socket and pipe of the parent; Python creates them non-inheritable),
preloaded with the build so each fork is cheap. It exits when its parent dies; each worker asks
the kernel for SIGKILL when its own parent (the fork server) dies (Linux's PR_SET_PDEATHSIG), and
a watchdog thread covers the moments before that and systems without prctl.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:  # multiprocessing loads when a build has enough work for workers, not with the build
    from concurrent.futures import ProcessPoolExecutor

PR_SET_PDEATHSIG: Final = 1  # from <linux/prctl.h>
WATCHDOG_SECONDS: Final = 1.0
# The fork server imports these once for every worker: the build and what its workers use that the
# build itself loads only on first use (the archive reader, the Markdown renderer, semver).
PRELOAD: Final = ["registry_gen.build", "registry_gen.archive", "registry_gen.markdown", "semver"]


def worker_pool(
    max_workers: int, initializer: Callable[..., None] | None = None, initargs: tuple[Any, ...] = ()
) -> ProcessPoolExecutor:
    """A ProcessPoolExecutor whose workers die with this process and inherit none of its files."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return ProcessPoolExecutor(
        max_workers=max_workers,
        mp_context=context,
        initializer=start_worker,
        initargs=(os.getpid(), initializer, initargs),
    )


def start_worker(owner_pid: int, initializer: Callable[..., None] | None, initargs: tuple[Any, ...]) -> None:
    """Runs first in every worker: tie its life to the build's process, then the pool's initializer."""
    die_with_parent()
    if not process_alive(owner_pid):
        os._exit(1)  # the build died while this worker was being forked
    threading.Thread(target=_watch_owner, args=(owner_pid,), name="owner-watchdog", daemon=True).start()
    if initializer is not None:
        initializer(*initargs)


def die_with_parent() -> bool:
    """Asks Linux for SIGKILL when the parent process dies; False where that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, owned by someone else (pid reuse); the prctl still covers us
    return True


def _watch_owner(owner_pid: int) -> None:
    stop = threading.Event()
    while not stop.wait(WATCHDOG_SECONDS):
        if not process_alive(owner_pid):
            os._exit(1)
