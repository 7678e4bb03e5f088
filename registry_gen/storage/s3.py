"""content/ in an S3-compatible bucket (boto3, the `s3` extra): `storage: s3://BUCKET/PREFIX`.

Create-only: `PUT` with `If-None-Match: *`, which the store refuses with 412 when the key exists
(AWS since 2024, and the stores the tests run). Where the store ignores the header (found by a
probe on first use, or said by `storage_conditional_writes: false`), `create` checks then writes:
exact under the caller's lock, and in a race between machines the database's UNIQUE(name, version)
decides which publish happened (docs/deploying/object-store.md).

Errors: a store that cannot be reached, times out, throttles or answers 5xx raises
`StorageUnavailable` (HTTP 503 at the web edge) after boto3's bounded retries; one that refuses
for good (no bucket, no credentials, denied) raises `StorageError`. The timeouts are deliberate:
a dead store costs a caller seconds, never a hang.
"""

from __future__ import annotations

import base64
import hashlib
import io
import logging
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from registry_gen import __version__
from registry_gen.errors import ConfigError, StorageError, StorageUnavailable, VersionConflict
from registry_gen.storage.contract import SPOOL_BLOCK, StoredObject, checked_key, is_content_key, spool_stream
from registry_gen.storage.location import S3Location

log = logging.getLogger(__name__)

# Error codes that say "later", whatever the status (S3 and the compatible stores use these).
TRANSIENT_CODES = frozenset({
    "SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequests",
    "RequestTimeout", "ServiceUnavailable", "InternalError", "OperationAborted",
})
# Statuses the caller decides about: not found, a conditional write lost or in flight, a header
# the store does not implement.
ANSWERS = frozenset({404, 409, 412, 501})
PROBE_FOLDER = ".registry-gen"  # a dot segment: never a content key, never listed
CONFLICT_RETRIES = 5  # 409 ConditionalRequestConflict: another conditional write of the key is in flight


@dataclass(frozen=True)
class Timeouts:
    """Per attempt: seconds to connect and to wait for each read; attempts in all (boto3's
    "standard" retry mode backs off between them, at most 1 s then 2 s)."""

    connect: float = 3.0
    read: float = 20.0
    attempts: int = 3


class StoreAnswer(Exception):
    """The store answered a status from ANSWERS; `retried`: boto3 had sent the request before."""

    def __init__(self, status: int, code: str, retried: bool):
        super().__init__(f"{status} {code}")
        self.status = status
        self.code = code
        self.retried = retried


def s3_client(endpoint_url: str | None, timeouts: Timeouts) -> Any:
    """A boto3 S3 client; credentials and region come from boto3's usual places (environment,
    ~/.aws, an instance role). A custom endpoint gets path-style addressing (loopback and most
    S3-compatible stores have no per-bucket host names), and checksums only where S3 requires
    them (several compatible stores reject the newer streamed trailers). A fixed User-Agent:
    botocore rebuilds its default one (~20 components, each sanitised) twice per request, a fifth
    of the client's Python calls for a small PUT (bench/PROFILE.md, "fourth pass")."""
    try:
        import boto3
        import botocore
        from botocore.config import Config
    except ImportError as exc:
        raise ConfigError("storage: s3://… needs boto3: pip install 'registry-gen[s3]'") from exc
    # botocore says at INFO where it found the credentials, on every start: not news to an operator.
    logging.getLogger("botocore.credentials").setLevel(logging.WARNING)
    config = Config(
        connect_timeout=timeouts.connect, read_timeout=timeouts.read,
        retries={"total_max_attempts": timeouts.attempts, "mode": "standard"},
        s3={"addressing_style": "path"} if endpoint_url else {},
        signature_version="s3v4",  # also for presigned URLs (botocore may presign with the retired SigV2)
        request_checksum_calculation="when_required", response_checksum_validation="when_required",
        user_agent=f"registry-gen/{__version__} botocore/{botocore.__version__}",
    )
    return boto3.session.Session().client("s3", endpoint_url=endpoint_url, config=config)


