"""The ledger's contract, and the pure rules of its change journal.

The ledger holds what no build can redo from content/ (registry_gen.state, "two stores"). Beside
the pins, first-seen times and keyring the build keeps there, it holds the change journal: every
accepted write (a publish, an unpublish, a dist-tag, an owner change, an import...), each with a
sequence number, a time, an actor, where it came from (`who`) and what changed, read by `Journal.since` (the webhooks, the
`/-/changes` feed and the audit log read it).

A write is journalled before it is acknowledged, in two steps around its change to content/:

1. `begin_write` keeps its events as one *pending* write, with the digest each file of content/
   it touches will have after it (`WriteFiles`), and commits, durably, before content/ changes;
2. `finish_write` marks it *done* once the write is accepted, appending its events to the journal
   with the next sequence numbers (or *aborted* when it is refused or rolled back: nothing is
   appended). Readers see only done writes, in the order they became done: a reader that has
   read up to a number never misses one that becomes done later.

A process killed between the two leaves the write pending. Whoever next holds the write lock of
its packages (the next build, the next write of one of them, a server's start) resolves it by
looking at content/ (`landed`): every file as the write left it -> done, and the build takes
those files; anything else -> aborted. So a write appears once, and only if it landed. A write
resolves the pending writes before it reads its package: the dead write's version is journalled
with its own event, before this write's, and this write's meta is read after it (resolved later,
the dead write's meta, overwritten, would read as not landed while its archive is served).

`pending_writes(held)` lists the pending writes whose *writer is gone*: no write holds the lock of
one of its packages any more (a write holds them from before `begin_write` to after `finish_write`),
and the write is still pending when read again once those locks are taken (a writer that finished
and released its lock after the pending rows were read is not gone; `PgLedger._gone`).
`held`: the packages the caller's own lock holds; a pending write of those is gone (the lock is
exclusive), although no other connection could take their lock to prove it; the caller's own
write in progress is listed too (its build leaves it: `writing`). On the embedded
default one file lock covers every package: a caller holding it sees every pending write gone.
On PostgreSQL a package nobody holds is taken by the caller's transaction to its end (the writer
of a package whose dead predecessor a build resolves waits for that build).

**Folder tokens** (PostgreSQL; `content_tokens`): what lets an api instance with content in a
bucket skip listing a package's folder before a build (registry_gen.objectstore.ContentMirror).
Each content folder (`name/`, `@scope/name/`) has a generation that `begin_write` moves, in its own
statement, for every folder of the keys it names, before content/ changes and under the packages'
locks; one registry-wide generation moves for writes that name no keys in advance (a batch under
the whole lock) and at a server's start (`move_all_tokens`). A folder's token is the pair (the
registry-wide generation, its own): equal to what an instance synced at means that nobody wrote the
folder through registry-gen since. Generations only grow; the embedded default keeps none
(`content_tokens` answers nothing: unknown, so the folder is listed). `pending_and_tokens` answers
`pending_writes` and `content_tokens` together, on PostgreSQL in one statement (one snapshot: a
round trip less per build with content in a bucket); the caller excludes the pending writes'
folders from those it trusts a token for, as before.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from registry_gen.state.records import ArchiveRecord

UNCHECKED: Final = "*"  # a file a write touches whose final bytes are not known in advance (an import's merged meta)
# content key -> its digest after the write: sha256 hex, or an SRI `sha512-...` string (what an
# import verified already); None: gone; UNCHECKED: not checked.
WriteFiles = Mapping[str, str | None]
ContentToken = tuple[int, int]  # (registry-wide generation, the folder's generation): see "Folder tokens"
EVERY_FOLDER: Final = ""  # the registry-wide generation's row: no content folder is named ""


def package_folders(keys: Iterable[str]) -> set[str]:
    """The content folders (`name/` or `@scope/name/`) holding these keys, with the trailing '/'
    a listing needs (`foo/` must not list `foo-bar/`)."""
    return {key.rpartition("/")[0] + "/" for key in keys if "/" in key}


@dataclass(frozen=True, slots=True)
class JournalEvent:
    """One thing a write did, as npm's hooks name it (`package:publish`, `package:dist-tag`...),
    with the versions it concerns and a small detail (tags, owners, a deprecation message...;
    never an email or other personal data that erasing an account must reach)."""

    kind: str
    package: str
    versions: tuple[str, ...] = ()
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """A done write's event, as the journal hands it out."""

    seq: int
    time: str
    actor: str
    actor_id: str | None
    kind: str
    package: str
    versions: tuple[str, ...]
    detail: Mapping[str, Any]
    # Where the write came from (registry_gen.audit.Who as JSON): token key, address, user agent of
    # an HTTP write; command and OS user of a CLI one. {} for entries written before it was kept.
    who: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PendingWrite:
    """A write journalled but neither done nor aborted: what content/ should hold if it landed."""

    id: int
    files: WriteFiles


