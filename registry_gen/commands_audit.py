"""`registry-gen audit-log`: every accepted write, with who made it (registry_gen.audit)."""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import Enum
from typing import Annotated

import typer

from registry_gen.cli_options import ConfigOption
from registry_gen.settings import Settings


class AuditFormat(str, Enum):
    text = "text"
    jsonl = "jsonl"


def register(app: typer.Typer, settings_from_options: Callable[..., Settings]) -> None:
    @app.command("audit-log")
    def audit_log(
        since: Annotated[
            str | None, typer.Option("--since", help="Entries after this sequence number, or from this date (2025-01-31) or UTC time on.")
        ] = None,
        package: Annotated[str | None, typer.Option("--package", help="Only the writes to this package.")] = None,
        actor: Annotated[str | None, typer.Option("--actor", help="Only the writes of this user (or `registry-gen import`...).")] = None,
        output: Annotated[
            AuditFormat, typer.Option("--format", help="text: one aligned line per entry; jsonl: one JSON object per line.")
        ] = AuditFormat.text,
        config: ConfigOption = None,
    ) -> None:
        """List the audit log: every accepted write, oldest first, with who made it and from where."""
        from registry_gen.audit import AuditFilter, entry_json, entry_line, parse_since, select
        from registry_gen.state import open_state
        from registry_gen.state.sqlite_ledger import LEDGER_DATABASE

        settings = settings_from_options(config)
        after_seq, from_time = parse_since(since)
        if not (settings.state_folder / LEDGER_DATABASE).is_file():
            typer.echo(f"no audit log yet: nothing was written to this registry ({settings.state_folder} holds no ledger)", err=True)
            return
        wanted = AuditFilter(after_seq, from_time, package, actor)
        with open_state(settings).journal() as journal:
            for entry in select(journal, wanted):
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
