"""`registry-gen migrate`: a thin typer command over registry_gen.migrate. The stores of plugins
(the user API's accounts) come from the entry-point group `registry_gen.migrators`."""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from registry_gen.cli_options import ConfigOption
from registry_gen.settings import Settings


class Target(str, Enum):
    postgres = "postgres"
    embedded = "embedded"


def installed_migrators() -> list[Any]:
    from registry_gen.migrate import MIGRATORS_GROUP
    from registry_gen.plugins import entry_points

    return [entry.load() for entry in sorted(entry_points(MIGRATORS_GROUP), key=lambda entry: entry.name)]


def register(app: typer.Typer, settings_from_options: Callable[..., Settings]) -> None:
    @app.command("migrate")
    def migrate(
        to: Annotated[Target, typer.Option("--to", help="postgres: onto PostgreSQL (and a bucket); embedded: back to SQLite files and folders.")],
        database_url: Annotated[str | None, typer.Option("--database-url", help="With --to postgres: the (empty) database to move into.")] = None,
        storage: Annotated[
            str | None, typer.Option("--storage", help="With --to postgres: an empty bucket for content, s3://BUCKET/PREFIX (default: content stays in content_dir).")
        ] = None,
        storage_endpoint_url: Annotated[str | None, typer.Option("--storage-endpoint-url", help="With --storage: the S3 endpoint (default: $AWS_ENDPOINT_URL, else AWS).")] = None,
        content_dir: Annotated[Path | None, typer.Option("--content-dir", help="With --to embedded: the (empty) folder content goes to (default: content_dir).")] = None,
        state_dir: Annotated[Path | None, typer.Option("--state-dir", help="With --to embedded: where the new ledger.sqlite3 goes (default: the configured state folder).")] = None,
        data_dir: Annotated[Path | None, typer.Option("--data-dir", help="With --to embedded: where the new users.sqlite3 goes (default: data_dir).")] = None,
        config: ConfigOption = None,
    ) -> None:
        """Move this registry onto PostgreSQL (and a bucket) or back, losing nothing; the target must be empty."""
        from registry_gen.errors import MigrationRefused
        from registry_gen.migrate import run_move, settings_lines, tally_line, to_embedded, to_postgres

        settings = settings_from_options(config)
        if to is Target.postgres:
            if database_url is None or content_dir or state_dir or data_dir:
                raise MigrationRefused("--to postgres takes --database-url URL (and --storage s3://...), not --content-dir/--state-dir/--data-dir")
            move = to_postgres(settings, database_url, storage, storage_endpoint_url)
        else:
            if database_url or storage or storage_endpoint_url:
                raise MigrationRefused("--to embedded moves the configured database_url and storage back: it takes no --database-url or --storage")
            move = to_embedded(settings, content_dir, state_dir, data_dir)
        for tally in run_move(move, installed_migrators()):
            typer.echo(f"copied and counted at both ends: {tally_line(tally)}")
        typer.echo("the source is left as it was. To run on the target, in registry.yaml:")
        for line in settings_lines(move):
            typer.echo(f"  {line}")
        typer.echo("then `registry-gen build` (the first build on the target is a full one).")
