"""Content and the built tree in an object store (issue 28): `registry-gen api` with `storage:`.

The bucket is the truth; this machine's `content_dir` and `out_dir` are a disposable work cache
that any instance rebuilds from the bucket:

    write (under the package's lock)  → archives and metas into the content bucket (WriteService)
    before each build                 → `ContentMirror.sync`: the touched package folders, bucket → content_dir
    the build                         → as on one machine: content_dir → out_dir, state on PostgreSQL
    right after it                    → `TreeSink.publish`: exactly the paths it wrote, out_dir → tree bucket
                                        (tarballs, then each package's own files, then the rest; removals last)

A local file is never read as the truth about a package: the listing of the content bucket is
(a package another instance wrote is missing here until the sync brings it). Each synced file's
mtime is a function of its object (`object_mtime_ns`), so every instance records the same stat
in the shared state and none sees a change that did not happen.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit

from registry_gen.access import has_dot_segment
from registry_gen.errors import ConfigError
from registry_gen.hosting import TREE_KEY_CHARACTERS, Upload, upload_plan
from registry_gen.layout import ABBREVIATED_DOCUMENT, PACKAGE_DOCUMENT, WEB_ROOT
from registry_gen.purge import SharedCache, cache_key, shared_cache
from registry_gen.state import open_state
from registry_gen.state.ledger import ContentToken, package_folders
from registry_gen.storage import S3Location, S3Storage, StoredObject, open_content_storage, parse_s3_url, storage_endpoint
from registry_gen.storage.contract import checked_key, is_content_key
from registry_gen.storage.folder import FolderStorage
from registry_gen.writer import atomic_write_bytes

if TYPE_CHECKING:
    from registry_gen.build import BuildResult
    from registry_gen.settings import Settings

log = logging.getLogger(__name__)

# The tree's default place: beside the content, under a folder no npm package can be named
# (an unscoped name never starts with "_"), which the content listing skips.
TREE_FOLDER = "_tree"
# Tree uploads of one phase in flight at once; boto3's pool keeps 10 connections per client.
UPLOAD_THREADS = 8
# One pool for the process, its threads kept between publishes: a pool per phase started up to 13
# threads per publish, ~5 ms each on a loaded machine (bench/PROFILE.md, "server share"). Its tasks
# never submit to it, so trees (the write service's, the leader's) can share it without deadlock.
_UPLOADERS = ThreadPoolExecutor(max_workers=UPLOAD_THREADS, thread_name_prefix="tree-upload")
# Each tree object's MD5 as its writer sent it (`x-amz-meta-registry-gen-md5`): what `holds` trusts
# where the ETag is no MD5 (SSE-KMS, multipart). A PUT replaces an object's metadata whole, so the
# value never outlives the bytes it names, and copy tools keep it with them.
DIGEST_METADATA = "registry-gen-md5"


# ---------------------------------------------------------------- where things are (pure)


def tree_location(settings: Settings) -> S3Location:
    """`tree:` when set, else `<storage>/_tree`."""
    if settings.tree is not None:
        return parse_s3_url(settings.tree)
    content = parse_s3_url(str(settings.storage))
    return S3Location(content.bucket, f"{content.prefix}/{TREE_FOLDER}" if content.prefix else TREE_FOLDER)


def nested_tree_folder(settings: Settings) -> str | None:
    """The content key prefix the tree occupies when it sits inside the content's prefix."""
    content, tree = parse_s3_url(str(settings.storage)), tree_location(settings)
    if content.bucket != tree.bucket:
        return None
    if not content.prefix:
        return tree.prefix + "/"
    inside = tree.prefix.startswith(content.prefix + "/")
    return tree.prefix[len(content.prefix) + 1 :] + "/" if inside else None


def object_mtime_ns(item: StoredObject) -> int:
    """The mtime a synced copy of `item` gets: its LastModified second, and nanoseconds from its
    ETag, so two versions written within one second (same size) still differ, and every instance
    gives the same object the same stat."""
    seconds = int(item.modified or 0)
    return seconds * 1_000_000_000 + int(hashlib.md5(item.token.encode()).hexdigest()[:8], 16) % 1_000_000_000


