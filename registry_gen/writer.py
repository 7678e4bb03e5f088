"""The only code that changes the output tree: atomic writes (a new file written unnamed in its folder
and linked to its name; a replacement through a named temp file + rename).

A named temp file goes into the TEMP_FOLDER of the nearest folder above its target that has one
(the roots content/, the tree and the state folder get one at a server's start,
`sweep_temp_files`), not beside its target: what a killed write leaves is then in one folder per
root, and a start empties those folders instead of walking every folder of the registry."""

from __future__ import annotations

import contextlib
import errno
import functools
import gzip
import itertools
import os
import re
import secrets
import shutil
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

from registry_gen.failpoints import failpoint


TEMP_FOLDER = ".registry-gen-temp"


def _temp_path(path: Path | str) -> str:
    """A fresh temp name for a file that will be renamed to `path`: in the temp folder of the
    nearest root above it, else beside it."""
    folder, name = os.path.split(path)
    try:
        folder = _temp_folder(os.path.abspath(folder or "."))
    except LookupError:
        pass
    return os.path.join(folder, f".{name}.{secrets.token_hex(4)}.tmp")


@functools.lru_cache(maxsize=4096)
def _temp_folder(folder: str) -> str:
    """The TEMP_FOLDER of `folder` or of its nearest ancestor that has one (a stat per folder up
    to it, then remembered); LookupError where none has one, which is not remembered: a root
    marked later is seen at the next write."""
    candidate = os.path.join(folder, TEMP_FOLDER)
    if os.path.isdir(candidate):
        return candidate
    parent = os.path.dirname(folder)
    if parent == folder:
        raise LookupError(folder)
    return _temp_folder(parent)


def _forget_temp_folders() -> None:
    """After a temp folder was not there (its root removed): look again."""
    _temp_folder.cache_clear()


def _open_temp(path: Path | str) -> tuple[int, str]:
    """A new named temp file for `path` (_temp_path), open for writing, mode 0644 whatever the
    umask. A folder is made only when the open says it is missing: one mkdir per new folder,
    not a stat and a mkdir per file (a full build writes ~12 files per package)."""
    folder = os.path.dirname(path)
    for _ in range(100):
        temp = _temp_path(path)
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileNotFoundError:
            if os.path.dirname(temp) != folder:
                _forget_temp_folders()
            _make_folder(folder)
            continue
        except FileExistsError:
            continue
        try:
            _widen_mode(fd)
        except BaseException:
            _discard(fd, temp)
            raise
        return fd, temp
    raise FileExistsError(f"no free temp file name beside {path}")


def _make_folder(folder: str) -> None:
    """os.makedirs(exist_ok=True) without its stat of the parent for every folder it makes: mkdir
    first, the parents only when it says they are missing (a new package's folders cost one mkdir
    each). A file in the way is left for the open that follows to report."""
    try:
        os.mkdir(folder)
    except FileNotFoundError:
        parent = os.path.dirname(folder)
        if not parent or parent == folder:
            raise
        _make_folder(parent)
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder)
    except FileExistsError:
        pass


