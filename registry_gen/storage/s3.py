"""content/ in an S3-compatible bucket (obstore, the `s3` extra): `storage: s3://BUCKET/PREFIX`.

The requests go through obstore (Python bindings of Rust's object_store): a request costs the
api 0.2-0.9 ms of CPU there against boto3's 0.9-4.7 ms (signing, the endpoint ruleset,
http.client, XML parsing in Python: bench/PROFILE.md, "s3client"), and a publish sends a dozen.
boto3 stays for what obstore does not do the same way: the credential chain (environment,
~/.aws, an instance role: `BotoCredentials`), a listing holding a key object_store cannot name
(`s3_client`) and the tools. Presigned URLs are obstore's (`signed_gets`: the same URL boto3
signed, ~20x less CPU).

Create-only: `PUT` with `If-None-Match: *`, which the store refuses with 412 when the key exists
(AWS since 2024, and the stores the tests run). Where the store ignores the header (found by a
probe on first use, or said by `storage_conditional_writes: false`), `create` checks then writes:
exact under the caller's lock, and in a race between machines the database's UNIQUE(name, version)
decides which publish happened (docs/deploying/object-store.md).

Errors: a store that cannot be reached, times out, throttles or answers 5xx raises
`StorageUnavailable` (HTTP 503 at the web edge) after bounded retries; one that refuses for good
(no bucket, no credentials, denied) raises `StorageError`. The timeouts are deliberate: a dead
store costs a caller seconds, never a hang.
"""

from __future__ import annotations

import hashlib
import functools
import io
import logging
import os
import random
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from registry_gen import __version__
from registry_gen.errors import ConfigError, StorageError, StorageUnavailable, VersionConflict
from registry_gen.storage.contract import SPOOL_BLOCK, StoredObject, checked_key, is_content_key, spool_stream
from registry_gen.storage.location import S3Location

log = logging.getLogger(__name__)
T = TypeVar("T")

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
# obstore says what the store answered only in its message: the status line, then S3's XML error.
STATUS = re.compile(r"status code: (\d{3})")
CODE = re.compile(r"<Code>([^<]*)</Code>")
MESSAGE = re.compile(r"<Message>([^<]*)</Message>")
# A request's whole time, body included (a tarball's upload or download on a slow link); a stalled
# connection is found sooner, by the read timeout, which restarts with each read.
REQUEST_LIMIT = timedelta(minutes=10)
# How long obstore may keep credentials it asked of boto3's chain. object_store asks again once less
# than 5 minutes are left, so this is 10: with 5 it asked on every request after 100 ms (its back-off;
# bench/PROFILE.md, "obsign"), now every 5 minutes. What boto3's chain hands out is good for 10 more
# minutes at least (a role's credentials are refreshed by then), so none is used expired.
CREDENTIALS_TTL = timedelta(minutes=10)


@dataclass(frozen=True)
class Timeouts:
    """Per attempt: seconds to connect and to wait for each read; attempts in all (backing off
    between them, at most 1 s then 2 s)."""

    connect: float = 3.0
    read: float = 20.0
    attempts: int = 3


class UnnamedKey(Exception):
    """The bucket holds a key object_store refuses to name (an empty, `.` or `..` segment)."""


class StoreAnswer(Exception):
    """The store answered a status from ANSWERS; `retried`: the request had been sent before."""

    def __init__(self, status: int, code: str, retried: bool):
        super().__init__(f"{status} {code}")
        self.status = status
        self.code = code
        self.retried = retried


def s3_client(endpoint_url: str | None, timeouts: Timeouts, session: Any = None) -> Any:
    """A boto3 S3 client, for what obstore does not do (presigned URLs, the tools); credentials and
    region come from boto3's usual places (environment, ~/.aws, an instance role). A custom endpoint
    gets path-style addressing (loopback and most S3-compatible stores have no per-bucket host
    names), and checksums only where S3 requires them (several compatible stores reject the newer
    streamed trailers). A fixed User-Agent: botocore rebuilds its default one twice per request."""
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
    return (session or boto3.session.Session()).client("s3", endpoint_url=endpoint_url, config=config)


