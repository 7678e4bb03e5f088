"""What a mirrored package's registry-meta.json carries under `mirror` (pure): the upstream's
document as this registry took it, and the policy's verdicts.

content/ stays the single source of truth: the package document of a mirrored package is a pure
function of this record (`packument.mirrored_packument`), so a rebuild (into a new tree, after a
restore) gives the same document without asking the upstream; the tarballs fetched so far are
archives beside it, landed like an import's (the origin ledger names the uplink).

    "mirror": {
      "uplink": "npmjs", "url": "https://registry.npmjs.org/",
      "refreshed": "...",                  # when the upstream's document was last taken
      "untrusted": false,                  # ages (and the document's times) from first_seen
      "versions": {"1.0.0": {...}},        # every upstream version: its manifest, its upstream dist
      "times": {"created": ..., "1.0.0": ...},
      "first_seen": {"1.0.0": "..."},
      "tags": {"latest": "1.0.0"},          # the upstream's dist-tags
      "held": {"2.0.0": "too young: ..."},  # versions not served, and why
      "maintainers": [...], "readme": "...", "readmeFilename": "README.md"
    }
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Version fields a mirror never keeps: the README (one, for the package, is kept apart), and
# the install-time or registry-internal fields some upstreams leak.
DROPPED_FIELDS = frozenset({"readme", "readmeFilename", "_attachments", "_id", "_rev"})
KEPT_PRIVATE_FIELDS = frozenset({"_hasShrinkwrap", "_npmUser", "_nodeVersion", "_npmVersion"})
# What a tarball is checked against and what clients read; upstream signatures and attestations
# name the upstream's keys, so they never pass through (this registry signs with its own).
KEPT_DIST_FIELDS = ("tarball", "integrity", "shasum", "fileCount", "unpackedSize")
# Lists of people repeated in every version entry are most of some documents (7 of @types/node's
# 10 MB): kept for the upstream's `latest` only, as the package's people are shown from there.
LATEST_ONLY_FIELDS = frozenset({"contributors", "maintainers"})


@dataclass(frozen=True)
class MirrorRecord:
    uplink: str
    url: str
    refreshed: str
    versions: dict[str, dict[str, Any]] = field(default_factory=dict)
    times: dict[str, str] = field(default_factory=dict)
    first_seen: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    held: dict[str, str] = field(default_factory=dict)
    maintainers: list[dict[str, str]] = field(default_factory=list)
    readme: str = ""
    readme_filename: str | None = None
    untrusted: bool = False

    @property
    def allowed(self) -> list[str]:
        """The versions served (unordered)."""
        return [v for v in self.versions if v not in self.held]

    def age_start(self, version: str) -> str | None:
        """What a version's age counts from: the upstream's time, or when this registry first saw
        it (an untrusted uplink's, or a version the upstream gives no time for)."""
        if not self.untrusted and self.times.get(version):
            return self.times[version]
        return self.first_seen.get(version)

    def upstream_dist(self, version: str) -> Mapping[str, Any]:
        dist = (self.versions.get(version) or {}).get("dist")
        return dist if isinstance(dist, Mapping) else {}

    @functools.cached_property
    def serialised(self) -> str:
        """The record as compact JSON, made once per record (a record is never changed in place):
        registry-meta.json holds it and the package document's `_rev` hashes it, and a big
        package's record is megabytes."""
        return json.dumps(self.to_json(), ensure_ascii=False, separators=(",", ":"))

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"uplink": self.uplink, "url": self.url, "refreshed": self.refreshed}
        if self.untrusted:
            data["untrusted"] = True
        for key in ("versions", "times", "first_seen", "tags", "held"):
            data[key] = dict(sorted(getattr(self, key).items()))
        if self.maintainers:
            data["maintainers"] = self.maintainers
        if self.readme:
            data["readme"] = self.readme
        if self.readme_filename:
            data["readmeFilename"] = self.readme_filename
        return data


def parse_record(data: Any) -> MirrorRecord:
    """The `mirror` object of a registry-meta.json; ValueError says what is wrong."""
    if not isinstance(data, Mapping):
        raise ValueError("mirror must be an object")
    for key in ("uplink", "url", "refreshed"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise ValueError(f"mirror.{key} must be a string")
    versions = data.get("versions", {})
    if not isinstance(versions, Mapping) or not all(isinstance(m, Mapping) for m in versions.values()):
        raise ValueError("mirror.versions must map versions to manifests")
    maintainers = data.get("maintainers", [])
    if not isinstance(maintainers, list) or not all(isinstance(m, Mapping) and isinstance(m.get("name"), str) for m in maintainers):
        raise ValueError("mirror.maintainers must be a list of {name, email}")
    return MirrorRecord(
        data["uplink"], data["url"], data["refreshed"],
        versions={str(v): dict(m) for v, m in versions.items()},
        times=_strings(data, "times"), first_seen=_strings(data, "first_seen"), tags=_strings(data, "tags"),
        held=_strings(data, "held"), maintainers=[{k: str(v) for k, v in m.items() if k in ("name", "email")} for m in maintainers],
        readme=data.get("readme") if isinstance(data.get("readme"), str) else "",
        readme_filename=data.get("readmeFilename") if isinstance(data.get("readmeFilename"), str) else None,
        untrusted=data.get("untrusted") is True,
    )  # fmt: skip


def _strings(data: Mapping[str, Any], key: str) -> dict[str, str]:
    value = data.get(key, {})
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ValueError(f"mirror.{key} must be an object of strings")
    return dict(value)


def slim_manifest(manifest: Mapping[str, Any], latest: bool = True) -> dict[str, Any]:
    """A version entry as the mirror keeps it: public fields (the people lists only for the
    upstream's `latest`), and only the dist fields it checks."""
    kept = {
        key: value for key, value in manifest.items()
        if key not in DROPPED_FIELDS and (not key.startswith("_") or key in KEPT_PRIVATE_FIELDS)
        and (latest or key not in LATEST_ONLY_FIELDS)
    }  # fmt: skip
    dist = manifest.get("dist") if isinstance(manifest.get("dist"), Mapping) else {}
    kept["dist"] = {key: dist[key] for key in KEPT_DIST_FIELDS if dist.get(key) not in (None, "")}
    return kept


def with_verdicts(record: MirrorRecord, held: Mapping[str, str]) -> MirrorRecord:
    return dataclasses.replace(record, held=dict(held))
