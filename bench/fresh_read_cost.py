"""What a fresh proxied document read costs the API process behind nginx, in counts the machine's
load does not inflate: its CPU seconds (`/proc/PID/stat`) and, under `strace -c -f`, its syscalls
per read (issue 29, acceptance 5: the second install's document reads).

267 mirrored packages (the jest@29 install's count, made as bench/mirror_freshness.py makes them,
upstream nginx static), their tree built and their freshness rows fresh, behind the project's nginx
+ `registry-gen api`; each round reads every document once, in order, on one keep-alive client
connection (npm 11's Accept: full documents). Not part of `make bench`:

    .venv/bin/python -m bench.fresh_read_cost [--rounds 10] [--strace]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from bench import servers
from bench.bench_mirror import deployment
from bench.mirror_freshness import _name, synthesize
from bench.synthetic import CACHE_DIR

PACKAGES = 267


def api_pid(config: Path) -> int:
    """The `registry-gen api` process serving `config`."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"api" in argv and str(config).encode() in argv:
                return int(entry.name)
    raise RuntimeError(f"no registry-gen api process for {config}")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu(pid: int) -> dict[str, tuple[float, float]]:
    """User and system CPU seconds by thread (the main one runs waitress's loop)."""
    summed: dict[str, tuple[float, float]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            _, tail = (task / "stat").read_text().rsplit(")", 1)
            name = "main" if task.name == str(pid) else f"thread {task.name}"  # Python names its threads only for itself
            fields = tail.split()
            user, system = summed.get(name, (0.0, 0.0))
            summed[name] = (user + int(fields[11]) / tick, system + int(fields[12]) / tick)
    return summed


def read_all(url: str, names: list[str]) -> None:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    for name in names:
        connection.request("GET", "/" + name, headers={"Accept": "application/json"})
        answer = connection.getresponse()
        answer.read()
        if answer.status != 200:
            raise RuntimeError(f"{name}: {answer.status}")
    connection.close()


def _attached(pid: int, tracer: int) -> bool:
    for task in Path(f"/proc/{pid}/task").iterdir():
        status = (task / "status").read_text()
        if f"TracerPid:\t{tracer}\n" not in status:
            return False
    return True


def _lines(log: Path) -> int:
    return log.read_bytes().count(b"\n")


def traced(pid: int, url: str, names: list[str], work: Path) -> dict[str, int]:
    """Syscalls of every thread of `pid` over one round, by name, up to its access lines written."""
    out, log = work / "strace.txt", work / "registry" / "api.log"
    strace = subprocess.Popen(["strace", "-c", "-f", "-p", str(pid), "-o", str(out)], stderr=subprocess.DEVNULL)
    servers_poll(lambda: _attached(pid, strace.pid), "strace attached to every thread")
    logged = _lines(log)
    read_all(url, names)
    servers_poll(lambda: _lines(log) >= logged + len(names), "the round's access lines written")
    strace.send_signal(signal.SIGINT)
    strace.wait(timeout=30)
    counts = {}
    for line in out.read_text().splitlines():
        found = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$", line)
        if found and found[2] != "total":
            counts[found[2]] = int(found[1])
    return counts


def servers_poll(condition: Callable[[], bool], what: str, deadline: float = 60.0) -> None:
    end = time.monotonic() + deadline
    while not condition():
        if time.monotonic() > end:
            raise RuntimeError(f"not seen in {deadline:.0f} s: {what}")
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--strace", action="store_true")
    args = parser.parse_args()
    names = [_name(index) for index in range(PACKAGES)]
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-fresh-read-", dir=CACHE_DIR) as folder:
        work = Path(folder)
        os.chmod(work, 0o755)
        with servers.nginx(work / "upstream", work / "upstream-nginx") as upstream:
            config = synthesize(work / "registry", work / "upstream", upstream, PACKAGES)
            text = config.read_text()
            with deployment(work / "registry", text[text.index("uplinks:") :]) as url:
                pid = api_pid(work / "registry" / "registry.yaml")
                read_all(url, names)  # warm: each row and file read once
                per_round = []
                walls, threads_before = [], thread_cpu(pid)
                for _ in range(args.rounds):
                    before, started = cpu_seconds(pid), time.perf_counter()
                    read_all(url, names)
                    walls.append((time.perf_counter() - started) / len(names) * 1e3)
                    per_round.append((cpu_seconds(pid) - before) / len(names) * 1e6)
                print(f"API CPU per fresh read, µs, {args.rounds} rounds of {len(names)}: " + ", ".join(f"{v:.0f}" for v in per_round))
                threads_after = thread_cpu(pid)
                reads = args.rounds * len(names)
                for name, (user, system) in sorted(threads_after.items()):
                    user0, system0 = threads_before.get(name, (0.0, 0.0))
                    if user - user0 or system - system0:
                        print(f"  {name}: user {(user - user0) / reads * 1e6:.0f} µs, system {(system - system0) / reads * 1e6:.0f} µs a read")
                print(f"  all rounds: {sum(per_round) / len(per_round):.0f} µs a read (the clock counts 10 ms ticks)")
                print(f"  median {sorted(per_round)[len(per_round) // 2]:.0f} µs; wall per read (noisy) median "
                      f"{sorted(walls)[len(walls) // 2]:.2f} ms; load average {os.getloadavg()}")
                if args.strace and shutil.which("strace"):
                    counts = traced(pid, url, names, work)
                    total = sum(counts.values())
                    print(f"syscalls per read (strace -c -f, one round): {total / len(names):.1f} in all")
                    for call, count in sorted(counts.items(), key=lambda item: -item[1]):
                        print(f"  {call:<16} {count / len(names):6.2f}  ({count})")


if __name__ == "__main__":
    main()
