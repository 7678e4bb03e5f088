"""Fixtures shared by the registry API tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.registry_api.helpers import RegistryProcess


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryProcess]:
    """A real `registry-gen serve` on an ephemeral loopback port, one per test module."""
    process = RegistryProcess(tmp_path_factory.mktemp("registry")).start()
    try:
        yield process
    finally:
        process.stop()
