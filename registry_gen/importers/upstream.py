"""An npm-protocol registry's package documents (pure): specs, version choice, records, and the
dependency closure `import registry --with-dependencies` takes."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import nodesemver

from registry_gen import ranges
from registry_gen.importers.identity import document_problem, manifest_problem
from registry_gen.importers.model import ImportProblem, PackageRecord, Skipped, VersionSource, iso_time
from registry_gen.importers.origins import registry_origin
from registry_gen.names import escaped_name, validate_name
from registry_gen.verify import bundled_dependencies
from registry_gen.versions import is_valid_version

# What npm (7 and later) installs for a package: its dependencies, the optional ones it can, and
# its peers unless peerDependenciesMeta marks them optional. `registry-gen verify` checks the same.
CLOSURE_FIELDS = ("dependencies", "optionalDependencies", "peerDependencies")
# What a slim document keeps of each version: enough to resolve, fetch and record it.
KEPT_VERSION_FIELDS = ("name", "version", "dist", "deprecated", *CLOSURE_FIELDS, "peerDependenciesMeta",
                       "bundleDependencies", "bundledDependencies")  # fmt: skip


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


def pick_version(doc: Mapping[str, Any], selector: str) -> str | None:
    """The version npm installs for `selector` (npm-pick-manifest): a dist-tag's version, an
    exact version, else `latest` when it satisfies the range, else the highest version that does."""
    versions = [v for v in (doc.get("versions") or {}) if is_valid_version(v)]
    tags = doc.get("dist-tags") or {}
    if selector in tags and tags[selector] in versions:
        return str(tags[selector])
    if selector in versions:
        return selector
    if not ranges.is_valid_range(selector):
        raise ValueError(f"{selector!r} is neither a dist-tag, a version nor a range")
    latest = tags.get("latest")
    if latest in versions and ranges.satisfies(latest, selector):
        return str(latest)
    best = nodesemver.max_satisfying(versions, selector, loose=True)
    return str(best) if best is not None else None


def choose_versions(doc: Mapping[str, Any], spec: str, selector: str | None, all_versions: bool) -> list[str]:
    """The versions a spec asks for: all of them, or the one npm would install."""
    if all_versions:
        return [v for v in (doc.get("versions") or {}) if is_valid_version(v)]
    wanted = selector or "latest"
    try:
        best = pick_version(doc, wanted)
    except ValueError as exc:
        raise ImportProblem(f"{spec}: {exc}") from exc
    if best is None:
        tags = doc.get("dist-tags") or {}
        raise ImportProblem(f"{spec}: no version matches {wanted!r} (known tags: {', '.join(sorted(tags)) or 'none'})")
    return [best]


def _people(value: Any) -> tuple[dict[str, str], ...]:
    if not isinstance(value, list):
        return ()
    return tuple(
        {k: v for k, v in p.items() if k in ("name", "email") and isinstance(v, str)}
        for p in value if isinstance(p, dict) and isinstance(p.get("name"), str)
    )  # fmt: skip


def record_from_packument(
    doc: Mapping[str, Any], name: str, versions: Iterable[str], registry: str, expected: Mapping[str, VersionSource] | None = None
) -> tuple[PackageRecord, list[Skipped]]:
    """A record of `name`'s `versions` with the document's times, tags and deprecations, and the
    versions refused (absent, or an entry naming another package or version).

    The document must be `name`'s (else ImportProblem). `expected` (from a lockfile) supplies the
    digests the tarball must match in addition to the document's, and the URL it resolved to."""
    problem = document_problem(doc, name)
    if problem:
        raise ImportProblem(f"{name}: {problem}")
    times = doc.get("time") if isinstance(doc.get("time"), dict) else {}
    sources, refused = [], []
    for version in versions:
        manifest = (doc.get("versions") or {}).get(version)
        problem = "the registry's document has no such version" if not isinstance(manifest, dict) else (
            manifest_problem(manifest, name, version, "version entry"))  # fmt: skip
        if problem:
            refused.append(Skipped(f"{name}@{version}", problem, error=True))
            continue
        sources.append(_source(name, version, manifest, times, (expected or {}).get(version)))
    tags = {k: v for k, v in (doc.get("dist-tags") or {}).items() if isinstance(v, str)}
    record = PackageRecord(
        name, tuple(sources), tags, _people(doc.get("maintainers")),
        created=iso_time(times.get("created")), modified=iso_time(times.get("modified")),
        origin=registry_origin(registry),
    )  # fmt: skip
    return record, refused


