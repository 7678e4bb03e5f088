"""What an archive cannot carry: the per-package `registry-meta.json` file in content/.

It holds dist-tags, maintainers, deprecations, publish times and unpublished versions, and for a
package mirrored from an uplink, what the mirror took from it (`mirror`, registry_gen.mirror.record).
The write API keeps one next to the package's archives; a person may write one by hand. The build
reads it, so content/ stays the single source of truth.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from registry_gen.errors import FieldProblem, InvalidManifest
from registry_gen.mirror.record import MirrorRecord, parse_record
from registry_gen.names import validate_name

META_FILENAME = "registry-meta.json"


# "account" is the immutable id of the registry account a maintainer entry is bound to. Only the
# API (or `registry-gen owner claim`) writes it; an entry without it grants no rights.
MAINTAINER_KEYS = ("name", "email", "account")


@dataclass(frozen=True)
class PackageMeta:
    name: str
    dist_tags: dict[str, str] = field(default_factory=dict)
    maintainers: list[dict[str, str]] = field(default_factory=list)
    deprecated: dict[str, str] = field(default_factory=dict)
    time: dict[str, str] = field(default_factory=dict)
    unpublished: dict[str, str] = field(default_factory=dict)
    pending: dict[str, dict[str, Any]] = field(default_factory=dict)
    created: str | None = None
    modified: str | None = None
    revision: int = 0
    mirror: MirrorRecord | None = None  # set: the package is mirrored from an uplink, not published here

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name}
        if self.dist_tags:
            data["dist-tags"] = dict(sorted(self.dist_tags.items()))
        if self.maintainers:
            data["maintainers"] = self.maintainers
        if self.deprecated:
            data["deprecated"] = dict(sorted(self.deprecated.items()))
        if self.time:
            data["time"] = dict(sorted(self.time.items()))
        if self.unpublished:
            data["unpublished"] = dict(sorted(self.unpublished.items()))
        if self.pending:
            data["pending"] = dict(sorted(self.pending.items()))
        if self.created:
            data["created"] = self.created
        if self.modified:
            data["modified"] = self.modified
        if self.revision:
            data["revision"] = self.revision
        if self.mirror is not None:
            data["mirror"] = self.mirror.to_json()
        return data


def _string_map(data: dict[str, Any], key: str, problems: list[FieldProblem]) -> dict[str, str]:
    value = data.get(key, {})
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        problems.append(FieldProblem(key, "type", f"{key} must be an object of strings"))
        return {}
    return dict(value)


class _ParsedMetas:
    """The metas parsed lately, by their file's digest (thread-safe, bounded in bytes). A mirrored
    package's meta holds the upstream's document, megabytes for some: the mirror reads it for each
    tarball it lands and the build once more, and parsing it again each time was the largest cost
    of a cold install through the mirror (bench/PROFILE.md). A meta is never changed in place:
    every caller of the same bytes shares it (tests/registry_api/test_cached_metas_stay.py runs
    every write rule, the mirror's rules and a build over cached metas; freezing or copying a
    mirrored meta would cost more than the parse the cache saves)."""

    def __init__(self, budget: int) -> None:
        self.budget, self.held = budget, 0
        self.lock = threading.Lock()
        self.by_digest: OrderedDict[bytes, tuple[PackageMeta, int]] = OrderedDict()

    def get(self, digest: bytes) -> PackageMeta | None:
        with self.lock:
            found = self.by_digest.get(digest)
            if found is not None:
                self.by_digest.move_to_end(digest)
            return found[0] if found else None

    def put(self, digest: bytes, meta: PackageMeta, size: int) -> None:
        with self.lock:
            if digest not in self.by_digest and size <= self.budget:
                self.by_digest[digest], self.held = (meta, size), self.held + size
            while self.held > self.budget:
                self.held -= self.by_digest.popitem(last=False)[1][1]


_PARSED = _ParsedMetas(budget=16 << 20)


def parse_meta(raw: bytes) -> PackageMeta:
    """Parses a registry-meta.json file; raises InvalidManifest naming each bad field. The same
    bytes give the same (immutable) meta: a recent one is not parsed again."""
    digest = hashlib.blake2b(raw, digest_size=16).digest()
    meta = _PARSED.get(digest)
    if meta is None:
        meta = _parsed_meta(raw)
        _PARSED.put(digest, meta, len(raw))
    return meta


def _parsed_meta(raw: bytes) -> PackageMeta:
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidManifest([FieldProblem("(root)", "meta-json", f"not valid JSON: {exc}")]) from exc
    if not isinstance(data, dict):
        raise InvalidManifest([FieldProblem("(root)", "meta-object", "must be a JSON object")])
    problems: list[FieldProblem] = []
    name = data.get("name")
    try:
        validate_name(name, legacy=True)
    except Exception as exc:
        problems.append(FieldProblem("name", "name-valid", str(exc)))
    maintainers = data.get("maintainers", [])
    if not isinstance(maintainers, list) or not all(
        isinstance(m, dict) and isinstance(m.get("name"), str) for m in maintainers
    ):
        problems.append(FieldProblem("maintainers", "type", "maintainers must be a list of {name, email}"))
        maintainers = []
    pending = data.get("pending", {})
    if not isinstance(pending, dict):
        problems.append(FieldProblem("pending", "type", "pending must be an object"))
        pending = {}
    revision = data.get("revision", 0)
    if not isinstance(revision, int):
        problems.append(FieldProblem("revision", "type", "revision must be an integer"))
        revision = 0
    mirror = None
    if data.get("mirror") is not None:
        try:
            mirror = parse_record(data["mirror"])
        except ValueError as exc:
            problems.append(FieldProblem("mirror", "type", str(exc)))
    meta = PackageMeta(
        name=str(name),
        dist_tags=_string_map(data, "dist-tags", problems),
        maintainers=[{k: str(v) for k, v in m.items() if k in MAINTAINER_KEYS} for m in maintainers],
        deprecated=_string_map(data, "deprecated", problems),
        time=_string_map(data, "time", problems),
        unpublished=_string_map(data, "unpublished", problems),
        pending=pending,
        created=data.get("created") if isinstance(data.get("created"), str) else None,
        modified=data.get("modified") if isinstance(data.get("modified"), str) else None,
        revision=revision,
        mirror=mirror,
    )
    if problems:
        raise InvalidManifest(problems)
    return meta


def dump_meta(meta: PackageMeta) -> bytes:
    """Indented for people to read and edit; a mirrored package's `mirror` (the upstream's data,
    megabytes for some packages) on one line: indenting it costs the pure-Python encoder 10x."""
    text = json.dumps(dataclasses.replace(meta, mirror=None).to_json(), indent=2, ensure_ascii=False, sort_keys=False)
    if meta.mirror is not None:
        text = text[: -len("\n}")] + ',\n  "mirror": ' + meta.mirror.serialised + "\n}"
    return (text + "\n").encode("utf-8")
