"""Why build workers start from `forkserver` (registry_gen/workers.py): a worker forked from
`serve` holds a copy of its listening socket, so a worker that outlives the server keeps the port
bound. `serve` binds before its startup build, so that build runs with the socket open: while its
workers run, no process below `serve` may hold the listener (the socket's inode, read from
/proc/<pid>/fd). With plain `fork` every worker holds it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.hostile.processes import children, descendants, many_archives, poll, serve
from tests.hosts.servers import free_port, stop_process

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="the build starts workers only with two processors or more"),
]

ARCHIVES = 160  # five times the build's threshold for reading in workers, ten times for writing
MIN_WORKERS = 2  # the read pool's and the write pool's workers: four on two processors


def socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets the process holds open (none once it has exited)."""
    found = set()
    try:
        descriptors = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return found
    for descriptor in descriptors:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{descriptor}")
        except OSError:
            continue
        if matched := re.fullmatch(r"socket:\[(\d+)\]", target):
            found.add(int(matched.group(1)))
    return found


def listener_inode(pid: int, port: int) -> int | None:
    """The inode of the socket `pid` holds bound to 127.0.0.1:port (/proc/net/tcp), once it is."""
    held = socket_inodes(pid)
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].rsplit(":", 1)[1], 16) == port and int(fields[9]) in held:
            return int(fields[9])
    return None


def wait_for_listener(pid: int, port: int) -> int:
    found: list[int] = []

    def bound() -> bool:
        inode = listener_inode(pid, port)
        found.extend([] if inode is None else [inode])
        return bool(found)

    poll(bound, f"serve to bind port {port}")
    return found[0]


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def multiprocessing_helpers(pid: int) -> set[int]:
    """The children multiprocessing starts by exec (the fork server, the resource tracker): not workers."""
    return {child for child in children().get(pid, []) if "from multiprocessing." in command_line(child)}


def test_no_build_worker_holds_the_listening_socket_of_serve(tmp_path: Path) -> None:
    many_archives(tmp_path, ARCHIVES)
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as output:
        server = serve(tmp_path, port, output)
    try:
        listener = wait_for_listener(server.pid, port)
        workers: set[int] = set()
        holders: dict[int, str] = {}

        def build_over() -> bool:
            assert server.poll() is None, log.read_text()
            below = descendants(server.pid)
            workers.update(below - multiprocessing_helpers(server.pid))
            holders.update({pid: command_line(pid) for pid in below if listener in socket_inodes(pid)})
            return "listening on" in log.read_text()  # printed once the startup build is over

        poll(build_over, "the startup build to end")
        assert holders == {}, f"processes below serve hold its listening socket: {holders}"
        assert len(workers) >= MIN_WORKERS, f"the build ended before its workers were seen: {sorted(workers)}"
    finally:
        stop_process(server)
