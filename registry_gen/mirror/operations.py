"""The mirror's commands (I/O, over one `MirrorService`): `refresh` what is mirrored now, and
`prefetch` a lockfile's or a spec's packages ahead of an outage, through the same gate a read goes
through (the policy decides what is fetched; nothing held back is)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from registry_gen.importers import lockfiles, upstream
from registry_gen.importers.model import ImportProblem
from registry_gen.errors import BrokenMeta
from registry_gen.meta import META_FILENAME
from registry_gen.mirror.policy import name_regex
from registry_gen.mirror.service import MirrorService, Outcome
from registry_gen.names import tarball_filename
from registry_gen.packument import build_packument
from registry_gen.storage import parsed_meta

WORKERS = 8
LOCKFILE_NAMES = ("package-lock.json", "npm-shrinkwrap.json", "pnpm-lock.yaml", "yarn.lock")


@dataclass
class Report:
    done: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # "name: why"
    skipped: list[str] = field(default_factory=list)  # held back, not proxied...

    def note(self, label: str, outcome: Outcome) -> None:
        if outcome.ok:
            self.done.append(label)
        elif outcome.status == 404:
            self.skipped.append(f"{label}: {outcome.message}")
        else:
            self.failed.append(f"{label}: {outcome.message}")


def mirrored_names(content_dir: Path) -> tuple[list[str], dict[str, str]]:
    """Every package content/ holds a mirrored meta for (its `mirror` key), by name; and each
    damaged meta that may be one (its bytes name a mirror), by its folder's package name, with the
    line naming the file and the fix (storage.parsed_meta's): named, never skipped in silence."""
    found: list[str] = []
    damaged: dict[str, str] = {}
    for path in sorted(content_dir.rglob(META_FILENAME)):
        key = path.relative_to(content_dir).as_posix()
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            continue  # removed since the walk: nothing is mirrored there any more
        except OSError as exc:
            damaged[key.rpartition("/")[0]] = f"content/{key} cannot be read ({exc.strerror}); fix its permissions, then retry"
            continue
        if b'"mirror"' not in raw:
            continue  # a local package (a mirrored meta always holds its `mirror` key)
        try:
            meta = parsed_meta(key, raw)
        except BrokenMeta as broken:
            damaged[key.rpartition("/")[0]] = str(broken)
            continue
        if meta.mirror is not None:
            found.append(meta.name)
    return found, damaged


def refresh(service: MirrorService, pattern: str = "**") -> Report:
    """Asks the uplink of every mirrored package matching `pattern` now (conditionally), makes the
    verdicts again, lands what changed and builds it before returning. A damaged meta matching it
    is a failure of the report, naming the file."""
    wanted = re.compile(name_regex(pattern))
    mirrored, damaged = mirrored_names(service.settings.content_dir)
    names = [name for name in mirrored if wanted.match(name)]
    report = Report()
    report.failed.extend(line for name, line in damaged.items() if wanted.match(name))
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        for name, outcome in zip(names, pool.map(service.refresh, names), strict=True):
            report.note(name, outcome)
    service.settle()
    return report


def prefetch(service: MirrorService, arguments: Iterable[str]) -> Report:
    """Lockfiles (every package they resolve, at its version) and specs (`name@range`: the versions
    npm would install for it and its dependencies, from what the mirror serves) fetched into the
    mirror, documents and tarballs, then built."""
    report = Report()
    wanted: dict[str, set[str]] = {}
    roots: dict[str, list[str | None]] = {}
    for argument in arguments:
        if Path(argument).name in LOCKFILE_NAMES and Path(argument).is_file():
            for entry in lockfiles.parse_lockfile(Path(argument).name, Path(argument).read_bytes()).entries:
                wanted.setdefault(entry.name, set()).add(entry.version)
        else:
            name, selector = upstream.parse_spec(argument)
            roots.setdefault(name, []).append(selector)
    if roots:
        closure = upstream.resolve_closure(roots, lambda names: _served_documents(service, names))
        report.failed += [str(failure) for failure in closure.failed]
        for name, versions in closure.versions.items():
            wanted.setdefault(name, set()).update(versions)
    for name, outcome in _documents(service, sorted(wanted)).items():
        if not outcome.ok:
            report.note(name, outcome)
    jobs = [(name, version) for name, versions in sorted(wanted.items()) for version in sorted(versions)]
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        outcomes = pool.map(lambda job: service.tarball(job[0], tarball_filename(*job)), jobs)
        for (name, version), outcome in zip(jobs, outcomes, strict=True):
            report.note(f"{name}@{version}", outcome)
    service.settle()
    return report


def _documents(service: MirrorService, names: list[str]) -> dict[str, Outcome]:
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        return dict(zip(names, pool.map(service.document, names), strict=True))


def _served_documents(service: MirrorService, names: list[str]) -> Mapping[str, Mapping[str, Any] | ImportProblem]:
    """One level of the closure: what the mirror serves of each name (held-back versions absent)."""
    served: dict[str, Mapping[str, Any] | ImportProblem] = {}
    for name, outcome in _documents(service, names).items():
        meta = service.current_meta(name) if outcome.ok else None
        if meta is None:
            served[name] = ImportProblem(f"{name}: {outcome.message or 'not a mirrored package (local, or not proxied)'}")
        else:
            served[name] = build_packument(name, [], meta, base_url="", readme=None, readme_filename=None)
    return served