@functools.cache
def _umask_narrows_0644() -> bool:
    """Whether the process umask takes a bit off 0644 (then each new file needs an fchmod, as
    readers such as nginx need it). Read once per process, from /proc without changing it (the
    os.umask round trip would race other threads' creates); the CLI and servers never change it.
    Unknown: assume it does."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8) & 0o644 != 0
    return True


def _widen_mode(fd: int) -> None:
    if _umask_narrows_0644():
        os.fchmod(fd, 0o644)


def _discard(fd: int, temp: str) -> None:
    os.close(fd)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temp)


# O_TMPFILE (Linux): a file with no name in its folder until linkat gives it one, so a new file
# appears whole under its final name without a temp name, a rename or a random token. A file
# system or kernel without it answers one of these; then the temp file + rename path is used.
_O_TMPFILE = getattr(os, "O_TMPFILE", 0)
_NO_TMPFILE = frozenset({errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOSYS})


def _open_unnamed(folder: str) -> int | None:
    """A new unnamed file in `folder` (made if missing), open for writing (and reading: the no-/proc
    fallback copies it), mode 0644 whatever the umask; None where the file system cannot make one."""
    if not _O_TMPFILE:
        return None
    for attempt in range(2):
        try:
            fd = os.open(folder or ".", _O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o644)
        except FileNotFoundError:
            if attempt:
                raise
            _make_folder(folder)
            continue
        except OSError as error:
            if error.errno in _NO_TMPFILE:
                return None
            raise
        try:
            _widen_mode(fd)
        except BaseException:
            os.close(fd)
            raise
        return fd
    return None


def _link_unnamed(fd: int, path: str) -> bool | None:
    """Gives the unnamed file `fd` the name `path`: True when done, False when `path` exists
    (linkat never replaces), None when this system cannot (no /proc). The source is the magic
    link /proc/self/fd/N, followed (AT_SYMLINK_FOLLOW); an absolute source ignores its dir fd,
    which is passed only because os.link calls plain link(2), which follows nothing, without one."""
    try:
        os.link(f"/proc/self/fd/{fd}", path, src_dir_fd=fd, follow_symlinks=True)
    except FileExistsError:
        return False
    except OSError as error:
        if error.errno in (errno.ENOENT, errno.EXDEV, errno.EPERM, errno.EOPNOTSUPP):
            return None
        raise
    return True


def _link_as_replacement(fd: int, path: str) -> None:
    """The unnamed file `fd` replaces the existing `path`: linked to a temp name (_temp_path),
    then renamed over it (linkat cannot replace)."""
    for _ in range(100):
        temp = _temp_path(path)
        try:
            os.link(f"/proc/self/fd/{fd}", temp, src_dir_fd=fd, follow_symlinks=True)
        except FileExistsError:
            continue
        except FileNotFoundError:  # the temp folder went with its root: beside the target, as anywhere unmarked
            _forget_temp_folders()
            continue
        _rename_or_remove(temp, path)
        return
    raise FileExistsError(f"no free temp file name beside {path}")


def _rename_or_remove(temp: str, path: str | Path) -> None:
    try:
        _into_place(os.replace, temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise


def _into_place(move: Callable[[str, str], None], temp: str, path: str | Path) -> None:
    """`move` (rename or link) the temp file to `path`, making `path`'s folder if it is new: a
    temp file named in its root's temp folder did not make it."""
    failpoint("before-rename")
    try:
        move(temp, str(path))
    except FileNotFoundError:
        if not os.path.exists(temp):
            raise
        _make_folder(os.path.dirname(path))
        move(temp, str(path))


def _write_atomically(path: Path, fill: Callable[[int], None], durable: bool, new: bool = True) -> None:
    """`fill` writes the new bytes into a file that takes the name `path` only once complete:
    readers see the old file or the new one (or none), never a half-written one. `new` (no
    file is known there): the file is written unnamed and linked to `path`; else, or where the
    file system cannot, through a named temp file (_temp_path) and a rename. Durable: the file
    and its folder entry reach the disk before this returns."""
    fd = _open_unnamed(os.path.dirname(path)) if new else None
    if fd is None:
        _write_through_temp(path, fill, durable)
    else:
        try:
            _fill_file(fd, fill, durable)
            linked = _link_unnamed(fd, str(path))
            if linked is False:
                _link_as_replacement(fd, str(path))
            elif linked is None:  # no /proc: the unnamed file's bytes, the temp file way (a stream cannot fill twice)
                _write_through_temp(path, lambda target: _copy_into(fd, target), durable)
        finally:
            os.close(fd)
    if durable:
        fsync_dir(path.parent)


def create_exclusive(path: Path, data: bytes, *, durable: bool = False) -> bool:
    """Writes `path` only if nothing has that name (False then): readers see no file or the
    whole one, and of two writers at once one wins. Unnamed and linked where the system can,
    else a named temp file (_temp_path) linked to `path` and then unlinked."""
    fd = _open_unnamed(os.path.dirname(path))
    try:
        if fd is not None:
            _fill_file(fd, lambda out: _write_all(out, data), durable)
            linked = _link_unnamed(fd, str(path))
            if linked is not None:
                return _created(path, linked, durable)
    finally:
        if fd is not None:
            os.close(fd)
    return _created(path, _link_through_temp(path, data, durable), durable)


def _link_through_temp(path: Path, data: bytes, durable: bool) -> bool:
    fd, temp = _open_temp(path)
    try:
        _fill_file(fd, lambda out: _write_all(out, data), durable)
        os.close(fd)
        fd = -1
        _into_place(os.link, temp, path)
    except FileExistsError:
        return False
    finally:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
    return True


def _created(path: Path, linked: bool, durable: bool) -> bool:
    if linked and durable:
        fsync_dir(path.parent)
    return linked


