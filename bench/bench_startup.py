"""CLI start-up (issue 15, goal 2): `registry-gen --help` and a no-change `registry-gen build` of a
small tree, whole processes, against `python -c pass` measured in the same run. Where a figure
misses its goal the note names the imports that cost most (`python -X importtime`).

Run alone with `python -m bench --only startup [--quick]`.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CLI = Path(sys.executable).parent / "registry-gen"
STARTUP_GOAL_S = 0.12
BASE_URL = "http://127.0.0.1:4873/"
_sections: dict[str, str] = {}


def environment() -> dict[str, str]:
    """This checkout first on the path; bytecode caching on, as an installed CLI has it."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(REPO)
    return env


def timed_runs(command: list[str], repeats: int, cwd: Path) -> list[float]:
    """Wall seconds of each run, after one unmeasured run (bytecode written, page cache warm)."""
    env = environment()
    subprocess.run(command, cwd=cwd, env=env, capture_output=True, timeout=120, check=True)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run(command, cwd=cwd, env=env, capture_output=True, timeout=120, check=True)
        times.append(time.perf_counter() - started)
    return times


def import_profile(command: list[str], cwd: Path, top: int = 12) -> list[tuple[float, str]]:
    """The costliest imports of one run (cumulative ms, module), from `-X importtime`."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *command], cwd=cwd, env=environment(), capture_output=True, text=True, timeout=120
    )
    rows = []
    for line in proc.stderr.splitlines():
        parts = line.removeprefix("import time:").split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            name = parts[2].rstrip()
            depth = (len(name) - len(name.lstrip())) // 2
            if depth <= 1:  # top-level imports and their direct children: where the time is decided
                rows.append((int(parts[1]) / 1000, name.strip()))
    return sorted(rows, reverse=True)[:top]


def small_tree(scratch: Path) -> tuple[Path, Path]:
    """The repository's demo content/ (7 packages), built once so the measured build changes nothing."""
    content, out = scratch / "content", scratch / "public"
    shutil.copytree(REPO / "content", content)
    subprocess.run([str(CLI), "build", str(content), "-o", str(out), "--base-url", BASE_URL], cwd=scratch, env=environment(),
                   capture_output=True, timeout=300, check=True)
    return content, out


def startup_row(label: str, times: list[float], floor: float, profile: list[tuple[float, str]]) -> dict[str, Any]:
    value = statistics.median(times)
    met = value <= STARTUP_GOAL_S
    note = f"median of {len(times)} whole-process runs (min {min(times):.3f} s); baseline = `python -c pass`, same interpreter"
    if not met:
        costly = ", ".join(f"{name} {ms:.0f} ms" for ms, name in profile[:8])
        note += f". Bounded by imports (-X importtime, cumulative, top level): {costly}"
    return {
        "figure": f"CLI start-up: {label}",
        "value": round(value, 3),
        "unit": "s",
        "baseline": round(floor, 3),
        "ratio": round(value / floor, 2),
        "goal": f"≤ {STARTUP_GOAL_S} s",
        "met": met,
        "note": note,
    }


def run(quick: bool) -> list[dict[str, Any]]:
    repeats = 7 if quick else 15
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as name:
        scratch = Path(name)
        floor = statistics.median(timed_runs([sys.executable, "-c", "pass"], repeats, scratch))
        help_cmd = [str(CLI), "--help"]
        help_times = timed_runs(help_cmd, repeats, scratch)
        help_profile = import_profile(["-m", "registry_gen.cli", "--help"], scratch)
        content, out = small_tree(scratch)
        build_args = ["build", str(content), "-o", str(out), "--base-url", BASE_URL]
        build_times = timed_runs([str(CLI), *build_args], repeats, scratch)
        build_profile = import_profile(["-m", "registry_gen.cli", *build_args], scratch)
    for label, profile in (("registry-gen --help", help_profile), ("no-change build", build_profile)):
        _sections[f"Start-up imports: {label}"] = (
            "`python -X importtime`, imports at the top two levels, cumulative ms:\n\n```\n"
            + "\n".join(f"{ms:8.1f}  {module}" for ms, module in profile)
            + "\n```"
        )
    return [
        startup_row("`registry-gen --help`", help_times, floor, help_profile),
        startup_row("no-change `registry-gen build` of the 7-package demo tree", build_times, floor, build_profile),
    ]


def sections(quick: bool) -> dict[str, str]:
    return dict(_sections)
