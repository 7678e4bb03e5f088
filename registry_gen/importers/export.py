"""`registry-gen export verdaccio`: the built tree as a storage folder Verdaccio 6 serves as it is,
written beside the target and renamed into place when complete."""

from __future__ import annotations

import json
import secrets
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from registry_gen.build import PACKUMENT_FILE, run_build
from registry_gen.importers import verdaccio
from registry_gen.importers.model import ImportProblem
from registry_gen.importers.run import Progress, SilentProgress
from registry_gen.names import tarball_filename, tarball_path
from registry_gen.settings import Settings
from registry_gen.writer import atomic_write_bytes


def _package_documents(tree: Path) -> Iterable[Path]:
    for top in sorted(tree.iterdir()):
        if not top.is_dir() or top.name.startswith((".", "-")):
            continue
        if top.name.startswith("@"):
            yield from (child / PACKUMENT_FILE for child in sorted(top.iterdir()) if (child / PACKUMENT_FILE).is_file())
        elif (top / PACKUMENT_FILE).is_file():
            yield top / PACKUMENT_FILE


def export_verdaccio(settings: Settings, target: Path, progress: Progress | None = None) -> list[str]:
    """Writes a storage folder Verdaccio 6 serves as it is; returns the package names written."""
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ImportProblem(f"{target}: exists and is not an empty folder; export into a new folder")
    result = run_build(settings)
    if result.errors:
        raise ImportProblem(f"the build reported {len(result.errors)} problem(s); fix them first: {result.errors[0]}")
    documents = list(_package_documents(settings.out_dir))
    staging = target.with_name(f".{target.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    (progress or SilentProgress()).start(len(documents))
    names = [_export_package(settings.out_dir, json.loads(path.read_bytes()), staging) for path in documents]
    database = {"list": sorted(names), "secret": secrets.token_hex(32)}
    atomic_write_bytes(staging / verdaccio.DATABASE, json.dumps(database, indent=2).encode())
    if target.exists():
        target.rmdir()
    staging.rename(target)
    return names


def _export_package(tree: Path, packument: dict[str, Any], staging: Path) -> str:
    name = str(packument["name"])
    folder = staging / verdaccio.storage_folder(name)
    folder.mkdir(parents=True, exist_ok=True)
    held = []
    for version in packument.get("versions") or {}:
        if "_mirror" in packument and not (tree / tarball_path(name, version)).is_file():
            continue  # mirrored, not fetched yet: Verdaccio's own `_distfiles` entry says where it is
        shutil.copyfile(tree / tarball_path(name, version), folder / tarball_filename(name, version))
        held.append(version)
    document = verdaccio.storage_document(packument, held)
    atomic_write_bytes(folder / verdaccio.DOCUMENT, json.dumps(document, indent=2, ensure_ascii=False).encode())
    return name
