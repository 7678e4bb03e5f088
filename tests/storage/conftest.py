"""Fixtures of the content-store conformance suite: one `store` fixture, parametrised over every
implementation (a folder, memory, and S3Storage on three independent S3 servers)."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from registry_gen.storage import ContentStorage, FolderStorage, MemoryStorage, S3Location, S3Storage
from tests.storage.s3servers import COMMANDS, S3Server, make_bucket, s3_credentials, s3_server

S3_KINDS = tuple(COMMANDS)
KINDS = ("folder", "memory", *S3_KINDS)
BUCKET = "content"


class Servers:
    """The S3 servers of this test session, each started on first use and stopped at the end."""

    def __init__(self, root: Path, stack: contextlib.ExitStack[Any]):
        self.root = root
        self.stack = stack
        self.running: dict[str, S3Server] = {}

    def get(self, kind: str) -> S3Server:
        if kind not in self.running:
            server = self.stack.enter_context(s3_server(kind, self.root / kind))
            make_bucket(server.endpoint, BUCKET)
            self.running[kind] = server
        return self.running[kind]


@pytest.fixture(scope="session")
def s3_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    with contextlib.ExitStack() as stack:
        yield Servers(tmp_path_factory.mktemp("s3-servers"), stack)


def s3_store(endpoint: str, location: S3Location, **options: Any) -> S3Storage:
    """An S3Storage as the registry builds one: credentials from the environment (boto3's way)."""
    with s3_credentials():
        return S3Storage(location, endpoint_url=endpoint, **options)


@dataclass
class Stores:
    """One backing store of one kind, and a way to open it again as another machine would (its
    own client and connections; memory can only share the one object)."""

    kind: str
    open: Callable[[], ContentStorage]
    server: S3Server | None = None

    @property
    def first(self) -> ContentStorage:
        if not hasattr(self, "_first"):
            self._first = self.open()
        return self._first


@pytest.fixture(params=KINDS)
def stores(request: pytest.FixtureRequest, tmp_path: Path, s3_servers: Servers) -> Stores:
    kind = request.param
    if kind == "folder":
        return Stores(kind, lambda: FolderStorage(tmp_path / "content"))
    if kind == "memory":
        memory = MemoryStorage()
        return Stores(kind, lambda: memory)
    server = s3_servers.get(kind)
    location = S3Location(BUCKET, f"t{secrets.token_hex(6)}/content")  # a fresh prefix per test
    return Stores(kind, lambda: s3_store(server.endpoint, location), server)


@pytest.fixture
def store(stores: Stores) -> ContentStorage:
    return stores.first