class BotoCredentials:
    """obstore's credential provider, answered by boto3's chain: the places an operator already set
    (environment, ~/.aws and AWS_PROFILE, an instance or container role), refreshed as boto3 does."""

    def __init__(self, credentials: Any):
        self.credentials = credentials

    def __call__(self) -> dict[str, Any]:
        frozen = self.credentials.get_frozen_credentials()
        return {"access_key_id": frozen.access_key, "secret_access_key": frozen.secret_key,
                "token": frozen.token, "expires_at": datetime.now(UTC) + CREDENTIALS_TTL}  # fmt: skip


def boto3_credentials() -> tuple[str | None, Any]:
    """The region and credentials boto3's chain finds now (credentials None: none found); read when
    the store is opened, as a boto3 client does, so a later change of the environment is not seen."""
    try:
        import boto3
    except ImportError as exc:
        raise ConfigError("storage: s3://… needs obstore and boto3: pip install 'registry-gen[s3]'") from exc
    # botocore says at INFO where it found the credentials, on every start: not news to an operator.
    logging.getLogger("botocore.credentials").setLevel(logging.WARNING)
    session = boto3.session.Session()
    return session.region_name, session.get_credentials()


def object_store(bucket: str, endpoint_url: str | None, timeouts: Timeouts, *, region: str | None, credentials: Any, attempts: int) -> Any:
    """An obstore S3Store for `bucket`: path-style at a custom endpoint, `attempts` tries per request."""
    try:
        import obstore
        from obstore.store import S3Store
    except ImportError as exc:
        raise ConfigError("storage: s3://… needs obstore and boto3: pip install 'registry-gen[s3]'") from exc
    endpoint = {"endpoint": endpoint_url, "virtual_hosted_style_request": False} if endpoint_url else {}
    if os.environ.get("AWS_CA_BUNDLE") and not os.environ.get("SSL_CERT_FILE"):
        warn_ca_bundle_unread()
    return S3Store(
        bucket, region=region or "us-east-1", credential_provider=BotoCredentials(credentials), **endpoint,
        client_options={
            "allow_http": bool(endpoint_url and endpoint_url.startswith("http://")),
            "connect_timeout": timedelta(seconds=timeouts.connect), "read_timeout": timedelta(seconds=timeouts.read),
            "timeout": REQUEST_LIMIT, "user_agent": f"registry-gen/{__version__} obstore/{obstore.__version__}",
        },
        retry_config={
            "max_retries": attempts - 1, "retry_timeout": REQUEST_LIMIT,
            "backoff": {"init_backoff": timedelta(milliseconds=500), "max_backoff": timedelta(seconds=2), "base": 2},
        },
    )  # fmt: skip


# What warn_unnamed has said, by (location, key): a start's sync and every build of that folder list
# it again, and the warning is news once per process.
UNNAMED_WARNED: set[tuple[str, str]] = set()
_UNNAMED_LOCK = threading.Lock()


def warn_unnamed(location: S3Location, key: str) -> None:
    """Once per process and key: the bucket holds a key object_store cannot name, so listings of its
    folder go through boto3 (slower, the same objects)."""
    with _UNNAMED_LOCK:
        if (str(location), key) in UNNAMED_WARNED:
            return
        UNNAMED_WARNED.add((str(location), key))
    log.warning("%s: a key object_store cannot name (an empty, . or .. segment): %s; listings of its folder go through "
                "boto3 until it is removed", location, key)


@functools.cache
def warn_ca_bundle_unread() -> None:
    """Once a process: obstore trusts the system's CAs, or SSL_CERT_FILE's instead (rustls'
    native roots), never boto3's AWS_CA_BUNDLE. Setting SSL_CERT_FILE for the operator would also
    replace the CAs of every other TLS client here (a mirror's upstream), so say it instead."""
    log.warning(
        "AWS_CA_BUNDLE is not read by the object store's client: add that CA to the system's trust store "
        "(update-ca-certificates), or set SSL_CERT_FILE to a bundle holding it and the public CAs"
    )


