"""The process tree as /proc shows it, and a `serve` with a build large enough for worker
processes, for the tests that find a build's workers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests.support import make_tarball

DEADLINE = 90.0
ARCHIVES = 400  # well past the build's threshold for worker processes


def children() -> dict[int, list[int]]:
    """Every living process's children, by parent pid (zombies have exited already)."""
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z":
            tree.setdefault(int(fields[1]), []).append(int(entry.name))
    return tree


def descendants(pid: int) -> set[int]:
    tree, found, todo = children(), set(), [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pids: set[int]) -> set[int]:
    tree = children()
    living = {child for kids in tree.values() for child in kids}
    return pids & living


def poll(condition: Callable[[], bool], what: str, deadline: float = DEADLINE) -> None:
    """Checks `condition` every few milliseconds until it holds; fails after `deadline` seconds."""
    end = time.monotonic() + deadline
    while not condition():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.02)


def many_archives(root: Path, count: int = ARCHIVES) -> Path:
    """root/content with `count` one-version packages: a build of it reads and writes in workers."""
    content = root / "content"
    for n in range(count):
        make_tarball(content, f"orphan-{n:03d}", "1.0.0")
    return content


def registry_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}


def serve(root: Path, port: int, output: int | object = subprocess.PIPE) -> subprocess.Popen[bytes]:
    """`registry-gen serve` of root/content on 127.0.0.1:port; it binds, then builds, then serves."""
    command = [sys.executable, "-m", "registry_gen", "serve", str(root / "content"), "--out", str(root / "public"),
               "--host", "127.0.0.1", "--port", str(port)]
    return subprocess.Popen(command, cwd=root, env=registry_env(), stdout=output, stderr=subprocess.STDOUT)  # type: ignore[arg-type]
