"""`registry-gen keys …`: the registry's signing key (see README "Signed packages")."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from registry_gen.errors import ConfigError
from registry_gen.settings import Settings

ConfigOption = Annotated[
    Path | None, typer.Option("--config", "-c", help="YAML config file (default: ./registry.yaml).", envvar="REGISTRY_GEN_CONFIG")
]


def register(app: typer.Typer, settings_from_options: Callable[..., Settings]) -> None:
    keys = typer.Typer(help="The key that signs every version (npm audit signatures verifies it).", no_args_is_help=True)

    @keys.command("generate")
    def generate_command(
        out: Annotated[
            Path | None, typer.Option("--out", "-o", help="Where to write the PEM private key (default: signing_key from the config).")
        ] = None,
        config: ConfigOption = None,
    ) -> None:
        """Write a new ECDSA P-256 signing key (mode 0600); never replaces an existing file."""
        from registry_gen.keyring import write_new_key

        settings = settings_from_options(config)
        target = out or settings.signing_key
        if target is None:
            raise ConfigError("keys generate: give --out PATH, or set signing_key in the config")
        signer = write_new_key(Path(target), settings)
        typer.echo(f"wrote {target} (key id {signer.keyid}); set signing_key: {target} in registry.yaml and build")

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