def atomic_write_stream(path: Path, stream: BinaryIO, block: int = 1 << 20) -> None:
    """`stream`'s bytes into `path` (as atomic_write_bytes), `block` bytes held at a time."""

    def fill(fd: int) -> None:
        while data := stream.read(block):
            _write_all(fd, data)

    _write_atomically(path, fill, durable=False)


def _fill_file(fd: int, fill: Callable[[int], None], durable: bool) -> None:
    fill(fd)
    if durable:
        os.fsync(fd)


def _write_through_temp(path: Path, fill: Callable[[int], None], durable: bool) -> None:
    fd, temp = _open_temp(path)
    try:
        _fill_file(fd, fill, durable)
    except BaseException:
        _discard(fd, temp)
        raise
    os.close(fd)
    _rename_or_remove(temp, path)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def atomic_write_bytes(path: Path, data: bytes, *, durable: bool = False) -> None:
    """Readers see the old file or the new one, never a half-written one."""
    _write_atomically(path, lambda fd: _write_all(fd, data), durable)


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_if_changed(path: Path, data: bytes) -> bool:
    """Writes only when the bytes differ, so unchanged files keep their identity and mtime."""
    try:
        if path.stat().st_size == len(data) and path.read_bytes() == data:
            return False
        new = False
    except FileNotFoundError:
        new = True
    _write_atomically(path, lambda fd: _write_all(fd, data), durable=False, new=new)
    return True


def gzip_bytes(data: bytes, level: int = 9) -> bytes:
    """Deterministic gzip (no name, no mtime) for nginx's gzip_static siblings."""
    return gzip.compress(data, compresslevel=level, mtime=0)


def atomic_copy(source: Path, target: Path, *, durable: bool = False) -> None:
    def fill(fd: int) -> None:
        with open(source, "rb") as handle:
            _copy_into(handle.fileno(), fd)

    _write_atomically(target, fill, durable)


def _copy_into(source_fd: int, target_fd: int) -> None:
    """All of source's bytes into target, in the kernel where it can (sendfile)."""
    offset = 0
    try:
        while sent := os.sendfile(target_fd, source_fd, offset, 1 << 24):
            offset += sent
    except OSError:  # a file system without sendfile: plain reads and writes from where it stopped
        os.lseek(source_fd, offset, os.SEEK_SET)
        os.lseek(target_fd, offset, os.SEEK_SET)
        while block := os.read(source_fd, 1 << 20):
            view = memoryview(block)
            while view:
                view = view[os.write(target_fd, view) :]


def remove_tree(root: Path, relative: str) -> bool:
    """Removes root/relative (a file or a folder) and then the parents that left empty, up to root.
    Nothing there: nothing to do (a publish asks this of several paths that are usually absent)."""
    target = (root / relative).resolve()
    base = root.resolve()
    if base not in target.parents:
        raise ValueError(f"refusing to remove {target}: outside {base}")
    if target.is_dir():
        shutil.rmtree(target)
    elif target.exists():
        target.unlink()
    else:
        return False
    parent = target.parent
    while parent != base and _is_empty_folder(parent):
        parent.rmdir()
        parent = parent.parent
    return True


def _is_empty_folder(folder: Path) -> bool:
    """Without listing the folder whole: a search root holds thousands of entries."""
    try:
        with os.scandir(folder) as entries:
            return next(entries, None) is None
    except (FileNotFoundError, NotADirectoryError):
        return False


# What _open_temp makes: "." + the target's name + "." + 8 random hex digits + ".tmp" (older
# versions used mkstemp's 8 random characters: the pattern still matches theirs).
_OUR_TEMP = re.compile(r"^\..+\.[A-Za-z0-9_]{8}\.tmp$")


def sweep_temp_files(*roots: Path) -> list[Path]:
    """Removes the temp files a killed write left under `roots`; call with the build lock held
    (no write is in progress then). A root with its TEMP_FOLDER has them all there: that one
    folder is emptied. A root without one (new, or written by a version that put temp files
    beside their targets) gets it first, then one walk of the whole root for the older ones.
    Returns what was removed."""
    removed: list[Path] = []
    for root in roots:
        temp = root / TEMP_FOLDER
        if temp.is_dir():
            removed.extend(_empty_folder(temp))
        elif root.is_dir():
            _make_temp_folder(temp)  # first: a write from now on names its temp file there, not where the walk has been
            removed.extend(_swept_walk(root))
    return removed


def _make_temp_folder(temp: Path) -> None:
    with contextlib.suppress(FileExistsError):
        temp.mkdir()
    fsync_dir(temp.parent)
    _forget_temp_folders()


