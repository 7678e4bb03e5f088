"""Upload the built tree to an S3-style object store (boto3; the `s3` extra).

What goes where, with which headers, comes from `hosting.upload_plan` (pure); this module only
talks to the store. Tarballs are uploaded first, package documents next, indexes and the site
last, so a reader never gets a document that names a tarball not yet there; stale objects are
deleted (with `delete=True`) only after everything new is in place.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from registry_gen.errors import ConfigError, RegistryError
from registry_gen.hosting import NOT_FOUND_DOCUMENT, Upload, public_read_policy, upload_plan, website_configuration

log = logging.getLogger(__name__)
ProgressCallback = Callable[[str, int, int], None]


class DeployError(RegistryError):
    """The object store refused something; the message names the bucket and key."""


@dataclass(frozen=True)
class S3Target:
    bucket: str
    prefix: str = ""  # "" or ends with "/"

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


@dataclass
class DeployResult:
    uploaded: list[str] = field(default_factory=list)
    unchanged: int = 0
    deleted: list[str] = field(default_factory=list)
    website: bool = False
    public_read: bool = False
    seconds: float = 0.0

    def summary(self) -> str:
        return (
            f"{len(self.uploaded)} objects uploaded, {self.unchanged} unchanged, {len(self.deleted)} deleted"
            f"{', website configured' if self.website else ''}{', public read allowed' if self.public_read else ''}"
            f", {self.seconds:.2f}s"
        )


def parse_s3_url(url: str) -> S3Target:
    """'s3://bucket' or 's3://bucket/some/prefix' -> S3Target (ConfigError naming the problem)."""
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc:
        raise ConfigError(f"expected s3://BUCKET[/PREFIX], got {url!r}")
    if parts.query or parts.fragment:
        raise ConfigError(f"an s3:// URL takes no query or fragment: {url!r}")
    prefix = parts.path.strip("/")
    return S3Target(parts.netloc, prefix + "/" if prefix else "")


def tree_files(out_dir: Path) -> list[str]:
    """Every regular file below out_dir as a POSIX relative path (symlinks are not followed)."""
    found: list[str] = []
    for folder, dirs, files in os.walk(out_dir):
        dirs[:] = [d for d in dirs if not d.startswith(".")]  # dotfiles (temp files, an old .registry-gen/) are never deployed
        for name in files:
            path = Path(folder) / name
            if path.is_file() and not path.is_symlink():
                found.append(path.relative_to(out_dir).as_posix())
    return sorted(found)


def _md5(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _existing_objects(client: Any, target: S3Target) -> dict[str, str]:
    """key -> ETag (without quotes) for every object under the prefix."""
    objects: dict[str, str] = {}
    paginator = client.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=target.bucket, Prefix=target.prefix):
        for item in page.get("Contents", []):
            objects[item["Key"]] = item.get("ETag", "").strip('"')
    return objects


def _phases(uploads: Iterable[Upload]) -> Iterator[list[Upload]]:
    current: list[Upload] = []
    for upload in uploads:
        if current and upload.phase != current[0].phase:
            yield current
            current = []
        current.append(upload)
    if current:
        yield current


def deploy_tree(
    out_dir: Path,
    target: S3Target,
    client: Any,
    *,
    delete: bool = False,
    force: bool = False,
    website: bool = True,
    public_read: bool = False,
    document_max_age: int = 0,
    jobs: int = 8,
    progress: ProgressCallback | None = None,
) -> DeployResult:
    """Makes the bucket (under the prefix) serve out_dir; unchanged objects (same MD5) are skipped.

    An object's headers are not compared: after a change of Content-Type or Cache-Control rules
    (a new registry-gen), pass force=True once.
    """
    started = time.perf_counter()
    if not out_dir.is_dir():
        raise ConfigError(f"{out_dir} is not a folder: run `registry-gen build` first")
    files = tree_files(out_dir)
    if NOT_FOUND_DOCUMENT not in files:
        log.warning("%s has no %s: rebuild with a newer registry-gen for a JSON error document", out_dir, NOT_FOUND_DOCUMENT)
    plan = upload_plan(files, prefix=target.prefix, document_max_age=document_max_age)
    existing = _call(target, "", lambda: _existing_objects(client, target))
    result = DeployResult()
    todo = _changed_uploads(out_dir, plan, existing, force, result)
    _upload(out_dir, target, client, todo, jobs, progress, result)
    if public_read:
        # Replaces the bucket's policy: the registry's bucket should hold nothing else.
        _call(target, "", lambda: client.put_bucket_policy(Bucket=target.bucket, Policy=public_read_policy(target.bucket, target.prefix)))
        result.public_read = True
    if website:
        _call(target, "", lambda: client.put_bucket_website(Bucket=target.bucket, WebsiteConfiguration=website_configuration(target.prefix)))
        result.website = True
    if delete:
        _delete_stale(target, client, {upload.key for upload in plan}, existing, result)
    result.seconds = time.perf_counter() - started
    return result


def _changed_uploads(out_dir: Path, plan: list[Upload], existing: dict[str, str], force: bool, result: DeployResult) -> list[Upload]:
    """The uploads whose bytes the bucket does not hold yet (all of them with `force`)."""
    digests: dict[str, str] = {}
    todo: list[Upload] = []
    for upload in plan:
        if upload.source not in digests:
            digests[upload.source] = _md5(out_dir / upload.source)
        if not force and existing.get(upload.key) == digests[upload.source]:
            result.unchanged += 1
        else:
            todo.append(upload)
    return todo


def _upload(
    out_dir: Path, target: S3Target, client: Any, todo: list[Upload], jobs: int,
    progress: ProgressCallback | None, result: DeployResult,
) -> None:
    def put(upload: Upload) -> str:
        with open(out_dir / upload.source, "rb") as body:
            _call(target, upload.key, lambda: client.put_object(
                Bucket=target.bucket, Key=upload.key, Body=body,
                ContentType=upload.content_type, CacheControl=upload.cache_control,
            ))
        return upload.key

    done = 0
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for phase in _phases(todo):
            for key in pool.map(put, phase):  # a phase finishes before the next one starts
                result.uploaded.append(key)
                done += 1
                if progress:
                    progress("upload", done, len(todo))


def _delete_stale(target: S3Target, client: Any, wanted: set[str], existing: dict[str, str], result: DeployResult) -> None:
    stale = sorted(key for key in existing if key not in wanted)
    for start in range(0, len(stale), 1000):  # DeleteObjects takes at most 1000 keys
        batch = stale[start : start + 1000]
        _call(
            target,
            batch[0],
            lambda: client.delete_objects(Bucket=target.bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True}),
        )
        result.deleted.extend(batch)


def _call(target: S3Target, key: str, action: Callable[[], Any]) -> Any:
    """Runs one store call, turning botocore's errors into a DeployError naming bucket and key."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return action()
    except ClientError as exc:
        error = exc.response.get("Error", {})
        raise DeployError(f"{target.bucket}/{key}: {error.get('Code', 'error')}: {error.get('Message', exc)}") from exc
    except BotoCoreError as exc:
        raise DeployError(f"{target.bucket}/{key}: {exc}") from exc


def make_client(*, endpoint_url: str | None = None, region: str | None = None) -> Any:
    """A boto3 S3 client; credentials come from boto3's usual places (env, ~/.aws, instance role)."""
    try:
        import boto3
        from botocore.config import Config
    except ModuleNotFoundError as exc:
        raise ConfigError("deploying to S3 needs boto3: pip install 'registry-gen[s3]'") from exc
    config = Config(retries={"max_attempts": 5, "mode": "standard"}, s3={"addressing_style": "path"} if endpoint_url else {})
    return boto3.client("s3", endpoint_url=endpoint_url, region_name=region, config=config)
