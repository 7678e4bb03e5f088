"""`registry-gen advisory add FILE` / `advisory list`: the advisories `npm audit` is answered from."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from registry_gen.errors import RegistryError, unreadable_file
from registry_gen.settings import Settings

ConfigOption = Annotated[
    Path | None, typer.Option("--config", "-c", help="YAML config file (default: ./registry.yaml).", envvar="REGISTRY_GEN_CONFIG")
]


def read_advisory_file(file: Path) -> bytes:
    """The file's bytes, or one line naming it and what is wrong (never a bare `[Errno 2]`)."""
    try:
        return file.read_bytes()
    except OSError as exc:
        raise unreadable_file(file, exc, "an advisory JSON file", "not found (give the path of an OSV or GitHub advisory JSON file)") from None


def register(app: typer.Typer, settings_from_options: Callable[..., Settings]) -> None:
    group = typer.Typer(help="Security advisories served to npm audit.", no_args_is_help=True)

    @group.command("add")
    def add(
        file: Annotated[Path, typer.Argument(help="An OSV or GitHub advisory JSON file.")],
        config: ConfigOption = None,
    ) -> None:
        """Check an advisory and record it in content/advisories/ (npm audit reports it at once)."""
        from registry_gen.advisories import add_advisory, advisory_folder

        settings = settings_from_options(config)
        try:
            found = add_advisory(settings, read_advisory_file(file), str(file))
        except (RegistryError, OSError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
        for advisory in found:
            typer.echo(f"recorded {advisory.source_id}: {advisory.name} {advisory.vulnerable_versions} ({advisory.severity})")
        typer.echo(f"in {advisory_folder(settings)}")

    @group.command("list")
    def list_(config: ConfigOption = None) -> None:
        """Every recorded advisory, and one line per file that cannot be read."""
        from registry_gen.advisories import advisory_folder, load_advisories

        settings = settings_from_options(config)
        loaded = load_advisories(advisory_folder(settings))
        if loaded is None:
            typer.echo(f"no advisory source ({advisory_folder(settings)} does not exist): npm audit is refused with 404")
            return
        for advisory in loaded[0]:
            typer.echo(f"{advisory.source_id}  {advisory.name} {advisory.vulnerable_versions} ({advisory.severity})")
        for problem in loaded[1]:
            typer.echo(f"error: {problem}", err=True)

    app.add_typer(group, name="advisory")
