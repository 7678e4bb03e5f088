"""`registry-gen api`'s start, from launch to ready, at 10,000 mirrored packages (issue 29's
restarts, issue 28's rolling restarts): CPU seconds of the process when it first answers anything
but 503, and what its temp-file sweep costs in-process (CPU seconds, folders listed).

    python -m bench.start_ready [--code /path/to/checkout] [--work FOLDER] [--repeats N]

`--code` runs another checkout's registry_gen (a before/after on one registry); `--work` keeps
the synthesised registry between runs (made once: content, tree, freshness rows).
Figures that the machine's load does not inflate: CPU seconds and counts, not wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import servers
from bench.bench_mirror import SCALE
from bench.mirror_freshness import synthesize

REPO = Path(__file__).resolve().parent.parent
TICKS = os.sysconf("SC_CLK_TCK")


def prepared(work: Path) -> Path:
    """The registry (content, built tree, freshness rows) under `work`, made once."""
    config = work / "registry" / "registry.yaml"
    if (work / "registry" / "public").is_dir():
        return config
    config = synthesize(work / "registry", work / "upstream", "http://127.0.0.1:9/", SCALE)
    subprocess.run([sys.executable, "-m", "registry_gen", "build", "-c", str(config)], check=True, capture_output=True,
                   env=_env(REPO), timeout=3600)  # fmt: skip
    return config


def _env(code: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    env["PYTHONPATH"] = str(code)
    return env


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14 and 15 of stat)


def start_to_ready(config: Path, code: Path) -> float:
    """CPU seconds `registry-gen api` spent from launch until it answered anything but 503."""
    from tests.hosts.servers import wait_for_api

    port = servers.free_port()
    api = subprocess.Popen([sys.executable, "-m", "registry_gen", "api", "--config", str(config), "--host", "127.0.0.1",
                            "--port", str(port)], cwd=config.parent, env=_env(code),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_for_api(port, api, deadline=600)
        return _cpu_seconds(api.pid)
    finally:
        servers.stop(api)


SWEEP_PROBE = """
import json, os, sys, time
from registry_gen.settings import load_settings
from user_api import serve_cli
listed = []
real = os.scandir
def counting(path=".", *args, **kwargs):
    listed.append(path)
    return real(path, *args, **kwargs)
os.scandir = counting
settings = load_settings(sys.argv[1])
started = time.process_time()
swept = serve_cli._sweep_temp_files(settings)
print(json.dumps({"cpu": time.process_time() - started, "folders": len(listed), "swept": len(swept)}))
"""


def sweep_cost(config: Path, code: Path) -> dict[str, Any]:
    """The start's sweep alone, in a process of `code`: CPU seconds and folders listed."""
    done = subprocess.run([sys.executable, "-c", SWEEP_PROBE, str(config)], check=True, capture_output=True, text=True,
                          env=_env(code), cwd=code, timeout=600)  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def tree_size(config: Path) -> tuple[int, int]:
    """(files, folders) under content/, public/ and the state folder: what a walk visits."""
    files = folders = 0
    registry = config.parent
    for root in (registry / "content", registry / "public", registry / "public.state"):
        for _folder, _dirs, names in os.walk(root):
            folders += 1
            files += len(names)
    return files, folders


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--code", type=Path, default=REPO)
    parser.add_argument("--work", type=Path, default=REPO / "bench" / "cache" / "start-ready")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    config = prepared(args.work)
    files, folders = tree_size(config)
    sweeps = [sweep_cost(config, args.code) for _ in range(args.repeats)]
    starts = [start_to_ready(config, args.code) for _ in range(args.repeats)]
    print(json.dumps({"code": str(args.code), "load": os.getloadavg(), "files": files, "folders": folders, "sweeps": sweeps,
                      "start_cpu": starts, "start_cpu_median": statistics.median(starts),
                      "sweep_cpu_median": statistics.median(s["cpu"] for s in sweeps), "at": time.strftime("%H:%M:%S")}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
