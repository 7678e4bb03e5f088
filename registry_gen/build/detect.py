"""Phase 1, detect: what differs between content/ and the state's folder listings (stat only),
and whether this build writes everything again (new settings or generator, a lost tree)."""

from __future__ import annotations

import hashlib
import marshal
import os
import stat as stat_module
from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from registry_gen import __version__, site
from registry_gen.build.context import BuildContext, ProgressCallback
from registry_gen.build.plan import choose_releases
from registry_gen.contentrules import content_kind, is_candidate
from registry_gen.keyring import load_signer
from registry_gen.layout import ALL_DOCUMENT
from registry_gen.settings import Settings
from registry_gen.state import BuildSession
from registry_gen.state.ledger import UNCHECKED, content_digest, landed
from registry_gen.state.records import BuildStart


SPOOL_HELD = 4096  # new archive paths held in memory before they wait in the state (PathSpool)


@dataclass(frozen=True)
class Detected:
    """What phase 1 found: the build's context (full or not), what changed, and the state's start."""

    context: BuildContext
    changes: ContentChanges
    start: BuildStart
    landed: tuple[str, ...] = ()  # content keys of pending writes resolved as landed (landed_packages)


def detect(
    settings: Settings, state: BuildSession, changed: Iterable[str | Path] | None, *, force_full: bool,
    progress: ProgressCallback | None = None, writing: int | None = None, held: Collection[str] = (),
) -> Detected:  # fmt: skip
    """Phase 1: what differs between content/ and the state (all of it after a settings change).
    Journalled writes a crash left pending (all but `writing`, the one in progress) are resolved
    from content/ first, and their files looked at (`held`: the packages the caller's lock holds,
    whose pending writes have a gone writer, registry_gen.state.ledger)."""
    fingerprint = settings_fingerprint(settings)
    start = state.begin_build(fingerprint, durable=writing is None, held=held)  # a journalled write's entry covers its build
    if start.seed_pins:
        seed_pins(state)  # a tree built before versions were pinned: pin what it serves now
    recovered, landed_keys = recover_writes(settings, state, start, writing)
    if changed is not None and recovered:
        changed = [*changed, *recovered]
    signer = load_signer(settings)  # a bad key stops the build before it writes anything
    # The state lives beside the tree (Settings.state_folder): a tree deleted on its own would
    # otherwise look up to date. Its index document is written by every build.
    tree_lost = not start.empty and not (settings.out_dir / ALL_DOCUMENT).is_file()
    full = force_full or tree_lost or start.fingerprint_changed
    if full:
        state.forget_content()  # a new generator or new settings: read every archive again
    context = BuildContext(settings, fingerprint, full, signer, progress)
    if changed is None or full:
        return Detected(context, detect_changes(settings.content_dir, state), start, tuple(landed_keys))
    return Detected(context, detect_hinted_changes(settings.content_dir, state, changed), start, tuple(landed_keys))


def recover_writes(settings: Settings, state: BuildSession, start: BuildStart, writing: int | None) -> tuple[list[str], list[str]]:
    """Resolves the pending journalled writes from what content/ holds (landed: done, else
    aborted); returns the content keys they touched, and those of the writes that landed."""
    done, aborted, keys, landed_keys = [], [], [], []
    for write_id, files in start.pending_writes:
        if write_id == writing:
            continue
        current = {key: _file_digest(settings.content_dir / key, after) for key, after in files.items() if after != UNCHECKED}
        if landed(files, current):
            done.append(write_id)
            landed_keys += list(files)
        else:
            aborted.append(write_id)
        keys += list(files)
    if done or aborted:
        state.resolve_writes(done, aborted)
    return keys, landed_keys


def landed_packages(state: BuildSession, keys: Iterable[str]) -> set[str]:
    """The packages of writes resolved as landed, to be rendered again whatever their state says:
    the writer may have died after its build committed and before the readers' tree (a bucket)
    got what it rendered (registry_gen.writes). Asked once the build has read content/."""
    by_kind: dict[str, list[str]] = defaultdict(list)
    for key in keys:
        by_kind[content_kind(key.rpartition("/")[2]) or ""].append(key)
    names = {name for name in state.previous_meta_names(by_kind["meta"]).values() if name} if by_kind["meta"] else set()
    if by_kind["archive"]:
        names |= {record.name for record in state.previous_archives(by_kind["archive"]).values() if record.name}
    return names


def _file_digest(path: Path, like: str | None) -> str | None:
    try:
        return content_digest(path.read_bytes(), like)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


