"""`registry-gen stats ACCESS_LOG…`: download counts from the static host's logs (registry_gen.stats)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from registry_gen.cli_options import ConfigOption
from registry_gen.settings import Settings


def register(app: typer.Typer, settings_from_options: Callable[..., Settings]) -> None:
    @app.command("stats")
    def stats(
        logs: Annotated[
            list[Path],
            typer.Argument(help="Access logs: nginx's combined format (gzip-compressed ones too) or CloudFront standard logs."),
        ],
        config: ConfigOption = None,
    ) -> None:
        """Count tarball downloads in access logs into each package's downloads.json (its page shows them).

        A log seen before is read from where the last run stopped: running again counts nothing twice."""
        from registry_gen.stats import run_stats

        report = run_stats(settings_from_options(config), logs)
        for log in report.logs:
            fold = log.fold
            if log.already:
                typer.echo(f"{log.path}: nothing new since the last run")
                continue
            skipped = ", ".join(f"{n} {reason}" for reason, n in sorted(fold.skipped.items()))
            typer.echo(f"{log.path}: {fold.lines} lines, {sum(fold.counts.values())} downloads"
                       + (f", skipped {sum(fold.skipped.values())} ({skipped})" if skipped else ""))  # fmt: skip
        if report.last_day is None:
            typer.echo("no downloads counted yet")
            return
        typer.echo(f"{report.packages_with_downloads} packages with downloads (data up to {report.last_day}); "
                   f"{report.packages_written} downloads.json files changed")  # fmt: skip