def _md5_of(path: Path) -> str:
    digest = hashlib.md5()
    try:
        with path.open("rb") as stream:
            while block := stream.read(1 << 20):
                digest.update(block)
    except OSError:
        return ""  # gone meanwhile: fetched
    return digest.hexdigest()


# ---------------------------------------------------------------- content: bucket → work folder


class ContentMirror:
    """The work folder's copy of the content bucket, made equal to it prefix by prefix.

    It remembers, per package folder, the token (registry_gen.state.ledger, "Folder tokens") at
    which its copy was last made equal to the bucket: a listing read under the folder's lock, or
    this process's own write on top of such a copy (`wrote`). A build whose folder's token is still
    that one needs no listing. Forgotten on anything else: a listing without a token, a write
    rolled back, a restart (the memory is this process's)."""

    def __init__(self, bucket: S3Storage, folder: Path, skip: str | None = None):
        self.bucket = bucket
        self.local = FolderStorage(folder)
        self.folder = folder
        self.skip = skip  # the tree's folder when it sits inside the content prefix
        self._synced: dict[str, ContentToken] = {}
        self._memory = threading.Lock()  # the write service and the leader's refresher sync from two threads

    def sync(self, prefix: str = "") -> int:
        """Makes the work folder's files under `prefix` those of the bucket (missing or changed
        ones fetched, extra ones removed); returns how many files changed."""
        self._forget_under(prefix)
        remote = {item.key: item for item in self.bucket.list(prefix) if not self._skipped(item.key)}
        local = {item.key: item for item in self.local.list(prefix)}
        changed = 0
        for key, item in remote.items():
            mtime = object_mtime_ns(item)
            held = local.get(key)
            if held is None or held.token != f"{item.size}-{mtime}":
                self._refresh(key, item, mtime, held)
                changed += 1
        for key in local.keys() - remote.keys():
            if not self._skipped(key):
                self.local.remove(key)
                changed += 1
        return changed

    def sync_packages(self, keys: Iterable[str]) -> int:
        """The package folders of `keys` made equal to the bucket, each listed."""
        return self.sync_folders(package_folders(keys))

    def sync_folders(self, folders: Iterable[str], tokens: Mapping[str, ContentToken] | None = None) -> int:
        """These package folders made equal to the bucket. `tokens`: each folder's token now, read
        under the folder's lock; a folder whose copy here was made at that very token is not listed
        (nobody wrote it through registry-gen since), a listed one is remembered at it."""
        changed = 0
        for folder in sorted(folders):
            token = (tokens or {}).get(folder)
            if token is not None and self.synced_at(folder) == token:
                continue
            changed += self.sync(folder)
            if token is not None:
                with self._memory:
                    self._synced[folder] = token
        return changed

    def synced_at(self, folder: str) -> ContentToken | None:
        with self._memory:
            return self._synced.get(folder)

    def wrote(self, folders: Iterable[str]) -> None:
        """This process's write moved these folders' tokens by one (its `begin_write`) and has
        stored, and adopted here, every change it made in them: a copy made at (e, g) now equals
        the bucket at (e, g + 1). A copy of unknown token stays unknown."""
        with self._memory:
            for folder in folders:
                if folder in self._synced:
                    everywhere, own = self._synced[folder]
                    self._synced[folder] = (everywhere, own + 1)

    def forget(self, folders: Iterable[str]) -> None:
        """These folders' copies may differ from the bucket (a write rolled back): listed next time."""
        with self._memory:
            for folder in folders:
                self._synced.pop(folder, None)

    def _forget_under(self, prefix: str) -> None:
        with self._memory:
            self._synced = {folder: token for folder, token in self._synced.items() if not folder.startswith(prefix)}

    def _skipped(self, key: str) -> bool:
        return not is_content_key(key) or (self.skip is not None and key.startswith(self.skip))

    def adopt(self, key: str, data: bytes) -> None:
        """A file this process has just stored in the bucket, written to the work folder as well: the
        next sync finds the bytes the listing's ETag names and only sets the mtime, instead of
        reading the file back (two GETs less per publish). Nothing is trusted: other bytes, or an
        ETag that is no MD5 (multipart, some encryptions), and the sync reads the bucket's.

        Its mtime is the one a sync would give it (object_mtime_ns) with this clock's second for
        the object's LastModified, which no PUT answers: a build that needs no listing records the
        same stat as every other instance, unless the PUT straddled a second or the clocks differ;
        then the next listing sets the bucket's, and the build reads the file again (same bytes)."""
        target = self.folder / checked_key(key)
        atomic_write_bytes(target, data)
        size = len(data)
        mtime = object_mtime_ns(StoredObject(key, size, f"{size}-{hashlib.md5(data).hexdigest()}", time.time()))
        os.utime(target, ns=(mtime, mtime))

    def adopt_removal(self, key: str) -> None:
        """A file this process has just removed from the bucket, removed here too (the folder store
        checks the key)."""
        self.local.remove(key)

    def _refresh(self, key: str, item: StoredObject, mtime_ns: int, held: StoredObject | None) -> None:
        target = self.folder / key
        if held is not None and held.size == item.size and item.token == f"{item.size}-{_md5_of(target)}":
            os.utime(target, ns=(mtime_ns, mtime_ns))  # the same bytes already: the bucket's stat only
            return
        self._fetch(key, mtime_ns)

    def _fetch(self, key: str, mtime_ns: int) -> None:
        target = self.folder / key
        if not self.bucket.spool(key, target):
            self.local.remove(key)  # gone between the listing and the read: so it is gone
            return
        os.utime(target, ns=(mtime_ns, mtime_ns))


