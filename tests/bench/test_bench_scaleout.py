"""bench_scaleout runs on a tiny size (real PostgreSQL, moto and SeaweedFS, nginx --from-bucket,
Varnish, three api instances) and gives every figure; and `python -m bench --merge` puts one module's new figures
into a report without dropping the others'."""

from __future__ import annotations

import pytest

from bench.__main__ import merged, render_markdown
from bench.bench_scaleout import Sizes, run

pytestmark = pytest.mark.slow


def test_the_scaleout_bench_runs_on_a_tiny_registry() -> None:
    rows = {row["figure"]: row for row in run(True, Sizes(rounds=2, publishes=6, seconds=120, versions=10))}
    assert len(rows) == 8
    origin = rows["scale-out: the origin (nginx from the bucket) serves the new version right after the 201"]
    assert origin["value"] == 100.0  # the 201 comes after the upload: no timing in this
    assert "2 of 2 reads were a HIT" in origin["note"]  # the cache really held the old document
    three = rows["scale-out: publishes per second, 3 api instances"]
    assert three["value"] > 0 and three["ratio"] > 0 and "0 failed" in three["note"] and "Model:" in three["note"]
    for store, server in (("bucket", "moto"), ("SeaweedFS bucket", "SeaweedFS")):  # the same registry on each S3 server
        share = rows[f"scale-out: publish server share on PostgreSQL + {store}, registry of 10 versions"]
        assert f"the S3 server: {server};" in share["note"] and "median of 2" in share["note"], share["note"]
    for figure, row in rows.items():
        assert isinstance(row["value"], float), figure


def _report(modules: list[str], date: str, figures: list[str]) -> dict:
    return {"date": date, "commit": date, "quick": False, "modules": modules, "machine": {}, "seconds": 1.0,
            "figures": [{"module": m, "figure": f} for m, f in zip(modules, figures, strict=True)],
            "sections": {m: f for m, f in zip(modules, figures, strict=True)}, "module_seconds": dict.fromkeys(modules, 1.0)}  # fmt: skip


def test_a_merge_replaces_the_modules_run_again_and_names_their_run() -> None:
    old = _report(["bench_a", "bench_b"], "old", ["a-old", "b-old"])
    new = _report(["bench_b", "bench_c"], "new", ["b-new", "c-new"])
    report = merged(old, new)
    assert [row["figure"] for row in report["figures"]] == ["a-old", "b-new", "c-new"]
    assert report["modules"] == ["bench_a", "bench_b", "bench_c"] and report["sections"]["bench_b"] == "b-new"
    assert report["runs"]["bench_a"]["date"] == "old" and report["runs"]["bench_c"]["date"] == "new"
    again = merged(report, _report(["bench_a"], "newer", ["a-newer"]))
    assert again["runs"]["bench_c"]["date"] == "new" and again["runs"]["bench_a"]["date"] == "newer"
    assert [row["figure"] for row in again["figures"]] == ["b-new", "c-new", "a-newer"]
    machine = {"cores": 2, "cpu": "x", "memory": "1 MB", "platform": "p", "python": "3", "load_average_at_start": None}
    text = render_markdown({**again, "machine": machine, "figures": []})
    assert "- bench_a from another run: newer" in text and "- bench_b from another run: new," in text
