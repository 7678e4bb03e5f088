"""An npm-protocol registry's package documents (pure): specs, version choice, records."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

import nodesemver

from registry_gen.importers.model import ImportProblem, PackageRecord, iso_time, VersionSource
from registry_gen.names import escaped_name, validate_name
from registry_gen.versions import is_valid_version


def parse_spec(spec: str) -> tuple[str, str | None]:
    """`name`, `name@range`, `name@tag`, `@scope/name@...` -> (name, selector or None)."""
    at = spec.find("@", 1)
    name, selector = (spec[:at], spec[at + 1 :]) if at > 0 else (spec, None)
    try:
        validate_name(name)
    except ValueError as exc:
        raise ImportProblem(f"{spec}: {exc}") from exc
    return name, selector or None


def document_url(registry: str, name: str) -> str:
    return registry.rstrip("/") + "/" + escaped_name(name)


def registry_of(resolved: str, name: str) -> str | None:
    """The registry base of a tarball URL `<base><name>/-/<file>` (None when it has another shape)."""
    marker = f"/{name}/-/"
    at = resolved.find(marker)
    return resolved[: at + 1] if at >= 0 else None


def choose_versions(doc: Mapping[str, Any], spec: str, selector: str | None, all_versions: bool) -> list[str]:
    """The versions a spec asks for: all of them, a dist-tag, an exact version or the highest in a range."""
    versions = [v for v in (doc.get("versions") or {}) if is_valid_version(v)]
    tags = doc.get("dist-tags") or {}
    if all_versions:
        return versions
    wanted = selector or "latest"
    if wanted in tags and tags[wanted] in versions:
        return [tags[wanted]]
    if wanted in versions:
        return [wanted]
    try:
        best = nodesemver.max_satisfying(versions, wanted, loose=False)
    except Exception as exc:  # the library raises plain ValueError/TypeError for a bad range
        raise ImportProblem(f"{spec}: {wanted!r} is neither a dist-tag, a version nor a range ({exc})") from exc
    if best is None:
        raise ImportProblem(f"{spec}: no version matches {wanted!r} (known tags: {', '.join(sorted(tags)) or 'none'})")
    return [best]


def _people(value: Any) -> tuple[dict[str, str], ...]:
    if not isinstance(value, list):
        return ()
    return tuple(
        {k: v for k, v in p.items() if k in ("name", "email") and isinstance(v, str)}
        for p in value if isinstance(p, dict) and isinstance(p.get("name"), str)
    )  # fmt: skip


def record_from_packument(doc: Mapping[str, Any], versions: Iterable[str], expected: Mapping[str, VersionSource] | None = None) -> PackageRecord:
    """A record of `versions` with the document's times, tags and deprecations.

    `expected` (from a lockfile) supplies the digests the tarball must match in addition to the
    document's, and the tarball URL the lockfile resolved to."""
    name = str(doc.get("name"))
    times = doc.get("time") if isinstance(doc.get("time"), dict) else {}
    sources = []
    for version in versions:
        manifest = (doc.get("versions") or {}).get(version)
        if not isinstance(manifest, dict):
            raise ImportProblem(f"{name}@{version}: the registry's document has no such version")
        dist = manifest.get("dist") if isinstance(manifest.get("dist"), dict) else {}
        locked = (expected or {}).get(version)
        integrity = " ".join(x for x in (dist.get("integrity"), locked.integrity if locked else None) if x) or None
        deprecated = manifest.get("deprecated")
        sources.append(VersionSource(
            name, version, (locked.tarball if locked and locked.tarball else None) or str(dist.get("tarball") or ""),
            integrity=integrity, shasum=dist.get("shasum") or (locked.shasum if locked else None),
            time=iso_time(times.get(version)),
            deprecated=deprecated if isinstance(deprecated, str) and deprecated else None,
        ))  # fmt: skip
    tags = {k: v for k, v in (doc.get("dist-tags") or {}).items() if isinstance(v, str)}
    return PackageRecord(
        name, tuple(sources), tags, _people(doc.get("maintainers")),
        created=iso_time(times.get("created")),
        modified=iso_time(times.get("modified")),
    )


def same_origin(url: str, base: str) -> bool:
    """Tokens go only to the registry they were given for."""
    a, b = urlsplit(url), urlsplit(base)
    return (a.scheme, a.netloc) == (b.scheme, b.netloc)