def seed_pins(state: BuildSession) -> None:
    """Pins the versions each present package serves now to the archives they come from."""
    for name in state.present_names():
        releases, _ = choose_releases(name, state.package_inputs(name).archives, {})
        state.pin(name, releases)


def scan_content(content_dir: Path) -> tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int]]]:
    """(size, mtime_ns) of every archive and every registry-meta.json below content_dir, by
    relative path (hidden and temp files skipped), from the same walk the build uses."""
    archives: dict[str, tuple[int, int]] = {}
    metas: dict[str, tuple[int, int]] = {}
    for folder, listing in _walk_listings(content_dir):
        for name, size, mtime_ns in listing:
            (archives if content_kind(name) == "archive" else metas)[_join(folder, name)] = (size, mtime_ns)
    return archives, metas


Listing = list[tuple[str, int, int]]  # (file name, size, mtime_ns) of one folder's candidates, by name


def _walk_listings(content_dir: Path) -> Iterator[tuple[str, Listing]]:
    """(folder relative to content_dir, its listing) for every folder holding an archive or a meta
    file. The hot loop of every build: one stat per candidate file and nothing else per file."""
    root = str(content_dir)
    if not os.path.isdir(root):
        return
    stack: list[Iterator[str]] = [iter([""])]  # per folder being walked: its subfolders still to walk
    while stack:
        folder = next(stack[-1], None)
        if folder is None:
            stack.pop()
            continue
        listing, subfolders = _scan_folder(root, folder)
        if subfolders:
            stack.append(_subfolders(folder, subfolders))
        if listing:
            yield folder, listing


def _scan_folder(root: str, folder: str) -> tuple[Listing, bytearray]:
    """One folder's candidate files, by name, and its subfolders' names, each ended by a NUL (no
    file name holds one): one buffer of ~1.2 MB for content/'s 70,000 package folders, where a
    list of their names held ~6 MB through the whole walk."""
    listing: Listing = []
    subfolders = bytearray()
    try:
        with os.scandir(os.path.join(root, folder) if folder else root) as entries:
            for entry in entries:
                name = entry.name
                if not is_candidate(name):
                    continue
                if entry.is_dir(follow_symlinks=False):  # from the directory entry: no syscall
                    subfolders += os.fsencode(name) + b"\0"
                elif content_kind(name) is not None and entry.is_file(follow_symlinks=False):
                    stat = entry.stat(follow_symlinks=False)
                    listing.append((name, stat.st_size, stat.st_mtime_ns))
    except FileNotFoundError:
        return [], bytearray()  # removed while we walked
    listing.sort()
    return listing, subfolders


def _subfolders(folder: str, names: bytearray) -> Iterator[str]:
    start = 0
    while start < len(names):
        end = names.index(b"\0", start)
        yield _join(folder, os.fsdecode(bytes(names[start:end])))
        start = end + 1


def _join(folder: str, name: str) -> str:
    return f"{folder}/{name}" if folder else name


def _decode_listing(blob: bytes | None) -> dict[str, tuple[int, int]]:
    if not blob:
        return {}
    try:
        return {name: (size, mtime) for name, size, mtime in marshal.loads(blob)}
    except (ValueError, EOFError, TypeError):
        return {}  # unreadable: every file in the folder counts as new


class PathSpool:
    """Paths to read, handed out in path order. Past SPOOL_HELD of them (a full build finds every
    archive) they go to a temporary table of `state`, so a build holds a few thousand at most."""

    def __init__(self, state: BuildSession | None = None, spool: str = "spooled_paths") -> None:
        self.state = state
        self.spool = spool  # its table in the state: the archives' or the meta files'
        self.held: list[str] = []
        self.count = 0
        self.spilled = False

    def append(self, path: str) -> None:
        self.held.append(path)
        self.count += 1
        if len(self.held) >= SPOOL_HELD and self.state is not None:
            self.state.spool_paths(self.held, fresh=not self.spilled, spool=self.spool)
            self.held.clear()
            self.spilled = True

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[str]:
        """Once: in path order (the spool is emptied)."""
        if not self.spilled or self.state is None:
            held, self.held = sorted(self.held), []
            return iter(held)
        self.state.spool_paths(self.held, spool=self.spool)
        self.held.clear()
        return self.state.spooled_paths(spool=self.spool)


