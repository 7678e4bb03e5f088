"""`registry-gen mirror refresh|prefetch|why|make-local`: thin typer commands over registry_gen.mirror.

They work on content/ and the tree as a running server does (the same write lock), so they may
run beside `registry-gen serve` or `api`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from registry_gen.errors import ConfigError, RegistryError
from registry_gen.settings import Settings

if TYPE_CHECKING:
    from registry_gen.mirror.operations import Report
    from registry_gen.mirror.service import MirrorService

ConfigOption = Annotated[
    Path | None, typer.Option("--config", "-c", help="YAML config file (default: ./registry.yaml).", envvar="REGISTRY_GEN_CONFIG")
]


@contextmanager
def mirror_service(settings: Settings) -> Iterator[MirrorService]:
    """The service over the configured uplinks; a RegistryError becomes one `error:` line."""
    from registry_gen.mirror.service import MirrorService

    try:
        if not settings.packages.proxies:
            raise ConfigError("no packages: pattern has proxy: in the config, so nothing is mirrored (see docs/mirror.md)")
        service = MirrorService(settings)
        try:
            yield service
        finally:
            service.settle()
            service.state.close()
    except RegistryError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


def operate(settings: Settings, operation: Callable[[MirrorService], Report], what: str) -> None:
    """Runs one operation over the mirror and prints its report (`what`: the verb for what it did)."""
    with mirror_service(settings) as service:
        report = operation(service)
    print_report(report, what)


def print_report(report: Report, what: str) -> None:
    for line in report.skipped:
        typer.echo(f"skipped: {line}", err=True)
    for line in report.failed:
        typer.echo(f"failed: {line}", err=True)
    typer.echo(f"{what} {len(report.done)}, skipped {len(report.skipped)}, failed {len(report.failed)}")
    if report.failed:
        raise typer.Exit(1)


def register(app: typer.Typer, settings_from_options: Callable[..., Settings]) -> None:
    group = typer.Typer(help="The mirror of upstream registries (uplinks): refresh, prefetch, explain.", no_args_is_help=True)

    @group.command("refresh")
    def refresh_command(
        pattern: Annotated[str, typer.Argument(help="Mirrored packages to refresh, as a packages: pattern (`*`, `**`).")] = "**",
        config: ConfigOption = None,
    ) -> None:
        """Ask the uplinks now for the mirrored packages matching PATTERN; land and build what changed."""
        from registry_gen.mirror.operations import refresh

        operate(settings_from_options(config), lambda service: refresh(service, pattern), "refreshed")

    @group.command("prefetch")
    def prefetch_command(
        sources: Annotated[list[str], typer.Argument(help="Lockfiles (package-lock.json, pnpm-lock.yaml, yarn.lock) or specs (name@range).")],
        config: ConfigOption = None,
    ) -> None:
        """Fill the mirror ahead of an outage: every package a lockfile resolves, or a spec and its dependencies."""
        from registry_gen.mirror.operations import prefetch

        operate(settings_from_options(config), lambda service: prefetch(service, sources), "fetched")

    @group.command("why")
    def why_command(
        spec: Annotated[str, typer.Argument(help="NAME or NAME@VERSION.")],
        config: ConfigOption = None,
    ) -> None:
        """Explain what the mirror does with a package (and a version): proxied or local, held back or served, and why."""
        at = spec.find("@", 1)
        name, version = (spec[:at], spec[at + 1 :]) if at > 0 else (spec, None)
        with mirror_service(settings_from_options(config)) as service:
            for line in service.why(name, version or None):
                typer.echo(line)

    @group.command("make-local")
    def make_local_command(
        name: Annotated[str, typer.Argument(help="A mirrored package.")],
        config: ConfigOption = None,
    ) -> None:
        """Turn a mirrored package into this registry's own: it keeps the versions held here and takes publishes."""
        with mirror_service(settings_from_options(config)) as service:
            kept = service.make_local(name)
        typer.echo(f"{name} is now a local package with {len(kept)} versions ({', '.join(kept) or 'none'}); it is never proxied again")

    app.add_typer(group, name="mirror")
