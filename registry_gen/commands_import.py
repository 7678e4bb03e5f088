"""`registry-gen import verdaccio|registry|lockfile` and `registry-gen export verdaccio`: thin
typer commands over registry_gen.importers.run and .remote. Accounts (`--htpasswd`) come from the entry-point
group `registry_gen.account_importers` (the bundled user_api provides `htpasswd`), so this
package never imports the user API."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from registry_gen.errors import RegistryError
from registry_gen.importers.model import DEFAULT_DEADLINE, Skipped, Summary
from registry_gen.plugins import entry_points
from registry_gen.settings import Settings

ACCOUNT_IMPORTERS = "registry_gen.account_importers"
ConfigOption = Annotated[
    Path | None, typer.Option("--config", "-c", help="YAML config file (default: ./registry.yaml).", envvar="REGISTRY_GEN_CONFIG")
]
FromOption = Annotated[str | None, typer.Option("--from", help="Registry URL (default: `npm config get registry`).")]
ContentOption = Annotated[Path | None, typer.Option("--content", help="Folder of archives (default from config, else ./content).")]
OutOption = Annotated[Path | None, typer.Option("--out", "-o", help="Output folder (default from config, else ./public).")]
TokenOption = Annotated[str | None, typer.Option(
    "--token", help="Bearer token for the --from registry (sent to its origin only, never on a redirect elsewhere).",
    envvar="REGISTRY_GEN_IMPORT_TOKEN",
)]  # fmt: skip
MergeIntoOption = Annotated[list[str] | None, typer.Option(
    "--merge-into", metavar="NAME",
    help="Merge the import into NAME although it is a package of this registry (published here, added by hand, or imported "
    "from elsewhere); repeat for each. Without it such a package is refused and nothing is written for it.",
)]  # fmt: skip
DeadlineOption = Annotated[float, typer.Option(
    "--download-deadline", metavar="SECONDS", min=0.1,
    help="Seconds one download (a document or a tarball, redirects included) may take in all.",
)]  # fmt: skip


class RichProgress:
    """A rich progress bar on stderr (drawn only on a terminal)."""

    def __init__(self, label: str) -> None:
        from rich.console import Console
        from rich.progress import Progress

        self.bar = Progress(console=Console(stderr=True), transient=True, disable=not sys.stderr.isatty())
        self.label = label
        self.task: Any = None

    def start(self, total: int) -> None:
        self.bar.start()
        self.task = self.bar.add_task(self.label, total=total)

    def advance(self, label: str) -> None:
        self.bar.update(self.task, advance=1, description=f"{self.label} {label}")

    def stop(self) -> None:
        self.bar.stop()


@contextmanager
def reported(label: str) -> Iterator[RichProgress]:
    """A progress bar for the body; a RegistryError becomes one `error:` line and exit code 1."""
    progress = RichProgress(label)
    try:
        yield progress
    except RegistryError as exc:
        progress.stop()
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    except OSError as exc:
        progress.stop()
        typer.echo(f"error: {exc.filename or 'import'}: {exc.strerror or exc}; nothing half-written reached content/", err=True)
        raise typer.Exit(1) from None
    progress.stop()


def print_summary(summary: Summary) -> None:
    for entry in summary.skipped:
        typer.echo(f"{entry.kind}: {entry}", err=True)
    for problem in summary.unresolved:
        typer.echo(f"not closed: {problem}", err=True)
    typer.echo(summary.line())
    if summary.failed:
        raise typer.Exit(1)


def import_accounts(settings: Settings, htpasswd: Path, summary: Summary) -> dict[str, str]:
    """The accounts created, {username: account id}: the import binds maintainers to them."""
    found = {entry.name: entry for entry in entry_points(group=ACCOUNT_IMPORTERS)}
    if "htpasswd" not in found:
        raise RegistryError("--htpasswd needs the user API (the `user_api` package) installed")
    imported, skipped = found["htpasswd"].load()(settings, htpasswd)
    summary.accounts += list(imported)
    summary.skipped += [Skipped(f"user {name}", reason) for name, reason in skipped]
    return dict(imported)


def register(app: typer.Typer, settings_from_options: Callable[..., Settings]) -> None:
    importing = typer.Typer(help="Move packages in, keeping times, tags, deprecations and owners.", no_args_is_help=True)
    exporting = typer.Typer(help="Move packages out, so nobody is locked in.", no_args_is_help=True)
    _add_verdaccio(importing, settings_from_options)
    _add_verdaccio_config(importing)
    _add_registry_and_lockfile(importing, settings_from_options)
    _add_export(exporting, settings_from_options)
    app.add_typer(importing, name="import")
    app.add_typer(exporting, name="export")


def _add_verdaccio(importing: typer.Typer, settings_from_options: Callable[..., Settings]) -> None:
    @importing.command("verdaccio")
    def verdaccio_command(
        storage: Annotated[Path, typer.Argument(help="Verdaccio's storage folder.")],
        htpasswd: Annotated[Path | None, typer.Option("--htpasswd", help="Verdaccio's htpasswd file: its accounts keep their passwords.")] = None,
        verdaccio_config: Annotated[Path | None, typer.Option(
            "--verdaccio-config", help="Verdaccio's config.yaml: users its `packages:` rules name as publishers become "
            "maintainers (default: config.yaml beside STORAGE)."
        )] = None,
        merge_into: MergeIntoOption = None,
        content: ContentOption = None,
        out: OutOption = None,
        config: ConfigOption = None,
    ) -> None:
        """Import a Verdaccio storage folder (and its accounts) into content/, then build."""
        from registry_gen.importers.run import import_verdaccio

        settings = settings_from_options(config, content_dir=content, out_dir=out)
        with reported("Importing") as progress:
            summary = Summary()
            accounts = import_accounts(settings, htpasswd, summary) if htpasswd is not None else {}
            if verdaccio_config is not None and not verdaccio_config.is_file():
                raise RegistryError(f"--verdaccio-config {verdaccio_config}: no such file")
            result = import_verdaccio(settings, storage, progress, verdaccio_config, accounts, merge_into or ())
            result.accounts, result.skipped = summary.accounts, summary.skipped + result.skipped
        print_summary(result)


def _add_verdaccio_config(importing: typer.Typer) -> None:
    @importing.command("verdaccio-config")
    def verdaccio_config_command(
        verdaccio_config: Annotated[Path, typer.Argument(help="Verdaccio's config.yaml.")],
    ) -> None:
        """Print the registry.yaml keys (uplinks:, packages:) that carry a Verdaccio config's intent over."""
        import yaml

        from registry_gen.importers.run import read_verdaccio_config
        from registry_gen.importers.verdaccio import registry_config

        with reported("Reading"):
            if not verdaccio_config.is_file():
                raise RegistryError(f"{verdaccio_config}: no such file")
            keys, notes = registry_config(read_verdaccio_config(verdaccio_config))
        for note in notes:
            typer.echo(f"note: {note}", err=True)
        typer.echo(f"# from {verdaccio_config} (registry-gen import verdaccio-config)")
        typer.echo(yaml.safe_dump(keys, sort_keys=False, default_flow_style=False).rstrip())