class S3Storage:
    """Keys live under the location's prefix in its bucket; `create` is conditional where the store can."""

    def __init__(
        self,
        location: S3Location,
        *,
        endpoint_url: str | None = None,
        conditional_writes: bool | None = None,
        timeouts: Timeouts = Timeouts(),
        client: Any = None,
    ):
        self.location = location
        self.bucket = location.bucket
        self.prefix = f"{location.prefix}/" if location.prefix else ""
        self.endpoint_url = endpoint_url
        self.client = client if client is not None else s3_client(endpoint_url, timeouts)
        self._conditional = conditional_writes  # None: probe the store on first need
        self._probe_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"S3Storage({self.location}, endpoint_url={self.endpoint_url!r})"

    @property
    def atomic_create(self) -> bool:
        """Whether the store honours `If-None-Match: *` (probed once, unless configured)."""
        if self._conditional is None:
            with self._probe_lock:
                if self._conditional is None:
                    self._conditional = self._probe_conditional_writes()
        return self._conditional

    # ---- reads

    def exists(self, key: str) -> bool:
        return self._head(key) is not None

    def read(self, key: str) -> bytes | None:
        stream = self.open(key)
        if stream is None:
            return None
        with stream:
            return stream.read()

    def open(self, key: str) -> BinaryIO | None:
        try:
            response = self._call("get_object", key, Key=self._name(key))
        except StoreAnswer as answer:
            if answer.status == 404:
                return None
            raise self._unexpected(answer, "get_object", key) from None
        return io.BufferedReader(GuardedBody(response["Body"], self, key), SPOOL_BLOCK)  # type: ignore[return-value]

    def spool(self, key: str, target: Path) -> bool:
        stream = self.open(key)
        if stream is None:
            return False
        with stream:
            spool_stream(stream, target)
        return True

    def list(self, prefix: str = "") -> Iterator[StoredObject]:
        pages = iter(self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix + prefix))
        while True:
            try:
                page = next(pages)
            except StopIteration:
                return
            except Exception as exc:  # noqa: BLE001 - translated: a listing fails like any other call
                raise self.translated(exc, "list_objects_v2", prefix) from exc
            for item in page.get("Contents", []):
                key = str(item["Key"])[len(self.prefix) :]
                if is_content_key(key):
                    size = int(item["Size"])
                    modified = item.get("LastModified")
                    token = f"{size}-{str(item.get('ETag', '')).strip(chr(34))}"
                    yield StoredObject(key, size, token, modified.timestamp() if modified is not None else None)

    # ---- writes

    def create(self, key: str, data: bytes) -> None:
        digest = hashlib.md5(data)
        if not self.atomic_create:
            if self._head(key) is not None:
                raise VersionConflict(f"{key} already exists in {self.location}")
            self._put(key, data, digest)
            return
        for _ in range(CONFLICT_RETRIES):
            try:
                self._put(key, data, digest, IfNoneMatch="*")
                return
            except StoreAnswer as answer:
                if answer.status == 412:
                    if answer.retried and self._holds(key, data, digest.hexdigest()):
                        return  # boto3 sent it again because the answer to our first PUT was lost: that one landed
                    raise VersionConflict(f"{key} already exists in {self.location}") from None
                if answer.status != 409:
                    raise self._unexpected(answer, "put_object", key) from None
        raise StorageUnavailable(f"{self.location}: {key} stayed busy with other writers; retry shortly")

    def replace(self, key: str, data: bytes) -> None:
        try:
            self._put(key, data, hashlib.md5(data))
        except StoreAnswer as answer:
            raise self._unexpected(answer, "put_object", key) from None

    def publish(self, key: str, data: bytes, *, content_type: str, cache_control: str, metadata: dict[str, str] | None = None) -> None:
        """Stores or overwrites a file of the built tree with the headers its readers get (the tree
        sink, registry_gen.objectstore); `metadata`: served as `x-amz-meta-NAME` headers."""
        extra = {"Metadata": metadata} if metadata else {}
        try:
            self._put(key, data, hashlib.md5(data), ContentType=content_type, CacheControl=cache_control, **extra)
        except StoreAnswer as answer:
            raise self._unexpected(answer, "put_object", key) from None

    def remove(self, key: str) -> bool:
        if self._head(key) is None:
            return False
        try:
            self._call("delete_object", key, Key=self._name(key))
        except StoreAnswer as answer:
            if answer.status != 404:
                raise self._unexpected(answer, "delete_object", key) from None
        return True

    # ---- the calls

    def _name(self, key: str) -> str:
        return self.prefix + str(checked_key(key))

    def _put(self, key: str, data: bytes, digest: Any, **conditions: str) -> None:
        # Content-MD5: the store refuses a body that arrives cut or changed, instead of keeping it.
        md5 = base64.b64encode(digest.digest()).decode("ascii")
        self._call("put_object", key, Key=self._name(key), Body=data, ContentMD5=md5, **conditions)

    def _head(self, key: str) -> dict[str, Any] | None:
        try:
            return dict(self._call("head_object", key, Key=self._name(key)))
        except StoreAnswer as answer:
            if answer.status == 404:
                return None
            raise self._unexpected(answer, "head_object", key) from None

    def _holds(self, key: str, data: bytes, md5: str) -> bool:
        """Whether the object has exactly these bytes: by its ETag (a single PUT's MD5), else read
        back (an encrypted bucket's ETag is not the MD5)."""
        head = self._head(key)
        if head is None or int(head.get("ContentLength", -1)) != len(data):
            return False
        return str(head.get("ETag", "")).strip('"') == md5 or self.read(key) == data

    def _call(self, operation: str, key: str, **params: Any) -> Any:
        try:
            return getattr(self.client, operation)(Bucket=self.bucket, **params)
        except Exception as exc:  # noqa: BLE001 - translated into the one error hierarchy
            raise self.translated(exc, operation, key) from exc

    def translated(self, exc: Exception, operation: str, key: str) -> Exception:
        """botocore's error as ours: StoreAnswer (the caller decides), StorageUnavailable (later),
        StorageError (never without a change); anything else is a bug and stays itself."""
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, PartialCredentialsError

        where = f"{self.location} ({operation} {key})"
        if isinstance(exc, ClientError):
            return self._client_error(exc, where)
        if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
            return StorageError(f"{where}: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or a role")
        if isinstance(exc, (BotoCoreError, OSError)):
            log.warning("object store unavailable: %s: %s", where, exc)
            return StorageUnavailable(f"the object store is unavailable ({where}: {exc}); retry shortly")
        return exc

    def _client_error(self, exc: Any, where: str) -> Exception:
        metadata = exc.response.get("ResponseMetadata", {})
        status = int(metadata.get("HTTPStatusCode") or 0)
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        if status in ANSWERS and code != "NoSuchBucket":
            return StoreAnswer(status, code, int(metadata.get("RetryAttempts") or 0) > 0)
        if status >= 500 or status == 429 or code in TRANSIENT_CODES:
            log.warning("object store unavailable: %s: %s %s", where, status, code)
            return StorageUnavailable(f"the object store is unavailable ({where}: {status} {code}); retry shortly")
        if code == "NoSuchBucket":
            return StorageError(f"{where}: the bucket {self.bucket} does not exist at {self.endpoint_url or 'AWS'}")
        return StorageError(f"{where}: refused: {status} {code} {error.get('Message', '')}".rstrip())

    def _unexpected(self, answer: StoreAnswer, operation: str, key: str) -> StorageError:
        return StorageError(f"{self.location} ({operation} {key}): unexpected answer {answer}")

    def _probe_conditional_writes(self) -> bool:
        """Writes one probe object twice with `If-None-Match: *` (then removes it): a 412 or 409
        on the second says the store honours the condition."""
        name = f"{self.prefix}{PROBE_FOLDER}/probe-{secrets.token_hex(8)}"
        try:
            for _ in range(2):
                self._call("put_object", name, Key=name, Body=b"probe", IfNoneMatch="*")
            honoured = False
        except StoreAnswer as answer:
            honoured = answer.status in (409, 412)
        finally:
            try:
                self._call("delete_object", name, Key=name)
            except (StoreAnswer, StorageError):
                log.warning("could not remove the probe object %s from %s", name, self.bucket)
        if not honoured:
            log.warning(
                "%s ignores If-None-Match: archives are created check-then-write, and in a race between machines "
                "the database's UNIQUE(name, version) decides (docs/deploying/object-store.md)", self.location,
            )
        return honoured


class GuardedBody(io.RawIOBase):
    """A response body whose read errors (the store died mid-object) are StorageUnavailable too."""

    def __init__(self, body: Any, storage: S3Storage, key: str):
        super().__init__()
        self.body = body
        self.storage = storage
        self.key = key

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            data = self.body.read(len(buffer))
        except Exception as exc:  # noqa: BLE001 - translated into the one error hierarchy
            raise self.storage.translated(exc, "get_object", self.key) from exc
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self.body.close()
        super().close()
