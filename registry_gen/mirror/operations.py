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
from registry_gen.meta import META_FILENAME, parse_meta
from registry_gen.mirror.policy import name_regex
from registry_gen.mirror.service import MirrorService, Outcome
from registry_gen.names import tarball_filename
from registry_gen.packument import build_packument

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


def mirrored_names(content_dir: Path) -> list[str]:
    """Every package content/ holds a mirrored meta for (its `mirror` key), by name."""
    found = []
    for path in sorted(content_dir.rglob(META_FILENAME)):
        try:
            raw = path.read_bytes()
            if b'"mirror"' in raw:
                meta = parse_meta(raw)
                if meta.mirror is not None:
                    found.append(meta.name)
        except (OSError, ValueError):
            continue  # the build reports an unreadable meta; refresh has nothing to say about it
    return found


def refresh(service: MirrorService, pattern: str = "**") -> Report:
    """Asks the uplink of every mirrored package matching `pattern` now (conditionally), makes the
    verdicts again, lands what changed and builds it before returning."""
    wanted = re.compile(name_regex(pattern))
    names = [name for name in mirrored_names(service.settings.content_dir) if wanted.match(name)]
    report = Report()
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