class S3Storage:
    """Keys live under the location's prefix in its bucket; `create` is conditional where the store can."""

    def __init__(
        self,
        location: S3Location,
        *,
        endpoint_url: str | None = None,
        conditional_writes: bool | None = None,
        timeouts: Timeouts = Timeouts(),
    ):
        self.location = location
        self.bucket = location.bucket
        self.prefix = f"{location.prefix}/" if location.prefix else ""
        self.endpoint_url = endpoint_url
        self.timeouts = timeouts
        self.region, self.credentials = boto3_credentials()
        self.watchers: list[Callable[[str, str], None]] = []  # told (operation, key) before each request
        self._conditional = conditional_writes  # None: probe the store on first need
        self._probe_lock = threading.Lock()
        self._stores: dict[int, Any] = {}  # by attempts per request; made on first use
        self._stores_lock = threading.Lock()

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
        import obstore

        try:
            return bytes(self._call("GetObject", key, lambda store, name: obstore.get(store, name).bytes()))
        except StoreAnswer as answer:
            if answer.status == 404:
                return None
            raise self._unexpected(answer, "GetObject", key) from None

    def open(self, key: str) -> BinaryIO | None:
        import obstore

        try:
            result = self._call("GetObject", key, lambda store, name: obstore.get(store, name))
        except StoreAnswer as answer:
            if answer.status == 404:
                return None
            raise self._unexpected(answer, "GetObject", key) from None
        return io.BufferedReader(GuardedBody(result.stream(min_chunk_size=SPOOL_BLOCK), self, key), SPOOL_BLOCK)  # type: ignore[return-value]

    def spool(self, key: str, target: Path) -> bool:
        stream = self.open(key)
        if stream is None:
            return False
        with stream:
            spool_stream(stream, target)
        return True

    def attributes(self, key: str) -> tuple[int, dict[str, str]] | None:
        """The object's size and attributes (its headers and `x-amz-meta-` metadata, by name) from
        one HEAD; None when it does not exist."""
        import obstore

        try:
            result = self._call("HeadObject", key, lambda store, name: obstore.get(store, name, options={"head": True}))
        except StoreAnswer as answer:
            if answer.status == 404:
                return None
            raise self._unexpected(answer, "HeadObject", key) from None
        return int(result.meta["size"]), {str(name): str(value) for name, value in result.attributes.items()}

    def list(self, prefix: str = "") -> Iterator[StoredObject]:
        listed: set[str] = set()
        try:
            for item in self._list_names(prefix):
                listed.add(item.key)
                yield item
        except UnnamedKey as exc:
            unnamed: list[str] = []
            yield from (item for item in self._list_through_boto3(prefix, unnamed) if item.key not in listed)
            for key in unnamed or [str(exc)]:  # none with such a segment: what obstore said, once too
                warn_unnamed(self.location, key)

    def _list_names(self, prefix: str) -> Iterator[StoredObject]:
        import obstore
        from obstore.exceptions import InvalidPathError

        wanted = self.prefix + prefix
        # object_store lists whole path segments: the folder holding the prefix, filtered to it.
        folder = wanted.rpartition("/")[0] or None
        chunks = self._call("ListObjectsV2", prefix, lambda store, _: iter(obstore.list(store, folder, chunk_size=1000)), name=wanted)
        while True:
            try:
                chunk = next(chunks)
            except StopIteration:
                return
            except InvalidPathError as exc:  # a key put by other means, with an empty or dot segment
                raise UnnamedKey(str(exc).splitlines()[0]) from exc
            except Exception as exc:  # noqa: BLE001 - translated: a listing fails like any other call
                raise self.translated(exc, "ListObjectsV2", prefix) from exc
            yield from self._listed(chunk, wanted)

    def _list_through_boto3(self, prefix: str, unnamed: list[str]) -> Iterator[StoredObject]:
        """The listing as boto3 sends it, for a bucket holding a key object_store refuses: slower
        (~250 Python calls an object), rare, and exactly what the contract had before obstore.
        `unnamed` gets the names with an empty, `.` or `..` segment (object_store's refusals)."""
        import boto3

        wanted = self.prefix + prefix
        frozen = self.credentials.get_frozen_credentials()
        session = boto3.session.Session(frozen.access_key, frozen.secret_key, frozen.token, region_name=self.region)
        pages = iter(s3_client(self.endpoint_url, self.timeouts, session).get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=wanted))
        while True:
            try:
                page = next(pages)
            except StopIteration:
                return
            except Exception as exc:  # noqa: BLE001 - translated: a listing fails like any other call
                raise self._botocore_translated(exc, prefix) from exc
            chunk = [{"path": item["Key"], "size": item["Size"], "last_modified": item.get("LastModified"), "e_tag": item.get("ETag")}
                     for item in page.get("Contents", [])]  # fmt: skip
            unnamed += [str(item["path"]) for item in chunk if any(part in ("", ".", "..") for part in str(item["path"]).split("/"))]
            yield from self._listed(chunk, wanted)

    def _botocore_translated(self, exc: Exception, prefix: str) -> Exception:
        from botocore.exceptions import BotoCoreError, ClientError

        where = f"{self.location} (ListObjectsV2 {prefix})"
        if isinstance(exc, ClientError):
            error = exc.response.get("Error", {})
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            answered = self._answered(status, str(error.get("Code", "")), str(error.get("Message", "")), where)
            return self._unexpected(answered, "ListObjectsV2", prefix) if isinstance(answered, StoreAnswer) else answered
        if isinstance(exc, (BotoCoreError, OSError)):
            log.warning("object store unavailable: %s: %s", where, exc)
            return StorageUnavailable(f"the object store is unavailable ({where}: {exc}); retry shortly")
        return exc

    def _listed(self, chunk: list[dict[str, Any]], wanted: str) -> Iterator[StoredObject]:
        for item in chunk:
            name = str(item["path"])
            key = name[len(self.prefix) :]
            if name.startswith(wanted) and is_content_key(key):
                size = int(item["size"])
                modified = item.get("last_modified")
                token = f"{size}-{str(item.get('e_tag') or '').strip(chr(34))}"
                yield StoredObject(key, size, token, modified.timestamp() if modified is not None else None)

    def signed_gets(self, keys: Sequence[str], seconds: int) -> list[str]:
        """Presigned GET URLs of `keys` (in order), valid `seconds`, for this storage's endpoint,
        path-style: signed by obstore with the credentials its requests use; no request is sent."""
        import obstore

        names = [self._name(key) for key in keys]
        try:
            return list(obstore.sign(self._store(max(1, self.timeouts.attempts)), "GET", names, timedelta(seconds=seconds)))
        except StorageError:
            raise
        except Exception as exc:  # noqa: BLE001 - translated into the one error hierarchy
            raise self.translated(exc, "presign GetObject", keys[0] if keys else "") from exc

    # ---- writes

    def create(self, key: str, data: bytes) -> None:
        if not self.atomic_create:
            if self._head(key) is not None:
                raise VersionConflict(f"{key} already exists in {self.location}")
            self._put(key, data)
            return
        md5 = hashlib.md5(data).hexdigest()
        for _ in range(CONFLICT_RETRIES):
            try:
                self._create_once(key, data)
                return
            except StoreAnswer as answer:
                if answer.status == 412:
                    if answer.retried and self._holds(key, data, md5):
                        return  # sent again because the answer to our first PUT was lost: that one landed
                    raise VersionConflict(f"{key} already exists in {self.location}") from None
                if answer.status != 409:
                    raise self._unexpected(answer, "PutObject", key) from None
        raise StorageUnavailable(f"{self.location}: {key} stayed busy with other writers; retry shortly")

    def _create_once(self, key: str, data: bytes) -> None:
        """One create-only PUT, its retries counted here (obstore's would hide that a 412 may
        answer our own earlier attempt): StoreAnswer.retried says whether one was sent before."""
        attempts = max(1, self.timeouts.attempts)
        for attempt in range(attempts):
            try:
                self._put(key, data, mode="create", attempts=1)
                return
            except StoreAnswer as answer:
                answer.retried = attempt > 0
                raise
            except StorageUnavailable:
                if attempt == attempts - 1:
                    raise
                time.sleep(random.uniform(0, min(2.0, 2.0**attempt)))  # noqa: S311 - jitter, not a secret

    def replace(self, key: str, data: bytes) -> None:
        try:
            self._put(key, data)
        except StoreAnswer as answer:
            raise self._unexpected(answer, "PutObject", key) from None

    def publish(self, key: str, data: bytes, *, content_type: str, cache_control: str, metadata: dict[str, str] | None = None) -> None:
        """Stores or overwrites a file of the built tree with the headers its readers get (the tree
        sink, registry_gen.objectstore); `metadata`: served as `x-amz-meta-NAME` headers (obstore
        sends every attribute it does not know as one)."""
        attributes = {**(metadata or {}), "Content-Type": content_type, "Cache-Control": cache_control}
        try:
            self._put(key, data, attributes=attributes)
        except StoreAnswer as answer:
            raise self._unexpected(answer, "PutObject", key) from None

    def remove(self, key: str) -> bool:
        import obstore

        if self._head(key) is None:
            return False
        try:
            self._call("DeleteObject", key, obstore.delete)
        except StoreAnswer as answer:
            if answer.status != 404:
                raise self._unexpected(answer, "DeleteObject", key) from None
        return True

    # ---- the calls

    def _name(self, key: str) -> str:
        return self.prefix + str(checked_key(key))

    def _put(self, key: str, data: bytes, *, mode: str = "overwrite", attributes: dict[str, str] | None = None, attempts: int = 0) -> None:
        """One PUT, never multipart (a create-only PUT must be one request). The body's integrity:
        obstore signs its SHA-256 (x-amz-content-sha256), which the store checks against the body."""
        import obstore

        def send(store: Any, name: str) -> Any:
            return obstore.put(store, name, data, mode=mode, attributes=attributes, use_multipart=False)  # type: ignore[arg-type]

        self._call("PutObject", key, send, attempts=attempts)

    def _head(self, key: str) -> dict[str, Any] | None:
        import obstore

        try:
            return dict(self._call("HeadObject", key, obstore.head))
        except StoreAnswer as answer:
            if answer.status == 404:
                return None
            raise self._unexpected(answer, "HeadObject", key) from None

    def _holds(self, key: str, data: bytes, md5: str) -> bool:
        """Whether the object has exactly these bytes: by its ETag (a single PUT's MD5), else read
        back (an encrypted bucket's ETag is not the MD5)."""
        head = self._head(key)
        if head is None or int(head.get("size", -1)) != len(data):
            return False
        return str(head.get("e_tag") or "").strip('"') == md5 or self.read(key) == data

    def _store(self, attempts: int) -> Any:
        store = self._stores.get(attempts)
        if store is None:
            if self.credentials is None:
                raise StorageError(f"{self.location}: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or a role")
            with self._stores_lock:
                store = self._stores.get(attempts) or object_store(
                    self.bucket, self.endpoint_url, self.timeouts, region=self.region, credentials=self.credentials, attempts=attempts
                )
                self._stores[attempts] = store
        return store

    def _call(self, operation: str, key: str, send: Callable[[Any, str], T], *, name: str | None = None, attempts: int = 0) -> T:
        """`send(store, name)` for `key` (its full name in the bucket, unless `name` gives one),
        with `attempts` tries (0: the configured ones); its errors as ours."""
        name = self._name(key) if name is None else name
        for watcher in self.watchers:
            watcher(operation, name)
        try:
            return send(self._store(attempts or max(1, self.timeouts.attempts)), name)
        except StorageError:
            raise
        except Exception as exc:  # noqa: BLE001 - translated into the one error hierarchy
            raise self.translated(exc, operation, key) from exc

    def translated(self, exc: Exception, operation: str, key: str) -> Exception:
        """obstore's error as ours: StoreAnswer (the caller decides), StorageUnavailable (later),
        StorageError (never without a change); anything else is a bug and stays itself."""
        from obstore.exceptions import BaseError

        if not isinstance(exc, (BaseError, OSError)):
            return exc
        where = f"{self.location} ({operation} {key})"
        text = str(exc)
        status = STATUS.search(text)
        if status is None:  # no answer: refused, reset, timed out
            summary = text.splitlines()[0][:300] if text else type(exc).__name__
            log.warning("object store unavailable: %s: %s", where, summary)
            return StorageUnavailable(f"the object store is unavailable ({where}: {summary}); retry shortly")
        code, message = CODE.search(text), MESSAGE.search(text)
        return self._answered(int(status.group(1)), code.group(1) if code else "", message.group(1) if message else "", where)

    def _answered(self, status: int, code: str, message: str, where: str) -> Exception:
        if status in ANSWERS and code != "NoSuchBucket":
            return StoreAnswer(status, code, retried=False)
        if status >= 500 or status == 429 or code in TRANSIENT_CODES:
            log.warning("object store unavailable: %s: %s %s", where, status, code)
            return StorageUnavailable(f"the object store is unavailable ({where}: {status} {code}); retry shortly")
        if code == "NoSuchBucket":
            return StorageError(f"{where}: the bucket {self.bucket} does not exist at {self.endpoint_url or 'AWS'}")
        return StorageError(f"{where}: refused: {status} {code} {message}".rstrip())

    def _unexpected(self, answer: StoreAnswer, operation: str, key: str) -> StorageError:
        return StorageError(f"{self.location} ({operation} {key}): unexpected answer {answer}")

    def _probe_conditional_writes(self) -> bool:
        """Writes one probe object twice with `If-None-Match: *` (then removes it): a 412 or 409
        on the second says the store honours the condition."""
        import obstore

        name = f"{self.prefix}{PROBE_FOLDER}/probe-{secrets.token_hex(8)}"

        def put(store: Any, name: str) -> Any:
            return obstore.put(store, name, b"probe", mode="create", use_multipart=False)

        try:
            for _ in range(2):
                self._call("PutObject", name, put, name=name)
            honoured = False
        except StoreAnswer as answer:
            honoured = answer.status in (409, 412)
        finally:
            try:
                self._call("DeleteObject", name, obstore.delete, name=name)
            except (StoreAnswer, StorageError):
                log.warning("could not remove the probe object %s from %s", name, self.bucket)
        if not honoured:
            log.warning(
                "%s ignores If-None-Match: archives are created check-then-write, and in a race between machines "
                "the database's UNIQUE(name, version) decides (docs/deploying/object-store.md)", self.location,
            )
        return honoured


class GuardedBody(io.RawIOBase):
    """A response body (obstore's stream of chunks) whose read errors (the store died mid-object)
    are StorageUnavailable too."""

    def __init__(self, chunks: Iterator[Any], storage: S3Storage, key: str):
        super().__init__()
        self.chunks: Iterator[Any] | None = chunks
        self.pending = memoryview(b"")
        self.storage = storage
        self.key = key

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self.pending:
            if self.chunks is None:
                return 0
            try:
                self.pending = memoryview(next(self.chunks))
            except StopIteration:
                self.chunks = None
                return 0
            except Exception as exc:  # noqa: BLE001 - translated into the one error hierarchy
                raise self.storage.translated(exc, "GetObject", self.key) from exc
        taken = min(len(buffer), len(self.pending))
        buffer[:taken] = self.pending[:taken]
        self.pending = self.pending[taken:]
        return taken

    def close(self) -> None:
        self.chunks = None  # dropping obstore's stream ends the response
        self.pending = memoryview(b"")
        super().close()