# ---------------------------------------------------------------- the tree: work folder → bucket


class TreeSink(Protocol):
    """Where a build's output goes once written to out_dir."""

    def publish(self, result: BuildResult) -> None:
        """Makes the readers' tree hold what `result` wrote and removed; raises StorageUnavailable
        when it could not (what is left is retried by the next call)."""
        ...


class LocalTree:
    """The embedded default: out_dir is what readers get; nothing to do."""

    def publish(self, result: BuildResult) -> None:
        return None


@dataclass(frozen=True)
class EarlyUpload:
    """A tree tarball sent while the build runs (BucketTree.upload_early): its tree path, the MD5 of
    the bytes sent, and the upload in flight."""

    relative: str
    md5: str
    sent: Future[None]


@dataclass
class Owed:
    written: set[str]
    removed: set[str]


class BucketTree:
    """The built tree in a bucket. Uploads in `hosting.upload_plan`'s order (tarballs, then each
    package's own files: documents, dist-tags, pages; then the listings), so a reader never gets a
    document naming a tarball, or a listing naming a package, the bucket does not hold yet; removals last. What a failed publish left is owed, and published first next time.
    With `shared` (a purged cache in front, `purge:`), each object carries the caching headers the
    folder's server sends: Cache-Control with s-maxage, and its surrogate key as metadata
    (`x-amz-meta-<key_header>`: a bucket stores no header of another name). `folder_keys`: False
    when only the emitted nginx config reads the bucket (`tree_readers: nginx`): a document goes
    under its tree path only. A removal removes the folder key in either case: one left by an
    earlier setting must not outlive its document."""

    def __init__(self, bucket: S3Storage, out_dir: Path, shared: SharedCache | None = None, *, folder_keys: bool = True):
        self.bucket = bucket
        self.out_dir = out_dir
        self.shared = shared
        self.folder_keys = folder_keys
        self.owed = Owed(set(), set())
        self._lock = threading.Lock()  # the write service and the index refresher publish from two threads

    def publish(self, result: BuildResult, early: EarlyUpload | None = None) -> None:
        """`early`: a tarball `upload_early` sent while the build ran; not sent again if it is
        stored and holds the bytes the build wrote."""
        written, removed = list(result.written), list(result.removed)
        if getattr(result.written, "total", len(written)) > len(written):
            written = tree_files(self.out_dir)  # the build named only the first paths: publish the whole tree
        if early is not None:
            wait([early.sent])  # stored (or failed) before any document that may name it goes
        with self._lock:
            self.owed.written |= set(written)
            self.owed.removed = (self.owed.removed | set(removed)) - set(written)
            self.owed.written -= set(removed)
            self._publish_owed(early)

    def upload_early(self, relative: str, data: bytes) -> EarlyUpload:
        """Starts uploading a tarball of the tree (`relative`) whose bytes are known before the build
        writes it: the write's archive. No document names it until the build's upload, which waits
        for it (`publish(result, early)`); a build that refuses it calls `withdraw`."""
        (upload,) = upload_plan([relative], shared=self.shared)
        assert upload.phase == 0, relative  # only a tarball: a document must never precede its tarball
        return EarlyUpload(relative, hashlib.md5(data).hexdigest(), _UPLOADERS.submit(self._put, upload, data))

    def withdraw(self, early: EarlyUpload) -> None:
        """The early tarball of a write the build refused (or that failed) removed again, once its
        upload is done: no document named it. Raises if the bucket cannot be asked."""
        wait([early.sent])
        self.bucket.remove(self._key(early.relative))

    def _key(self, relative: str) -> str:
        (upload,) = upload_plan([relative])
        return upload.key

    def _publish_owed(self, early: EarlyUpload | None = None) -> None:
        # A web folder's alias is skipped: the site links index.html explicitly.
        planned = upload_plan(sorted(self.owed.written), shared=self.shared, folder_keys=self.folder_keys)
        uploads = [upload for upload in planned if not upload.key.endswith("/") and not self._sent_early(upload, early)]
        for phase in sorted({upload.phase for upload in uploads}):  # a phase starts once the one before is stored
            self._upload_together([upload for upload in uploads if upload.phase == phase])
        self.owed.written.clear()
        for key in sorted(self.owed.removed):
            for alias in {upload.key for upload in upload_plan([key])}:  # folder keys too, whatever the setting
                if not alias.endswith("/"):
                    self.bucket.remove(alias)
        self.owed.removed.clear()

    def holds(self, relatives: list[str]) -> bool:
        """Whether the bucket holds these files of out_dir byte for byte under every key they are
        uploaded as: their ETags (listed, a key's listing also naming the keys under it) against
        the files' MD5; a key whose ETag is no MD5 (SSE-KMS, multipart: most copy tools) by the
        MD5 its writer recorded in its metadata (`DIGEST_METADATA`, one HEAD). One with neither
        answers no: the caller then acts as if it did not."""
        digests: dict[str, tuple[int, str]] = {}
        listed: dict[str, str] = {}
        for upload in upload_plan(sorted(relatives), folder_keys=self.folder_keys):  # sorted by key: `-/all` is listed before `-/all/index.html`
            path = self.out_dir / upload.source
            if upload.key.endswith("/"):
                continue
            if not path.is_file():
                return False
            if upload.source not in digests:
                digests[upload.source] = (path.stat().st_size, _md5_of(path))
            if upload.key not in listed:
                listed.update((item.key, item.token) for item in self.bucket.list(upload.key))
            size, md5, token = *digests[upload.source], listed.get(upload.key)
            if token is None or (token != f"{size}-{md5}" and not self._recorded(upload.key, size, md5)):
                return False  # missing, or neither its ETag nor its writer's digest names these bytes
        return True

    def files_under(self, folder: str) -> list[str]:
        """The tree files the bucket holds under `folder` (a tree path ending in "/"): one LIST."""
        return [item.key for item in self.bucket.list(folder) if not item.key.endswith("/")]

    def _recorded(self, key: str, size: int, md5: str) -> bool:
        """Whether the object's writer recorded these bytes' MD5, and it has their size."""
        found = self.bucket.attributes(key)
        return found is not None and found[0] == size and found[1].get(DIGEST_METADATA) == md5

    def _upload_together(self, uploads: list[Upload]) -> None:
        """Every upload of one phase in flight at once (up to UPLOAD_THREADS): a publish writes a
        dozen or more objects, and each PUT waits on the store far more than it computes. The
        first failure is raised once all are done; what was owed stays owed."""
        if len(uploads) < 2:
            for upload in uploads:
                self._upload(upload)
            return
        done = [_UPLOADERS.submit(self._upload, upload) for upload in uploads]
        wait(done)
        for future in done:
            future.result()

    def _sent_early(self, upload: Upload, early: EarlyUpload | None) -> bool:
        """Whether `upload` is the early tarball (done: `publish` waited for it), stored with the
        bytes the build wrote. Else (failed, other bytes) it is sent again in its phase."""
        if early is None or upload.source != early.relative:
            return False
        if early.sent.exception() is not None:
            return False
        return _md5_of(self.out_dir / upload.source) == early.md5

    def _upload(self, upload: Upload) -> None:
        path = self.out_dir / upload.source
        if path.is_file():  # a later build may have removed it: its removal is owed instead
            self._put(upload, path.read_bytes())

    def _put(self, upload: Upload, data: bytes) -> None:
        key_header = self.shared.key_header if self.shared is not None else None
        metadata = {DIGEST_METADATA: hashlib.md5(data).hexdigest()}
        if key_header:
            metadata[key_header.lower()] = cache_key(upload.source)
        self.bucket.publish(upload.key, data, content_type=upload.content_type, cache_control=upload.cache_control, metadata=metadata)


