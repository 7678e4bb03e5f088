"""`registry-gen keys …`: the registry's signing key (see docs/operating/keys.md)."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from registry_gen.errors import ConfigError
from registry_gen.settings import Settings

ConfigOption = Annotated[
    Path | None, typer.Option("--config", "-c", help="YAML config file (default: ./registry.yaml).", envvar="REGISTRY_GEN_CONFIG")
]


def same_file(configured: Path | None, out: Path) -> bool:
    return configured is not None and configured.resolve() == out.resolve()


def point_config_at(config_file: Path, key_file: Path) -> str:
    """Sets signing_key in `config_file` to `key_file` (relative to the file's folder when inside
    it), on its existing line with the comment kept; the file is replaced atomically, its mode
    kept (it may hold a database password). Returns what changed."""
    from registry_gen.settings import with_top_level_value, yaml_scalar

    config = config_file.resolve()
    target = key_file.resolve()
    value = str(target.relative_to(config.parent)) if target.is_relative_to(config.parent) else str(target)
    text, said = with_top_level_value(config.read_text(encoding="utf-8"), "signing_key", yaml_scalar(value))
    replace_keeping_mode(config, text.encode("utf-8"))
    return said


def replace_keeping_mode(path: Path, data: bytes) -> None:
    """Readers see the old file or the new one; the new one has the old one's permissions."""
    mode = stat.S_IMODE(path.stat().st_mode)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise


def register(app: typer.Typer, settings_from_options: Callable[..., Settings]) -> None:
    keys = typer.Typer(help="The key that signs every version (npm audit signatures verifies it).", no_args_is_help=True)

    @keys.command("generate")
    def generate_command(
        out: Annotated[
            Path | None, typer.Option("--out", "-o", help="Where to write the PEM private key (default: signing_key from the config).")
        ] = None,
        set_config: Annotated[
            bool | None,
            typer.Option(
                "--set-config/--no-set-config",
                help="Point signing_key in the config at the new key (default: ask on a terminal, else leave it).",
            ),
        ] = None,
        config: ConfigOption = None,
    ) -> None:
        """Write a new ECDSA P-256 signing key (mode 0600); never replaces an existing file."""
        from registry_gen.keyring import write_new_key

        settings = settings_from_options(config)
        target = out or settings.signing_key
        if target is None:
            raise ConfigError("keys generate: give --out PATH, or set signing_key in the config")
        if set_config and settings.config_file is None:
            raise ConfigError("--set-config: no registry.yaml here to set signing_key in; pass --config FILE")
        signer = write_new_key(Path(target), settings)
        typer.echo(f"wrote {target} (key id {signer.keyid})")
        if out is None or settings.config_file is None or same_file(settings.signing_key, out):
            typer.echo("build (or restart serve/api) to sign with it" if settings.config_file else f"set signing_key: {target} in registry.yaml, then build")
            return
        if set_config is None and sys.stdin.isatty():
            set_config = typer.confirm(f"Set signing_key in {settings.config_file} to {out}?", default=True)
        if not set_config:
            typer.echo(f"not set: edit the signing_key line of {settings.config_file} (or pass --set-config), then build")
            return
        said = point_config_at(settings.config_file, out)
        typer.echo(f"{settings.config_file}: {said}; build (or restart serve/api) to sign with it")

    @keys.command("show")
    def show_command(config: ConfigOption = None) -> None:
        """Print the configured key's id and the keys document the next build publishes."""
        from registry_gen.keyring import load_signer, recorded_keys
        from registry_gen.signing import keys_document, rotate_keyring
        from registry_gen.state import open_state

        settings = settings_from_options(config)
        signer = load_signer(settings)
        typer.echo(f"signing key: {signer.keyid if signer else 'none (signing is off)'}", err=True)
        recorded = []
        if settings.state_folder.is_dir():  # the keyring is in its ledger (kept when the cache is dropped)
            with open_state(settings).view() as state:
                recorded = recorded_keys(state)
        document = keys_document(rotate_keyring(recorded, signer.public if signer else None, "<next build>"))
        typer.echo(json.dumps(document, indent=2))

    app.add_typer(keys, name="keys")