def _source(name: str, version: str, manifest: Mapping[str, Any], times: Mapping[str, Any], locked: VersionSource | None) -> VersionSource:
    dist = manifest.get("dist") if isinstance(manifest.get("dist"), dict) else {}
    integrity = " ".join(x for x in (dist.get("integrity"), locked.integrity if locked else None) if x) or None
    deprecated = manifest.get("deprecated")
    return VersionSource(
        name, version, (locked.tarball if locked and locked.tarball else None) or str(dist.get("tarball") or ""),
        integrity=integrity, shasum=dist.get("shasum") or (locked.shasum if locked else None),
        time=iso_time(times.get(version)),
        deprecated=deprecated if isinstance(deprecated, str) and deprecated else None,
    )  # fmt: skip


def same_origin(url: str, base: str) -> bool:
    """Tokens go only to the registry they were given for (scheme, host and port)."""
    return registry_origin(url).split("/", 3)[:3] == registry_origin(base).split("/", 3)[:3]


# ---------------------------------------------------------------- the dependency closure


def slim_document(doc: Mapping[str, Any]) -> dict[str, Any]:
    """What the closure keeps of a document: no readmes, no unused manifest fields."""
    versions = {
        version: {k: manifest[k] for k in KEPT_VERSION_FIELDS if k in manifest} if isinstance(manifest, dict) else manifest
        for version, manifest in (doc.get("versions") or {}).items()
    }
    return {k: doc[k] for k in ("name", "dist-tags", "time", "maintainers") if k in doc} | {"versions": versions}


def dependency_specs(manifest: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(package looked up, selector) of every registry dependency npm installs with `manifest`.

    Bundled dependencies ship inside the tarball; git, URL, file and workspace specs never come
    from a registry; an `npm:` alias is looked up under its target's name."""
    bundled = bundled_dependencies(manifest)
    optional_peers = manifest.get("peerDependenciesMeta") if isinstance(manifest.get("peerDependenciesMeta"), dict) else {}
    for field_name in CLOSURE_FIELDS:
        entries = manifest.get(field_name)
        for dependency, text in (entries.items() if isinstance(entries, dict) else ()):
            if not isinstance(text, str):
                continue
            if field_name == "peerDependencies" and isinstance(optional_peers.get(dependency), dict) and optional_peers[dependency].get("optional") is True:
                continue
            if field_name != "peerDependencies" and dependency in bundled:
                continue
            spec = ranges.parse_spec(dependency, text)
            if spec.from_registry:
                yield spec.name, spec.selector


@dataclass
class Closure:
    """The versions to import per name, the (slim) documents they come from, what failed."""

    versions: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    documents: dict[str, dict[str, Any]] = field(default_factory=dict)
    failed: list[Skipped] = field(default_factory=list)
    unreachable: set[str] = field(default_factory=set)  # names whose document could not be had


Documents = Callable[[list[str]], Mapping[str, Mapping[str, Any] | ImportProblem]]


def resolve_closure(roots: Mapping[str, list[str | None]], documents: Documents, all_versions: bool = False) -> Closure:
    """The roots' versions and, level by level, the versions npm would pick for their dependencies
    (`pick_version` against the upstream's versions). `documents(names)` fetches a level's documents."""
    closure = Closure()
    level = [(name, selector, True) for name, selectors in roots.items() for selector in selectors]
    seen: set[tuple[str, str | None, bool]] = set()
    while level:
        _fetch_level(closure, sorted({name for name, _, _ in level}), documents)
        following = []
        for name, selector, root in level:
            if (name, selector, root) in seen or name not in closure.documents:
                continue
            seen.add((name, selector, root))
            following += _choose(closure, name, selector, all_versions and root)
        level = following
    return closure


def _fetch_level(closure: Closure, names: list[str], documents: Documents) -> None:
    fresh = [name for name in names if name not in closure.documents and name not in closure.unreachable]
    for name, answer in documents(fresh).items():
        problem = str(answer).removeprefix(f"{name}: ") if isinstance(answer, ImportProblem) else document_problem(answer, name)
        if problem:
            closure.unreachable.add(name)
            closure.failed.append(Skipped(name, problem, error=True))
        else:
            closure.documents[name] = slim_document(answer)  # type: ignore[arg-type]


def _choose(closure: Closure, name: str, selector: str | None, all_versions: bool) -> list[tuple[str, str | None, bool]]:
    doc = closure.documents[name]
    spec = f"{name}@{selector}" if selector else name
    try:
        chosen = choose_versions(doc, spec, selector, all_versions)
    except ImportProblem as exc:
        closure.failed.append(Skipped(spec, str(exc).removeprefix(f"{spec}: "), error=True))
        return []
    following: list[tuple[str, str | None, bool]] = []
    for version in chosen:
        if version in closure.versions[name]:
            continue
        closure.versions[name].append(version)
        manifest = doc["versions"].get(version)
        if isinstance(manifest, dict):
            following += [(dependency, wanted, False) for dependency, wanted in dependency_specs(manifest)]
    return following