def tree_files(out_dir: Path) -> list[str]:
    return sorted(item.key for item in FolderStorage(out_dir).list())


# ---------------------------------------------------------------- presigned reads (a private tree bucket)

# How long a URL the read check signs stays valid: nginx keeps a decision at most half of it
# (`host-config nginx --private-bucket` refuses a longer --read-cache-seconds), so a kept URL is
# never stale when nginx uses it.
PRESIGN_SECONDS = 120
# Where readers reach a bucket on AWS without storage_endpoint_url: path-style, as nginx asks it.
AWS_S3_ENDPOINT = "https://s3.amazonaws.com"
_TREE_KEY_PATH = re.compile(f"^/[{TREE_KEY_CHARACTERS}]*$")


def reader_endpoint(settings: Settings) -> str:
    """The endpoint nginx reads the tree bucket at, and so the one its URLs are signed for."""
    return (storage_endpoint(settings) or AWS_S3_ENDPOINT).rstrip("/")


def read_keys(path: str, document: str) -> tuple[str, str, str] | None:
    """The three tree keys nginx may read for the served path `path` (decoded, as nginx's $uri), in
    its order: the folder's document (`document`, the one the Accept header picked; always the page
    under /-/web/), the folder's full document (where the abbreviated one is missing: a tag
    folder's), and the path's own key, a trailing '/' dropped. None when `path` could name anything
    but a file of the tree: a character outside the key alphabet, a dot, `.` or `..` segment, an
    empty segment, or a document name that is not one."""
    if not _TREE_KEY_PATH.match(path) or has_dot_segment(path) or document not in (PACKAGE_DOCUMENT, ABBREVIATED_DOCUMENT):
        return None
    stem = path[1:].removesuffix("/")
    segments = stem.split("/")
    if not stem or any(not segment or segment.startswith(".") for segment in segments):
        return None
    if stem == WEB_ROOT or stem.startswith(WEB_ROOT + "/"):
        document = PACKAGE_DOCUMENT
    return f"{stem}/{document}", f"{stem}/{PACKAGE_DOCUMENT}", stem


