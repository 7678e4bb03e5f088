"""What the tests of `registry-gen migrate` share: the real command, a registry's config, a database."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from tests.user_api.pg_server import PostgresServer

_numbers = itertools.count()


def migrate(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`registry-gen migrate` run as the operator runs it: its own process."""
    return subprocess.run([sys.executable, "-m", "registry_gen", "migrate", "--config", str(config), *args],
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip


def write_config(folder: Path, **values: Any) -> Path:
    """A registry.yaml whose folders all live in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "registry.yaml"
    paths = {"content_dir": str(folder / "content"), "out_dir": str(folder / "public"), "data_dir": str(folder / "data")}
    config.write_text(yaml.safe_dump({**paths, "base_url": "http://127.0.0.1:9/", **values}))
    return config


@pytest.fixture
def database(state_postgres: PostgresServer) -> Iterator[str]:
    """A database of its own (the user store creates the pg_trgm extension in it)."""
    name = f"migrate_{os.getpid()}_{next(_numbers)}"
    with psycopg.connect(state_postgres.url(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield state_postgres.url(name)


