"""Where the write API keeps what it is given: archives and registry-meta.json files, by key.

One contract (`contract.ContentStorage`), three implementations that pass the same conformance
suite (tests/storage): `FolderStorage` (content/ on a disk, the embedded default),
`MemoryStorage` (tests), `S3Storage` (an S3-compatible bucket, `storage: s3://BUCKET/PREFIX`).
`open_content_storage(settings)` picks the configured one.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from registry_gen.errors import ConfigError
from registry_gen.storage.contract import (
    ContentStorage,
    StoredObject,
    archive_key,
    checked_key,
    meta_key,
    parsed_meta,
    read_meta,
    write_meta,
)
from registry_gen.storage.folder import FolderStorage
from registry_gen.storage.location import S3Location, parse_s3_url
from registry_gen.storage.memory import MemoryStorage
from registry_gen.storage.s3 import S3Storage, Timeouts

if TYPE_CHECKING:
    from registry_gen.settings import Settings

__all__ = [
    "ContentStorage", "FolderStorage", "MemoryStorage", "S3Location", "S3Storage", "StoredObject", "Timeouts",
    "archive_key", "checked_key", "meta_key", "open_content_storage", "parse_s3_url", "parsed_meta", "read_meta", "write_meta",
]

# boto3's own variables for a custom endpoint (the service-specific one first, as boto3 reads them).
ENDPOINT_ENV = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")


def open_content_storage(settings: Settings, *, building: bool = True) -> ContentStorage:
    """The content store `settings` name: content_dir on disk, or the `storage:` bucket.

    `building`: the caller rebuilds the tree from content_dir right after it writes (a write
    service without `objects`). Only a write service with `objects` (`registry-gen api`, and
    `owner claim`/`bind-recorded`/`user remove` through registry_gen.writes.admin_write_service) syncs a work folder from the bucket before each build
    and publishes the tree to a bucket (registry_gen.objectstore), so such a caller is refused a
    bucket, in one line, before anything is written. `building=False`: the store alone (the api's object store, tests, tools)."""
    if settings.storage is None:
        return FolderStorage(settings.content_dir)
    if building:
        raise ConfigError(
            f"storage: {settings.storage}: this command builds from the local content folder; with content in a bucket, "
            f"write through `registry-gen api`, or remove `storage:` (and $REGISTRY_STORAGE) to keep content in {settings.content_dir}"
        )
    return S3Storage(
        parse_s3_url(settings.storage), endpoint_url=storage_endpoint(settings), conditional_writes=settings.storage_conditional_writes
    )


def storage_endpoint(settings: Settings) -> str | None:
    """The S3 endpoint of `storage:`: `storage_endpoint_url`, else $AWS_ENDPOINT_URL(_S3), else None (AWS itself)."""
    return settings.storage_endpoint_url or next((os.environ[k] for k in ENDPOINT_ENV if os.environ.get(k)), None)
