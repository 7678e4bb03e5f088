"""Where an imported package came from, and the rule that keeps imports out of packages owned here.

The ledger (the state ledger's `import_origins` rows, one per package, written only by imports
under the write lock; an earlier release's `<data_dir>/import-origins/` folder of JSON files is
moved in on first use and left renamed `import-origins.migrated`) records the origin a package follows (a registry URL, a Verdaccio
storage folder) and each archive an import from that origin put into content/ (key, size, sha512,
mtime). A package is *owned here* for an import from origin O when content/ holds anything for it
that no import from O wrote: a version published through the API, an archive dropped in by hand,
a version imported from another origin, a registry-meta.json with no import behind it. An import
never merges into such a package unless an administrator names it (`--merge-into NAME`); the
package then follows O, with what it held then, until something is published here again.

A record lost only makes imports refuse more."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from registry_gen.state import Journal, open_state
from registry_gen.importers.integrity import file_sri
from registry_gen.names import package_dir
from registry_gen.settings import Settings
from registry_gen.storage import meta_key

LEDGER_FOLDER = "import-origins"
MIGRATED_SUFFIX = ".migrated"
ARCHIVE_SUFFIXES = (".tgz", ".tar.gz", ".zip")
DEFAULT_PORTS = {"http": 80, "https": 443}
log = logging.getLogger(__name__)


def registry_origin(url: str) -> str:
    """A registry's identity: scheme, host, port (default ones dropped) and base path."""
    parts = urlsplit(url)
    scheme, host, port = parts.scheme.lower(), (parts.hostname or "").lower(), parts.port
    netloc = host if port in (None, DEFAULT_PORTS.get(scheme)) else f"{host}:{port}"
    return f"{scheme}://{netloc}{parts.path.rstrip('/')}/"


def storage_origin(storage: Path) -> str:
    return f"verdaccio:{storage.resolve()}"


@dataclass(frozen=True)
class FileMark:
    """What an import wrote at a content key. `mtime_ns` None: not yet known (check the bytes)."""

    size: int
    sha512: str
    mtime_ns: int | None = None


@dataclass(frozen=True)
class OriginRecord:
    name: str
    origin: str
    files: Mapping[str, FileMark]


def owned_here(name: str, origin: str, keys: list[str], has_meta: bool, record: OriginRecord | None,
               matches: Callable[[str, FileMark], bool]) -> str | None:  # fmt: skip
    """Why `name` is owned here for an import from `origin` (None: new here, or it follows `origin`).

    `keys`: the archives content/ holds for it; `matches(key, mark)`: the file at key is what the
    import recorded."""
    if not keys and not has_meta:
        return None
    if record is None:
        held = f"archives ({_few(keys)})" if keys else "a registry-meta.json"
        return f"{name} is a package of this registry: it has {held} that no import wrote"
    if record.origin != origin:
        return f"{name} was imported from {record.origin}, not from {origin}"
    foreign = [key for key in keys if key not in record.files or not matches(key, record.files[key])]
    if foreign:
        return f"{name} has versions published here ({_few(foreign)}) that no import from {origin} wrote"
    return None


def _few(keys: list[str]) -> str:
    return ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")


