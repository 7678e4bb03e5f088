"""A test hook: a process that stops dead at a named point, so a test can prove what a crash there
leaves behind. Off unless the environment says otherwise; never set it in production.

    REGISTRY_GEN_FAILPOINT=after-write:kill     SIGKILL after a write landed and was built,
                                                before it is journalled done and acknowledged
    REGISTRY_GEN_FAILPOINT=after-intent:kill    SIGKILL after a write was journalled pending,
                                                before content/ changes
    REGISTRY_GEN_FAILPOINT=after-store:kill     SIGKILL after a write's files landed in content/,
                                                before its build rendered them (commit, no render)
    REGISTRY_GEN_FAILPOINT=before-purge:kill    SIGKILL after a write was rendered (and uploaded),
                                                before the caches in front are purged
    REGISTRY_GEN_FAILPOINT=before-rename:kill   SIGKILL when a named temp file is written, before
                                                it takes its target's name (registry_gen.writer)
    REGISTRY_GEN_FAILPOINT=before-rewrite-upload:kill
                                                SIGKILL after the registry-wide rewrite committed,
                                                before its files are uploaded (registry_gen.refresher)
"""

from __future__ import annotations

import os
import signal
from typing import Final

FAILPOINT_ENV: Final = "REGISTRY_GEN_FAILPOINT"


def failpoint(name: str) -> None:
    """Dies here (SIGKILL: no cleanup, no flush) when the environment names this point."""
    point, _, action = os.environ.get(FAILPOINT_ENV, "").partition(":")
    if point == name and action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
