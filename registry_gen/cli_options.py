"""Options shared by every `registry-gen` command (the core's and the plugins'): one definition each."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from registry_gen.settings import CONFIG_ENV

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help=f"YAML config file (default: ./registry.yaml, or ${CONFIG_ENV}).", envvar=CONFIG_ENV),
]