class OriginLedger:
    """The ledger's files and what content/ holds for a package (call under the write lock for a
    decision that must hold until the write)."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.content = settings.content_dir
        self.held_open = threading.local()  # the calling thread's session (`session()`), if any

    def read(self, name: str) -> OriginRecord | None:
        with self._ledger() as ledger:
            row = ledger.import_origin(name)
        return None if row is None else parse_record(name, *row)

    def write(self, record: OriginRecord) -> None:
        """Each write its own transaction, on disk before it returns (what it records must be
        there before the files it names are written)."""
        with self._ledger() as ledger:
            ledger.record_import_origin(record.name, record.origin, files_json(record))

    def forget(self, name: str) -> None:
        """Drops the package's record: whatever content/ holds for it is then this registry's own."""
        with self._ledger() as ledger:
            ledger.forget_import_origin(name)

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """Reads and writes of the calling thread share one ledger connection until it ends (the
        mirror's landing thread, for a batch of landings: opening the ledger for each read and
        write cost more than the rows, bench/PROFILE.md). Each write still commits on its own."""
        if getattr(self.held_open, "ledger", None) is not None:
            yield  # nested: the outer session's connection serves
            return
        with self._opened() as ledger:
            self.held_open.ledger = ledger
            try:
                yield
            finally:
                self.held_open.ledger = None

    def _ledger(self) -> contextlib.AbstractContextManager[Journal]:
        held: Journal | None = getattr(self.held_open, "ledger", None)
        return contextlib.nullcontext(held) if held is not None else self._opened()

    def _opened(self) -> Journal:
        move_folder_in(self.settings)
        return open_state(self.settings).journal()

    def held(self, name: str) -> tuple[list[str], bool]:
        """(the archive keys content/ holds for `name`, whether it has a registry-meta.json).

        Archives: those the build attributes to it, and any archive file in its own folder
        (dropped in, not yet built)."""
        keys: set[str] = set()
        folder = self.content / package_dir(name)
        if folder.is_dir():
            keys |= {f"{package_dir(name)}/{p.name}" for p in folder.iterdir() if p.is_file() and p.name.endswith(ARCHIVE_SUFFIXES)}
        has_meta = (self.content / meta_key(name)).is_file()
        if self.settings.state_file.exists():
            with open_state(self.settings).view() as state:
                keys |= {path for path in state.archive_paths(name) if (self.content / path).is_file()}
                has_meta = has_meta or any((self.content / path).is_file() for path in state.meta_paths(name))
        return sorted(keys), has_meta

    def matches(self, key: str, mark: FileMark) -> bool:
        """The file at `key` is the one recorded: same size, and same mtime or same bytes."""
        try:
            stat = (self.content / key).stat()
        except OSError:
            return False
        if stat.st_size != mark.size:
            return False
        return stat.st_mtime_ns == mark.mtime_ns or self.mark(key).sha512 == mark.sha512

    def mark(self, key: str, sha512: str | None = None) -> FileMark:
        path = self.content / key
        stat = path.stat()
        return FileMark(stat.st_size, sha512 or file_sri(path), stat.st_mtime_ns)

    def refusal(self, name: str, origin: str) -> str | None:
        keys, has_meta = self.held(name)
        if not keys and not has_meta:
            return None  # nothing here (a mirror's every new name): no record to read
        return owned_here(name, origin, keys, has_meta, self.read(name), self.matches)


def parse_record(name: str, origin: str, files: str) -> OriginRecord | None:
    """A stored record; None for an unreadable one (as if absent, so imports refuse rather than trust it)."""
    try:
        data = json.loads(files)
        marks = {str(k): FileMark(int(v["size"]), str(v["sha512"]), v.get("mtime_ns")) for k, v in data.items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return OriginRecord(name, origin, marks)


def files_json(record: OriginRecord) -> str:
    files = {key: {"size": m.size, "sha512": m.sha512, "mtime_ns": m.mtime_ns} for key, m in sorted(record.files.items())}
    return json.dumps(files, separators=(",", ":"))


def folder_rows(folder: Path) -> list[tuple[str, str, str]]:
    """(name, origin, files JSON) of each readable file of an earlier release's folder; an
    unreadable one is left out (it was read as absent then too) and said."""
    rows = []
    for path in sorted(folder.rglob("*.json")):
        record = _file_record(path)
        if record is None:
            log.warning("%s: not an import-origin record; left out", path)
            continue
        rows.append((record.name, record.origin, files_json(record)))
    return rows


def _file_record(path: Path) -> OriginRecord | None:
    try:
        data = json.loads(path.read_bytes())
        return parse_record(str(data["name"]), str(data["origin"]), json.dumps(data["files"]))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def move_folder_in(settings: Settings) -> None:
    """An earlier release's `<data_dir>/import-origins/` into the ledger, once, in one transaction;
    the folder is then left renamed `import-origins.migrated` (nothing reads it again)."""
    folder = settings.data_dir / LEDGER_FOLDER
    if not folder.is_dir():
        return
    with open_state(settings).journal() as ledger:
        ledger.adopt_import_origins(folder_rows(folder))
    try:
        folder.rename(folder.with_name(LEDGER_FOLDER + MIGRATED_SUFFIX))
    except FileNotFoundError:
        return  # another process moved it in at the same time (its rows and ours are the same)
    log.warning("moved the import origins of %s into the ledger; the folder is kept as %s", folder, LEDGER_FOLDER + MIGRATED_SUFFIX)
