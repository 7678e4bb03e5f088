"""What a full build asks of the SQLite state, counted (executions of each statement, executemany
rows included): the parent process of a one-process build spent ~1 CPU-s of the real corpus's
build on ~140,000 of them, most written again and again to the same few rows."""

from __future__ import annotations

import collections
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from registry_gen import site
from registry_gen.build import indexes, run_build
from tests.generator.test_full_build_batches import NAMES, _settings, _web


def _counted_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[collections.Counter[str], Path]:
    settings = _settings(tmp_path)
    _web(settings.content_dir)
    statements: collections.Counter[str] = collections.Counter()
    connect = sqlite3.connect

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        db = connect(*args, **kwargs)
        db.set_trace_callback(lambda sql: statements.update([" ".join(sql.split())]))
        return db

    monkeypatch.setattr(sqlite3, "connect", traced)
    result = run_build(settings)
    monkeypatch.undo()
    assert not result.errors and result.rebuilt == len(NAMES)
    return statements, settings.state_folder / "state.sqlite3"


def _count(statements: collections.Counter[str], start: str) -> int:
    return sum(n for sql, n in statements.items() if sql.startswith(start))


def _rows(state: Path, table: str) -> int:
    db = sqlite3.connect(state)
    try:
        return int(db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
    finally:
        db.close()


def test_a_full_build_writes_each_prefix_count_and_leaf_count_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Nine names under web-: each moved the counts of we, web, web-, web-0 (one upsert per package
    # and prefix, 45) and set its shards' leaf counts one package at a time.
    statements, state = _counted_build(tmp_path, monkeypatch)
    assert _count(statements, "INSERT INTO prefixes") == _rows(state, "prefixes") == 13
    assert _count(statements, "UPDATE search_leaves SET count") <= _rows(state, "search_leaves")
    assert _count(statements, "INSERT INTO counters (key, value) VALUES") == 2  # packages and versions, once each


def test_a_full_build_reads_each_plan_once_and_each_package_s_inputs_twice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A plan was read for every link of every package written and every dependency its page shows;
    # a package's inputs were read to plan it, to predict its links, and to write it.
    statements, _ = _counted_build(tmp_path, monkeypatch)
    plan_reads = [n for sql, n in statements.items() if sql.startswith("SELECT action, present, was_present FROM temp.full_plans WHERE name =")]
    assert len(plan_reads) >= len(NAMES) and max(plan_reads) == 1
    assert _count(statements, "SELECT version, stamp FROM first_seen WHERE name =") == 2 * len(NAMES)


def test_a_full_build_looks_for_the_forgotten_archives_once_per_batch_it_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    statements, _ = _counted_build(tmp_path, monkeypatch)
    assert _count(statements, "SELECT 1 FROM temp.sqlite_master WHERE name = 'forgotten_archives'") == 1  # one batch of nine
    assert _count(statements, "SELECT path, size, mtime_ns") <= 1 + 2 * len(NAMES)  # the batch's, then two package inputs each


def test_a_full_build_asks_the_packages_table_of_no_name_its_plans_do_not_hold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every package the state knows has a plan in a full build: a dependency without one (not-here,
    # each @types/ name a page looks for) is not served, with no question to the packages table.
    statements, _ = _counted_build(tmp_path, monkeypatch)
    assert _count(statements, "SELECT present FROM packages WHERE name =") == 0


def test_a_full_build_answers_each_search_leaf_neighbourhood_without_asking_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each package asked the leaf around it in each of its shards: a SELECT per package and shard
    # (12,523 over the real corpus), where the session now holds the leaves, read in one query.
    statements, state = _counted_build(tmp_path, monkeypatch)
    assert _rows(state, "search_leaves") > 1
    assert _count(statements, "SELECT bound, count FROM search_leaves") == _count(statements, "SELECT 1 FROM search_leaves") == 0
    assert _count(statements, "SELECT key, bound, count FROM search_leaves") == 1


def test_a_full_build_looks_for_an_absent_leaf_folder_without_resolving_or_walking_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each one-leaf shard's leaf folder is removed in case an earlier cut left it: absent in a first
    # full build, where each asked two path resolutions and a folder walk (~850 shards, 0.085 CPU-s
    # over the real corpus, in the parent's serial tail after the workers).
    settings = _settings(tmp_path)
    _web(settings.content_dir)
    removals: collections.Counter[str] = collections.Counter()
    remove_tree = indexes.remove_tree

    def counted(root: Path, relative: str) -> bool:
        removals[relative.rsplit("/", 1)[0]] += 1
        return remove_tree(root, relative)

    monkeypatch.setattr(indexes, "remove_tree", counted)
    result = run_build(settings)
    assert not result.errors and result.rebuilt == len(NAMES)
    shards = list((settings.out_dir / "-/web/search").glob("*.json"))
    assert len(shards) > 10 and removals[site.SEARCH_SHARD_ROOT] == 0
    # A leaf folder that is there is still removed, with each of its files named.
    stale = settings.out_dir / site.SEARCH_SHARD_ROOT / "we" / "stale.json"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"{}")
    result = run_build(settings, full=True)
    assert not stale.parent.exists() and f"{site.SEARCH_SHARD_ROOT}/we/stale.json" in result.removed
