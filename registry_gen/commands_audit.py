"""`registry-gen audit-log`: every accepted write, with who made it (registry_gen.audit)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING, Annotated

import typer

from registry_gen.cli_options import ConfigOption
from registry_gen.settings import Settings

if TYPE_CHECKING:
    from registry_gen.audit import AccountEntry, AuditFilter


class AuditFormat(str, Enum):
    text = "text"
    jsonl = "jsonl"


AUDIT_SOURCES = "registry_gen.audit_sources"  # (settings, AuditFilter) -> account changes (the bundled user_api's)


def _account_changes(settings: Settings, wanted: AuditFilter) -> list[AccountEntry]:
    """The account changes `wanted` admits, from every installed source, in time order."""
    from registry_gen.plugins import entry_points

    found: list[AccountEntry] = []
    for entry in entry_points(group=AUDIT_SOURCES):
        found += entry.load()(settings, wanted)
    return sorted(found, key=lambda change: change.time)


def register(app: typer.Typer, settings_from_options: Callable[..., Settings]) -> None:
    @app.command("audit-log")
    def audit_log(
        since: Annotated[
            str | None, typer.Option("--since", help="Entries after this sequence number, or from this date (2025-01-31) or UTC time on.")
        ] = None,
        package: Annotated[str | None, typer.Option("--package", help="Only the writes to this package.")] = None,
        actor: Annotated[str | None, typer.Option("--actor", help="Only the writes of this user (or `registry-gen import`...).")] = None,
        account: Annotated[
            str | None, typer.Option("--account", help="Only the changes to this account (created, removed, role, password, tokens, groups, hooks).")
        ] = None,
        output: Annotated[
            AuditFormat, typer.Option("--format", help="text: one aligned line per entry; jsonl: one JSON object per line.")
        ] = AuditFormat.text,
        config: ConfigOption = None,
    ) -> None:
        """List the audit log: every accepted write and account change, oldest first, with who made it and from where."""
        from registry_gen.audit import AuditFilter, entry_json, entry_line, merged, parse_since, select
        from registry_gen.state import open_state
        from registry_gen.state.sqlite_ledger import LEDGER_DATABASE

        settings = settings_from_options(config)
        after_seq, from_time = parse_since(since)
        wanted = AuditFilter(after_seq, from_time, package, actor, account)
        accounts = _account_changes(settings, wanted)
        if not (settings.state_folder / LEDGER_DATABASE).is_file() and not accounts:
            typer.echo(f"no audit log yet: nothing was written to this registry ({settings.state_folder} holds no ledger)", err=True)
            return
        with contextlib.ExitStack() as stack:
            journal = stack.enter_context(open_state(settings).journal()) if (settings.state_folder / LEDGER_DATABASE).is_file() else None
            writes = select(journal, wanted) if journal is not None else iter(())
            for entry in merged(writes, accounts):
                typer.echo(json.dumps(entry_json(entry), separators=(",", ":")) if output is AuditFormat.jsonl else entry_line(entry))

    @app.command("audit-prune")
    def audit_prune(config: ConfigOption = None) -> None:
        """Drop the audit log's entries older than audit_keep_days (registry.yaml); without it, nothing goes."""
        from datetime import datetime, timezone

        from registry_gen.audit import prune_before
        from registry_gen.state import open_state
        from registry_gen.state.sqlite_ledger import LEDGER_DATABASE

        settings = settings_from_options(config)
        if settings.audit_keep_days is None:
            typer.echo("audit_keep_days is not set in registry.yaml: the audit log keeps every entry; nothing removed")
            return
        if not (settings.state_folder / LEDGER_DATABASE).is_file():
            typer.echo("no audit log yet: nothing removed")
            return
        before = prune_before(settings.audit_keep_days, datetime.now(timezone.utc).date())
        with open_state(settings).journal() as journal:
            removed = journal.prune(before)
        typer.echo(f"removed {removed} audit entries made before {before} (audit_keep_days: {settings.audit_keep_days})")
