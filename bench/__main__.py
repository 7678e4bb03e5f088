"""`make bench` = `python -m bench [--quick] [--only NAME]`: runs every bench/bench_*.py module and
writes bench/REPORT.md and bench/REPORT.json.

Each module exposes `run(quick: bool) -> list[dict]`, one dict per figure with the keys figure,
value, unit, baseline, ratio, goal, note (and optionally `met`: True/False/None), plus an
optional `sections(quick: bool) -> dict[str, str]` of extra Markdown sections for the report.
Each module runs in its own process, so one that fails, hangs or crashes gives a figure row
with the error in its note and the others still run. Nothing here asserts: a goal not met is a
row that says so (and why), never a failed command.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
KEYS = ("figure", "value", "unit", "baseline", "ratio", "goal", "note")
MODULE_TIMEOUT = {True: 20 * 60, False: 90 * 60}  # quick, full: seconds per module
# The full run's build module generates, builds and caches the 1M-version registry the first
# time (and whenever registry_gen/ changes): hours on a small machine, minutes once cached.
FULL_RUN_TIMEOUT = {"bench_build": 5 * 3600}
# The scale-out bench starts PostgreSQL, an S3 server, nginx, Varnish and three api instances, and
# a first start on its loaded registry uploads the whole tree: 5 minutes on a quiet machine, far
# more on a shared one.
QUICK_RUN_TIMEOUT = {"bench_scaleout": 60 * 60}
STATIC_NOTES = BENCH_DIR / "PROFILE.md"


def discover() -> list[str]:
    return sorted(p.stem for p in BENCH_DIR.glob("bench_*.py"))


def failure_row(module: str, message: str) -> dict[str, Any]:
    return {
        "figure": f"{module}: did not run",
        "value": None,
        "unit": "",
        "baseline": None,
        "ratio": None,
        "goal": "",
        "note": message,
        "met": None,
    }


_GOAL = re.compile(r"^\s*(≤|<=|≥|>=|<|>)\s*([0-9][0-9,_.]*)\s*(×|x)?")


def judge(row: dict[str, Any]) -> bool | None:
    """Whether the figure meets its goal: the module's `met` when given, else read from a goal
    like "≤ 1.5×" (compared with the ratio) or "≥ 1500" (compared with the value)."""
    if "met" in row:
        return row["met"] if isinstance(row["met"], bool) or row["met"] is None else bool(row["met"])
    match = _GOAL.match(str(row.get("goal") or ""))
    if not match:
        return None
    operator, number, times = match.groups()
    target = float(number.replace(",", "").replace("_", ""))
    measured = row.get("ratio") if times else row.get("value")
    if not isinstance(measured, (int, float)):
        return None
    if operator in ("≤", "<="):
        return measured <= target
    if operator in ("≥", ">="):
        return measured >= target
    return measured < target if operator == "<" else measured > target


def normalise(module: str, row: Any) -> dict[str, Any]:
    if not isinstance(row, dict):
        return failure_row(module, f"returned a {type(row).__name__} instead of a dict: {row!r}"[:500])
    clean = {key: row.get(key) for key in KEYS}
    clean["figure"] = str(clean["figure"] or f"{module}: unnamed figure")
    clean["unit"] = str(clean["unit"] or "")
    clean["goal"] = str(clean["goal"] or "")
    clean["note"] = str(clean["note"] or "")
    if "met" in row:
        clean["met"] = row["met"]
    clean["met"] = judge(clean)
    clean["module"] = module
    return clean


# ---------------------------------------------------------------- one module, in its own process


def run_module_here(module: str, quick: bool, output: Path) -> int:
    """Child side: imports and runs one module, writes {"rows": [...], "sections": {...}}."""
    payload: dict[str, Any] = {"rows": [], "sections": {}}
    try:
        loaded = importlib.import_module(f"bench.{module}")
        payload["rows"] = list(loaded.run(quick))
        if callable(getattr(loaded, "sections", None)):
            payload["sections"] = dict(loaded.sections(quick))
    except BaseException as exc:  # noqa: BLE001 - the report must say what broke, whatever it was
        traceback.print_exc()
        payload["rows"].append(failure_row(module, f"error: {type(exc).__name__}: {exc}"[:2000]))
    output.write_text(json.dumps(payload, default=str))
    return 0


def run_module(module: str, quick: bool) -> tuple[list[dict[str, Any]], dict[str, str], float]:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-") as scratch:
        output = Path(scratch) / "rows.json"
        command = [sys.executable, "-m", "bench", "--run-module", module, "--output", str(output)]
        if quick:
            command.append("--quick")
        timeout = (QUICK_RUN_TIMEOUT if quick else FULL_RUN_TIMEOUT).get(module, MODULE_TIMEOUT[quick])
        try:
            proc = subprocess.run(command, cwd=REPO, timeout=timeout)
        except subprocess.TimeoutExpired:
            return [failure_row(module, f"timed out after {timeout} s")], {}, time.perf_counter() - started
        if not output.exists():
            return (
                [failure_row(module, f"the module's process ended with status {proc.returncode} and no figures")],
                {},
                time.perf_counter() - started,
            )
        payload = json.loads(output.read_text())
    rows = [normalise(module, row) for row in payload.get("rows", [])]
    if not rows:
        rows = [failure_row(module, "returned no figures")]
    sections = {str(k): str(v) for k, v in (payload.get("sections") or {}).items()}
    return rows, sections, time.perf_counter() - started


# ---------------------------------------------------------------- the report


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = ""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory = f"{int(line.split()[1]) // 1024} MB"
                break
    except OSError:
        pass
    return {
        "cores": os.cpu_count(),
        "cpu": model or platform.processor(),
        "memory": memory,
        "load_average_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def git_commit() -> str:
    try:
        proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True, timeout=30)
        return proc.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value == 0:
            return "0"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 100:
            return f"{value:.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        if abs(value) >= 1:
            return f"{value:.2f}"
        return f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: dict[str, Any]) -> str:
    info = report["machine"]
    load = info.get("load_average_at_start")
    lines = [
        "# Benchmark report",
        "",
        f"- Date: {report['date']}",
        f"- Mode: {'quick (`--quick`)' if report['quick'] else 'full'}"
        + (f", only {', '.join(report['modules'])}" if report.get("only") else ""),
        f"- Machine: {info['cores']} cores ({info['cpu']}), {info['memory']} RAM, {info['platform']}, Python {info['python']}",
        f"- Load average when the run started: {', '.join(f'{x:.2f}' for x in load) if load else 'unknown'}"
        " (other work on the machine slows every figure; ratios against a baseline measured in the same run"
        " are what to compare)",
        f"- Commit: {report['commit']}",
        f"- Duration: {report['seconds']:.0f} s",
        *_merged_lines(report),
        "",
        "Every figure is a ratio against a baseline measured in the same run; absolute values are shown for",
        "context. `met?` is judged against the goal; where a goal is not met, the note says what bounds it.",
        "",
        "| figure | value | unit | baseline | ratio | goal | met? | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in report["figures"]:
        ratio = f"{fmt(row['ratio'])}×" if isinstance(row["ratio"], (int, float)) else fmt(row["ratio"])
        met = {True: "yes", False: "**no**", None: "—"}[row["met"]]
        lines.append(
            "| "
            + " | ".join(
                cell(x)
                for x in (row["figure"], fmt(row["value"]), row["unit"], fmt(row["baseline"]), ratio, row["goal"] or "—", met, row["note"])
            )
            + " |"
        )
    lines.append("")
    lines.append("Module run times: " + ", ".join(f"{m} {s:.0f} s" for m, s in report["module_seconds"].items()))
    lines.append("")
    for title, body in report["sections"].items():
        lines += [f"## {title}", "", body.strip(), ""]
    return "\n".join(lines)


def _run_of(report: dict[str, Any]) -> dict[str, Any]:
    return {"date": report["date"], "commit": report["commit"], "quick": report["quick"]}


def merged(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """`old` with the figures, sections and times of `new`'s modules in place of their own (or
    added): a module run again does not cost the full run of every other. Each module's run
    (date, commit, mode) is kept under `runs`, and the report names the ones that differ."""
    ran = set(new["modules"])
    report = dict(old)
    report["runs"] = {module: _run_of(old) for module in old["modules"]} | old.get("runs", {})
    report["runs"].update({module: _run_of(new) for module in new["modules"]})
    report["figures"] = [row for row in old["figures"] if row.get("module") not in ran] + new["figures"]
    report["sections"] = {**old["sections"], **new["sections"]}
    report["module_seconds"] = {**old["module_seconds"], **new["module_seconds"]}
    report["modules"] = list(old["modules"]) + [module for module in new["modules"] if module not in old["modules"]]
    return report


def _merged_lines(report: dict[str, Any]) -> list[str]:
    own = _run_of(report)
    return [
        f"- {module} from another run: {run['date']}, {'quick' if run['quick'] else 'full'}, commit {run['commit']}"
        for module, run in report.get("runs", {}).items()
        if run != own
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description="Run the benchmarks and write bench/REPORT.md.")
    parser.add_argument("--quick", action="store_true", help="a few minutes: smaller registries, fewer repeats")
    parser.add_argument("--only", action="append", metavar="NAME", help="run only this module (bench_NAME or NAME); repeatable")
    parser.add_argument("--report-dir", type=Path, default=BENCH_DIR, help="where REPORT.md and REPORT.json go")
    parser.add_argument("--merge", action="store_true",
                        help="keep the other modules' figures of the REPORT.json already there; this run's modules replace theirs")
    parser.add_argument("--run-module", help=argparse.SUPPRESS)
    parser.add_argument("--output", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.run_module:
        return run_module_here(args.run_module, args.quick, args.output)

    available = discover()
    modules = available
    if args.only:
        wanted = [n if n.startswith("bench_") else f"bench_{n}" for n in args.only]
        unknown = [n for n in wanted if n not in available]
        if unknown:
            parser.error(f"no module {', '.join(unknown)} in bench/ (have: {', '.join(available)})")
        modules = wanted

    started = time.perf_counter()
    report: dict[str, Any] = {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "quick": args.quick,
        "only": bool(args.only),
        "modules": modules,
        "machine": machine(),
        "commit": git_commit(),
        "figures": [],
        "sections": {},
        "module_seconds": {},
    }
    for module in modules:
        print(f"bench: running {module}{' (quick)' if args.quick else ''} ...", file=sys.stderr, flush=True)
        rows, sections, seconds = run_module(module, args.quick)
        report["figures"].extend(rows)
        report["sections"].update(sections)
        report["module_seconds"][module] = round(seconds, 1)
        for row in rows:
            print(f"  {row['figure']}: {fmt(row['value'])} {row['unit']} (goal {row['goal'] or '—'}, met {row['met']})", file=sys.stderr)
    if STATIC_NOTES.exists():
        report["sections"]["Profile and findings"] = STATIC_NOTES.read_text()
    report["seconds"] = time.perf_counter() - started
    args.report_dir.mkdir(parents=True, exist_ok=True)
    if args.merge and (args.report_dir / "REPORT.json").exists():
        report = merged(json.loads((args.report_dir / "REPORT.json").read_text()), report)
    (args.report_dir / "REPORT.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (args.report_dir / "REPORT.md").write_text(render_markdown(report) + "\n")
    print(f"bench: wrote {args.report_dir / 'REPORT.md'} and REPORT.json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