# What a build's sync reads under its packages' locks (`pending_and_tokens`): the pending writes
# whose writer is gone (`pending_writes`) and these folders' tokens (`content_tokens`), as one read.
PendingAndTokens = tuple[list[PendingWrite], dict[str, ContentToken]]


@dataclass(frozen=True, slots=True)
class OwedPurge:
    """A purge of the caches in front not yet answered (registry_gen.purge): URL paths, surrogate
    keys, when it was first owed and how many attempts failed (Unix seconds)."""

    id: int
    paths: tuple[str, ...]
    keys: tuple[str, ...]
    since: float
    attempts: int


def content_digest(data: bytes | None, like: str | None = None) -> str | None:
    """The digest a journalled write records for a file's bytes (None: no file): sha256 hex, or
    an SRI sha512 when `like` (the recorded one) is one."""
    if data is None:
        return None
    if like is not None and like.startswith("sha512-"):
        return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode("ascii")
    return hashlib.sha256(data).hexdigest()


def landed(files: WriteFiles, current: Mapping[str, str | None]) -> bool:
    """Whether content/ holds what a pending write left: every file it touched as it left it
    (`current`: the digest of each file now, None when absent)."""
    return all(after == UNCHECKED or current.get(key) == after for key, after in files.items())


class Journal(Protocol):
    """The change journal (in the ledger). `begin_write` and `finish_write` are called with the
    write lock held; `since` needs no lock."""

    def begin_write(
        self, files: WriteFiles, events: Sequence[JournalEvent], actor: str, actor_id: str | None, time: str,
        who: Mapping[str, str] | None = None,
    ) -> int: ...  # fmt: skip
    def finish_write(self, write_id: int, *, done: bool) -> None: ...
    def content_tokens(self, folders: Collection[str]) -> dict[str, ContentToken]: ...  # {} where none are kept
    def move_all_tokens(self) -> None: ...  # every folder's token changes ("Folder tokens")
    def pending_writes(self, held: Collection[str] = ()) -> list[PendingWrite]: ...  # writer gone; `held`: the caller's
    def pending_and_tokens(self, held: Collection[str], folders: Collection[str]) -> PendingAndTokens: ...  # both, one read
    def since(self, seq: int, limit: int = 100) -> list[JournalEntry]: ...
    def prune(self, before: str) -> int: ...  # retention: entries older than `before` (ISO time) go; how many
    def import_origin(self, name: str) -> tuple[str, str] | None: ...  # (origin, files JSON): importers.origins
    def record_import_origin(self, name: str, origin: str, files: str) -> None: ...
    def forget_import_origin(self, name: str) -> None: ...
    def adopt_import_origins(self, rows: Sequence[tuple[str, str, str]]) -> None: ...
    # purges owed to the caches in front (registry_gen.purge): recorded, retried when due, settled
    def owe_purge(self, paths: Sequence[str], keys: Sequence[str], due: float, purge_id: int | None = None) -> int: ...
    def owed_purges(self, now: float, limit: int = 100) -> list[OwedPurge]: ...
    def settle_purges(self, done: Sequence[int], retry: Sequence[int] = (), due: float = 0.0) -> None: ...
    def usable(self) -> bool: ...  # False when its connection died (a database restart): open another
    def close(self) -> None: ...
    def __enter__(self) -> Journal: ...
    def __exit__(self, *exc: object) -> None: ...


class Ledger(Protocol):
    """What the ledger keeps for the build (the build session reaches it through these)."""

    def pins(self, name: str) -> dict[str, ArchiveRecord]: ...
    def has_pins(self) -> bool: ...
    def pin(self, name: str, releases: Mapping[str, ArchiveRecord]) -> None: ...
    def pinned_versions(self, name: str) -> frozenset[str]: ...
    def unpin(self, name: str) -> None: ...
    def first_seen(self, name: str) -> dict[str, str]: ...
    def record_first_seen(self, name: str, stamps: Mapping[str, str]) -> None: ...
    def forget_first_seen(self, name: str) -> None: ...
    def signing_keys(self) -> str: ...
    def record_signing_keys(self, public_keys: str) -> None: ...
    def pending_writes(self, held: Collection[str] = ()) -> list[PendingWrite]: ...
    def resolve_writes(self, done: Sequence[int], aborted: Sequence[int]) -> None: ...
