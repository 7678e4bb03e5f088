"""`registry-gen verify [OUT_DIR]`: one line per problem of a built tree; exit 1 when there are any."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from registry_gen.cli_options import ConfigOption
from registry_gen.settings import Settings


def register(app: typer.Typer, settings_from_options: Callable[..., Settings]) -> None:
    def verify_command(
        out_dir: Annotated[Path | None, typer.Argument(metavar="OUT_DIR", help="The built tree (default from config, else ./public).")] = None,
        config: ConfigOption = None,
        allow_external: Annotated[
            bool,
            typer.Option("--allow-external", help="A dependency absent from the tree is listed as external, not a problem."),
        ] = False,
    ) -> Any:
        """Check a built tree: tarballs and hashes, dist-tags, twins, spellings, the dependency closure."""
        from registry_gen.verify import verify_tree

        settings = settings_from_options(config, out_dir=out_dir)
        proxied = (lambda name: settings.packages.proxy_rule(name) is not None) if settings.packages.proxies else None
        report = verify_tree(settings.out_dir, allow_external=allow_external, settings=settings, proxied=proxied)
        for problem in report.problems:
            typer.echo(str(problem))
        for note in report.notes:
            typer.echo(f"note: {note}")
        for external in report.external:
            typer.echo(f"external: {external}")
        typer.echo(f"verified {settings.out_dir}: {report.summary()}", err=True)
        if not report.ok:
            raise typer.Exit(1)

    app.command("verify")(verify_command)