class TreeSigner:
    """Presigns GETs of the tree bucket's keys, for the endpoint nginx reads it at (`bucket`: the
    tree's location at that endpoint; obstore signs in Rust, no request sent, bench/PROFILE.md
    "obsign")."""

    def __init__(self, bucket: S3Storage):
        self.bucket = bucket

    def signed_reads(self, path: str, document: str) -> tuple[str, ...] | None:
        """`/BUCKET/PREFIX/KEY?X-Amz-…`, the path and query of a URL valid PRESIGN_SECONDS for
        exactly that key, for each of `read_keys(path, document)` in its order; None where that refuses."""
        keys = read_keys(path, document)
        if keys is None:
            return None
        urls = self.bucket.signed_gets(keys, PRESIGN_SECONDS)
        return tuple(f"{parts.path}?{parts.query}" for parts in map(urlsplit, urls))


def open_tree_signer(settings: Settings) -> TreeSigner:
    return TreeSigner(S3Storage(tree_location(settings), endpoint_url=reader_endpoint(settings)))


# ---------------------------------------------------------------- opening them


def open_bucket(settings: Settings, location: S3Location) -> S3Storage:
    """A bucket at `location`, with the endpoint and conditional-write setting of `storage:`."""
    content = open_content_storage(settings, building=False)
    assert isinstance(content, S3Storage)
    return S3Storage(location, endpoint_url=content.endpoint_url, conditional_writes=settings.storage_conditional_writes)