def _empty_folder(folder: Path) -> list[Path]:
    """Everything in `folder` (only temp files are ever put there), which stays."""
    removed = []
    with os.scandir(folder) as entries:
        for entry in entries:
            path = Path(entry.path)
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def _swept_walk(root: Path) -> list[Path]:
    """The temp files beside their targets under `root`, removed (older versions' layout)."""
    removed = []
    for folder, _dirs, files in os.walk(root):
        for name in files:
            if _OUR_TEMP.match(name):
                path = Path(folder) / name
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed


# Documents that grow with the registry (-/all, -/search.json: tens of MB at 1M versions) are
# written in pieces, never held whole: each piece goes to a temp file and through a streaming
# gzip into its sibling's temp file, and each temp file replaces its target only if it differs.

_BLOCK = 1 << 16  # bytes handed to a writer thread at a time: ~1,000 hand-offs for 60 MB, ~1 MB held


class _Replacement:
    """A temp file beside `path`, filled in pieces, that replaces `path` only when its bytes differ
    (as write_if_changed: an unchanged file keeps its identity and mtime)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd, self.temp = _open_temp(path)

    def write(self, data: bytes) -> None:
        _write_all(self.fd, data)

    def finish(self) -> bool:
        os.close(self.fd)
        self.fd = -1
        if same_bytes(Path(self.temp), self.path):
            os.unlink(self.temp)
            return False
        _into_place(os.replace, self.temp, self.path)
        return True

    def discard(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.temp)


class _GzipReplacement(_Replacement):
    """The same for `path`'s gzip sibling: the bytes gzip_bytes(whole, level) would give (zlib's own
    gzip wrapper, mtime 0, no name; deflate's output does not depend on how its input is cut)."""

    def __init__(self, path: Path, level: int) -> None:
        super().__init__(path)
        self.compressor = zlib.compressobj(level, zlib.DEFLATED, 31)

    def write(self, data: bytes) -> None:
        super().write(self.compressor.compress(data))

    def finish(self) -> bool:
        super().write(self.compressor.flush())
        return super().finish()


def same_bytes(first: Path, second: Path) -> bool:
    """Whether two files hold the same bytes (False when `second` is missing), read in blocks."""
    try:
        if first.stat().st_size != second.stat().st_size:
            return False
        with open(first, "rb") as one, open(second, "rb") as other:
            while block := one.read(1 << 20):
                if block != other.read(len(block)):
                    return False
    except FileNotFoundError:
        return False
    return True


def _blocks(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """`chunks` joined into blocks of about _BLOCK bytes."""
    pending: list[bytes] = []
    size = 0
    for chunk in chunks:
        pending.append(chunk)
        size += len(chunk)
        if size >= _BLOCK:
            yield b"".join(pending)
            pending, size = [], 0
    if pending:
        yield b"".join(pending)


def write_streams_if_changed(streams: Mapping[Path, Iterable[bytes]], gzip_level: int | None = None) -> list[Path]:
    """Writes each path's chunks (and, with a gzip level, `<path>.gz`) atomically, holding about a
    block of each at a time; a file is replaced only when its bytes changed. The chunks are pulled
    here (they may read a database that is not for other threads); one thread per stream
    compresses and writes (zlib lets go of the GIL), while the next blocks are pulled. Returns
    the files replaced."""
    sinks: list[list[_Replacement]] = []
    try:
        for path in streams:
            gz = [_GzipReplacement(path.with_name(path.name + ".gz"), gzip_level)] if gzip_level is not None else []
            sinks.append([_Replacement(path), *gz])
        _fill(sinks, [_blocks(chunks) for chunks in streams.values()])
        return [sink.path for group in sinks for sink in group if sink.finish()]
    except BaseException:
        for sink in (sink for group in sinks for sink in group):
            sink.discard()
        raise


def _write_group(group: list[_Replacement], block: bytes) -> None:
    for sink in group:
        sink.write(block)


def _fill(sinks: list[list[_Replacement]], blocks: list[Iterator[bytes]]) -> None:
    with ThreadPoolExecutor(max_workers=len(sinks)) as pool:
        pending: list[Future[None]] = []
        for row in itertools.zip_longest(*blocks, fillvalue=b""):
            for done in pending:
                done.result()
            pending = [pool.submit(_write_group, group, block) for group, block in zip(sinks, row) if block]
        for done in pending:
            done.result()