@dataclass
class ContentChanges:
    """What differs between content/ and the state's folder listings. The new listings go
    straight into the state (same transaction), and so do the new archive and meta paths past a few
    thousand (PathSpool): none of them is held in memory."""

    archives: PathSpool = field(default_factory=PathSpool)  # new or changed
    removed_archives: list[str] = field(default_factory=list)
    metas: PathSpool = field(default_factory=PathSpool)  # new or changed (a full build finds one per package or so)
    removed_metas: list[str] = field(default_factory=list)

    def add(self, folder: str, old: dict[str, tuple[int, int]], new: Listing | None) -> None:
        seen = set()
        for name, size, mtime in new or ():
            seen.add(name)
            if old.get(name) != (size, mtime):
                (self.archives if content_kind(name) == "archive" else self.metas).append(_join(folder, name))
        for name in old.keys() - seen:
            (self.removed_archives if content_kind(name) == "archive" else self.removed_metas).append(_join(folder, name))


def _store_listing(state: BuildSession, folder: str, listing: Listing | None) -> None:
    state.put_folder_listing(folder, marshal.dumps(listing) if listing else None)


def forget_file(state: BuildSession, relative: str) -> None:
    """Leaves one file out of its folder's stored listing, so the next build looks at it again."""
    folder, _, name = relative.rpartition("/")
    listing = [(n, size, mtime) for n, (size, mtime) in sorted(_decode_listing(state.folder_listing(folder)).items()) if n != name]
    _store_listing(state, folder, listing or None)


def detect_changes(content_dir: Path, state: BuildSession) -> ContentChanges:
    """Stat-based change detection over all of content/: a folder whose listing (names, sizes,
    mtimes) is byte-identical to the stored one costs one comparison, whatever its size."""
    known = state.folder_listings()
    changes = ContentChanges(PathSpool(state), metas=PathSpool(state, "spooled_metas"))
    for folder, listing in _walk_listings(content_dir):
        old = known.pop(folder, None)
        blob = marshal.dumps(listing)
        if old is not None and old == blob:
            continue
        changes.add(folder, _decode_listing(old), listing)
        state.put_folder_listing(folder, blob)
    for folder, old in known.items():
        changes.add(folder, _decode_listing(old), None)
        state.put_folder_listing(folder, None)
    return changes


def _relative_hint(content_dir: Path, path: str | Path) -> str:
    candidate = Path(path)
    if candidate.is_absolute():
        try:
            candidate = candidate.relative_to(content_dir)
        except ValueError:
            candidate = candidate.resolve().relative_to(content_dir.resolve())
    relative = candidate.as_posix().strip("/")
    if not relative or relative == "." or any(part in ("", ".", "..") for part in relative.split("/")):
        raise ValueError(f"{path}: not a file path inside {content_dir}")
    return relative


def detect_hinted_changes(content_dir: Path, state: BuildSession, paths: Iterable[str | Path]) -> ContentChanges:
    """Change detection limited to `paths` (what the write API or watch mode knows it touched):
    cost in proportion to the hint, not to content/. Everything else is trusted to the state."""
    by_folder: dict[str, set[str]] = defaultdict(set)
    for path in paths:
        folder, _, name = _relative_hint(content_dir, path).rpartition("/")
        if is_candidate(name) and content_kind(name) and not any(p.startswith(".") for p in folder.split("/") if p):
            by_folder[folder].add(name)
    changes = ContentChanges()
    for folder, names in sorted(by_folder.items()):
        stored = state.folder_listing(folder)
        old = _decode_listing(stored)
        current = dict(old)
        for name in names:
            try:
                stat = os.stat(content_dir / _join(folder, name), follow_symlinks=False)
            except (FileNotFoundError, NotADirectoryError):
                current.pop(name, None)
                continue
            if stat_module.S_ISREG(stat.st_mode):
                current[name] = (stat.st_size, stat.st_mtime_ns)
            else:
                current.pop(name, None)
        listing = sorted((name, size, mtime) for name, (size, mtime) in current.items())
        if current != old:
            changes.add(folder, old, listing)
            _store_listing(state, folder, listing or None)
    return changes


def settings_fingerprint(settings: Settings) -> str:
    """Anything that changes every output file forces a full rebuild when it changes."""
    parts = [__version__, settings.base_url, settings.site_title, str(settings.gzip), site.template_fingerprint(settings)]
    if settings.signing_key is not None or settings.signing_key_pem:
        parts.append("signed")  # turning signing on or off re-signs (or unsigns) every document; a new key does not
    if settings.packages.in_force:
        parts.append(repr(settings.packages))  # the listings show only what everyone may read
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()