@dataclass
class ObjectStore:
    """What `registry-gen api` with `storage:` works with: the content bucket, its local mirror and the tree sink."""

    content: S3Storage
    mirror: ContentMirror
    tree: BucketTree
    signer: TreeSigner  # for nginx's reads of a private tree bucket

    def sync_pending(self, settings: Settings) -> None:
        """The packages of writes a crashed writer left pending, which the next build resolves
        from the work folder: made equal to the bucket first."""
        with open_state(settings).journal() as journal:
            keys = [key for write in journal.pending_writes() for key in write.files]
        self.mirror.sync_packages(keys)

    def start(self, settings: Settings, lock_timeout: float = 600) -> BuildResult:
        """A server's start: under the registry-wide lock, the whole content bucket into the work
        folder (an empty disk works), one build over it, and what it wrote published. After it,
        every build of this process is incremental and syncs only what it reads.

        The upload is under the lock too: after its release, another instance's write uploads its
        package's newer files and answers, and this start's copy, read before that write, must
        not follow and put the older one back (issue 28, acceptance 1). Writes wait through the
        upload as they wait through the build. The markings of listing pages writes left are not
        settled here: a leader turn that built before this lock may upload its older render after
        this start's, and only a marking left set makes the leader render those pages again."""
        from registry_gen.build import build_locked
        from registry_gen.buildlock import holding_build_lock

        settings.content_dir.mkdir(parents=True, exist_ok=True)
        settings.out_dir.mkdir(parents=True, exist_ok=True)
        state = open_state(settings)
        with holding_build_lock(settings.lock_file, lock_timeout), state.registry_lock(lock_timeout):
            with state.journal() as journal:  # files put into the bucket by hand: every instance lists again
                journal.move_all_tokens()
            fetched = self.mirror.sync()
            # -/all and -/search.json marked only when the bucket lacks this render: else the leader
            # would render and upload them again while this start uploads (every rolling restart).
            # The pages writes left marked are rendered here: a range one of them shrank, and a shard
            # that lost leaves, asked in the tree bucket for what an earlier render left under it.
            result = build_locked(settings, settle_listings=False, served=self.tree.holds, tree=self.tree.files_under)
            log.info("synced %d file(s) from %s; %s", fetched, self.content.location, result.summary())
            self.tree.publish(result)
        return result


def open_object_store(settings: Settings) -> ObjectStore | None:
    """None without `storage:`; else the buckets, checked to need a shared state."""
    if settings.storage is None:
        return None
    if settings.database_url is None:
        raise ConfigError(
            f"storage: {settings.storage}: the content in a bucket needs the state on a shared database: "
            "set database_url (or $REGISTRY_DATABASE_URL) to a PostgreSQL URL, or remove storage:"
        )
    content = open_content_storage(settings, building=False)
    assert isinstance(content, S3Storage)
    mirror = ContentMirror(content, settings.content_dir, nested_tree_folder(settings))
    folder_keys = settings.tree_readers == "any"
    tree = BucketTree(open_bucket(settings, tree_location(settings)), settings.out_dir, shared_cache(settings.purge), folder_keys=folder_keys)
    return ObjectStore(content, mirror, tree, open_tree_signer(settings))


def open_tree_sink(settings: Settings) -> TreeSink:
    store = open_object_store(settings)
    return LocalTree() if store is None else store.tree
