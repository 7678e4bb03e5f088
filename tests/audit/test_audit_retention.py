"""The audit log's retention: `audit_keep_days` in registry.yaml and `registry-gen audit-prune`
drop the entries older than that many days, and only those, package writes and account changes
alike; without the key nothing goes; a write still pending (the recovery needs it) stays."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from registry_gen.settings import load_settings
from registry_gen.state import JournalEvent, open_state
from user_api.store import open_user_store


def _cli(root: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "registry_gen", *args, "--config", str(root / "registry.yaml")], cwd=root,
                          input=stdin, capture_output=True, text=True, timeout=120)  # fmt: skip


def _write(root: Path, package: str, time: str, *, finish: bool = True) -> None:
    with open_state(load_settings(root / "registry.yaml")).journal() as journal:
        write_id = journal.begin_write({}, [JournalEvent("package:change", package)], "alice", "id-a", time, {"address": "127.0.0.1"})
        if finish:
            journal.finish_write(write_id, done=True)


def _listed(root: Path) -> list[str]:
    done = _cli(root, "audit-log", "--format", "jsonl")
    assert done.returncode == 0, done.stderr
    return [json.loads(line)["package"] for line in done.stdout.splitlines()]


def test_prune_drops_only_entries_older_than_the_configured_days(tmp_path: Path) -> None:
    root = tmp_path
    config = root / "registry.yaml"
    config.write_text("content_dir: content\nout_dir: public\n")
    now = datetime.now(timezone.utc)
    stamp = lambda days: (now - timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%S.000Z")  # noqa: E731
    _write(root, "ancient", stamp(400))
    _write(root, "last-month", stamp(29))
    _write(root, "today", stamp(0))
    _write(root, "pending", stamp(400), finish=False)

    kept = _cli(root, "audit-prune")
    assert kept.returncode == 0 and "nothing removed" in kept.stdout and _listed(root) == ["ancient", "last-month", "today"]

    config.write_text("content_dir: content\nout_dir: public\naudit_keep_days: 30\n")
    pruned = _cli(root, "audit-prune")
    assert pruned.returncode == 0 and "removed 1 package write entries" in pruned.stdout, pruned.stderr
    assert _listed(root) == ["last-month", "today"]
    with open_state(load_settings(config)).journal() as journal:
        assert len(journal.pending_writes()) == 1  # the recovery still resolves it
    assert "removed 0 package write entries" in _cli(root, "audit-prune").stdout


def test_a_wrong_retention_is_one_error_line_naming_the_key(tmp_path: Path) -> None:
    (tmp_path / "registry.yaml").write_text("audit_keep_days: 0\n")
    done = _cli(tmp_path, "audit-prune")
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and "audit_keep_days" in done.stderr and "Traceback" not in done.stderr


def _age_account_entries(root: Path, account: str, days: int) -> None:
    """Moves `account`'s entries `days` back in time (the log itself has no route or command for it)."""
    store = open_user_store(load_settings(root / "registry.yaml"))
    try:
        with store.dialect.write() as tx:  # type: ignore[attr-defined]
            old = (datetime.now(timezone.utc) - timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
            tx.run("UPDATE account_audit SET time = ? WHERE subject = ?", (old, account))
    finally:
        store.close()


def test_prune_drops_old_account_changes_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # registry.yaml's relative paths are the working folder's, as for the CLI
    config = tmp_path / "registry.yaml"
    config.write_text("content_dir: content\nout_dir: public\n")
    for name in ("old-timer", "newcomer"):
        added = _cli(tmp_path, "user", "add", name, "--password-stdin", stdin=f"{name}-password-1\n")
        assert added.returncode == 0, added.stderr
    _age_account_entries(tmp_path, "old-timer", 400)

    config.write_text("content_dir: content\nout_dir: public\naudit_keep_days: 30\n")
    pruned = _cli(tmp_path, "audit-prune")
    assert pruned.returncode == 0 and "and 1 account change entries" in pruned.stdout, (pruned.stdout, pruned.stderr)
    listed = _cli(tmp_path, "audit-log", "--format", "jsonl")
    assert [json.loads(line)["account"] for line in listed.stdout.splitlines()] == ["newcomer"], listed.stdout
