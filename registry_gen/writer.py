"""The only code that changes the output tree: atomic writes (temp file in the same folder + rename)."""

from __future__ import annotations

import gzip
import os
import re
import shutil
import tempfile
from pathlib import Path


def _temp_path(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    return Path(name)


def atomic_write_bytes(path: Path, data: bytes, *, durable: bool = False) -> None:
    """Readers see the old file or the new one, never a half-written one."""
    temp = _temp_path(path)
    try:
        with open(temp, "wb") as handle:
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.chmod(temp, 0o644)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)


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
    except FileNotFoundError:
        pass
    atomic_write_bytes(path, data)
    return True


def gzip_bytes(data: bytes) -> bytes:
    """Deterministic gzip (no name, no mtime) for nginx's gzip_static siblings."""
    return gzip.compress(data, compresslevel=9, mtime=0)


def atomic_copy(source: Path, target: Path, *, durable: bool = False) -> None:
    temp = _temp_path(target)
    try:
        shutil.copyfile(source, temp)
        if durable:
            with open(temp, "rb+") as handle:
                os.fsync(handle.fileno())
        os.chmod(temp, 0o644)
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def remove_tree(root: Path, relative: str) -> bool:
    """Removes root/relative (a file or a folder) and then empty parents up to root."""
    target = (root / relative).resolve()
    base = root.resolve()
    if base not in target.parents:
        raise ValueError(f"refusing to remove {target}: outside {base}")
    existed = target.exists()
    if target.is_dir():
        shutil.rmtree(target)
    elif existed:
        target.unlink()
    parent = target.parent
    while parent != base and parent.exists() and not any(parent.iterdir()):
        parent.rmdir()
        parent = parent.parent
    return existed


# What _temp_path makes: "." + the target's name + "." + mkstemp's 8 random characters + ".tmp".
_OUR_TEMP = re.compile(r"^\..+\.[A-Za-z0-9_]{8}\.tmp$")


def sweep_temp_files(*roots: Path) -> list[Path]:
    """Removes the temp files a killed write left under `roots`; call with the build lock held
    (no write is in progress then). Returns what was removed."""
    removed = []
    for root in roots:
        if not root.is_dir():
            continue
        for folder, _dirs, files in os.walk(root):
            for name in files:
                if _OUR_TEMP.match(name):
                    path = Path(folder) / name
                    path.unlink(missing_ok=True)
                    removed.append(path)
    return removed