def _add_registry_and_lockfile(importing: typer.Typer, settings_from_options: Callable[..., Settings]) -> None:
    @importing.command("registry")
    def registry_command(
        specs: Annotated[list[str], typer.Argument(help="name, name@range or name@tag (scoped too).")],
        from_: FromOption = None,
        token: TokenOption = None,
        all_versions: Annotated[bool, typer.Option("--all-versions", help="Take every version, not one per spec.")] = False,
        with_dependencies: Annotated[bool, typer.Option(
            "--with-dependencies", help="Also import, transitively, the versions npm installs for their dependencies, "
            "optional dependencies and non-optional peer dependencies.",
        )] = False,  # fmt: skip
        merge_into: MergeIntoOption = None,
        deadline: DeadlineOption = DEFAULT_DEADLINE,
        content: ContentOption = None,
        out: OutOption = None,
        config: ConfigOption = None,
    ) -> None:
        """Import packages from an npm-protocol registry with their publish times, tags and deprecations."""
        from registry_gen.importers.remote import import_registry

        settings = settings_from_options(config, content_dir=content, out_dir=out)
        with reported("Importing") as progress:
            summary = import_registry(
                settings, specs, registry=from_, token=token, all_versions=all_versions, with_dependencies=with_dependencies,
                merge_into=merge_into or (), deadline=deadline, progress=progress,
            )  # fmt: skip
        print_summary(summary)

    @importing.command("lockfile")
    def lockfile_command(
        lockfile: Annotated[Path, typer.Argument(help="package-lock.json, npm-shrinkwrap.json, pnpm-lock.yaml or yarn.lock.")],
        from_: FromOption = None,
        token: TokenOption = None,
        merge_into: MergeIntoOption = None,
        deadline: DeadlineOption = DEFAULT_DEADLINE,
        content: ContentOption = None,
        out: OutOption = None,
        config: ConfigOption = None,
    ) -> None:
        """Import every package a lockfile resolves, checked against the lockfile's integrity."""
        from registry_gen.importers.remote import import_lockfile

        settings = settings_from_options(config, content_dir=content, out_dir=out)
        with reported("Importing") as progress:
            summary = import_lockfile(
                settings, lockfile, registry=from_, token=token, merge_into=merge_into or (), deadline=deadline, progress=progress
            )
        print_summary(summary)


def _add_export(exporting: typer.Typer, settings_from_options: Callable[..., Settings]) -> None:
    @exporting.command("verdaccio")
    def export_command(
        target: Annotated[Path, typer.Argument(help="A new (or empty) folder to write Verdaccio storage into.")],
        content: ContentOption = None,
        out: OutOption = None,
        config: ConfigOption = None,
    ) -> None:
        """Write a storage folder Verdaccio 6 serves as it is."""
        from registry_gen.importers.export import export_verdaccio

        settings = settings_from_options(config, content_dir=content, out_dir=out)
        with reported("Exporting") as progress:
            names = export_verdaccio(settings, target, progress)
        typer.echo(f"exported {len(names)} packages to {target}")
