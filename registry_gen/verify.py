"""`registry-gen verify`: is a built tree whole and self-consistent? Reads the tree, nothing else.

It needs neither content/ nor the build state, so it also checks a tree after a crash, a copy,
or a deploy. Each problem names the file and the rule it breaks:

  packument-missing, packument-json, packument-name   the package document itself
  latest-missing, latest-dangling, dist-tag-dangling  dist-tags point at published versions
  tarball-url, tarball-missing, tarball-shasum, tarball-integrity, tarball-orphan
  abbreviated-missing, abbreviated-json, abbreviated-mismatch   the install-only twin
  dist-tags-missing, dist-tags-json, dist-tags-mismatch   -/package/<name>/dist-tags
  spelling-unresolved                                 every URL spelling of a name reaches the document
  web-page-missing                                    the package's HTML page
  index-missing, index-json, index-mismatch, gzip-mismatch       indexes and .gz siblings
  (notes, never a failure: index-refresh-pending, listings-refresh-pending: what a server's writes
  left to its refresh, `-/all` and, on PostgreSQL, the listing pages)
  dependency-missing                                  a dependency of a `latest` version the tree cannot satisfy

The dependency closure (dependency-missing): every `dependencies`, `optionalDependencies` and
`peerDependencies` spec of every package's `latest` version must resolve inside the tree
(node-semver ranges, dist-tags, `npm:` aliases). Bundled dependencies ship inside the tarball and
are not looked up. Git, URL, file and workspace specs never come from a registry: they are listed
as external, never a problem. A miss, or a spec npm cannot read, is a problem, except: an optional
dependency (or a peer marked optional in peerDependenciesMeta) is a note, since clients install
without it; and with `allow_external` a package absent from the tree is listed as external
(clients fetch it from another registry through scoped config), while a package the tree has in
no matching version stays a problem (no client falls back for one version).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import zlib
from collections.abc import Callable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from registry_gen.state import open_state
from registry_gen.errors import InvalidName, InvalidVersion
from registry_gen.layout import (
    ABBREVIATED_DOCUMENT,
    ALL_DOCUMENT,
    LEGACY_STATE_FOLDER,
    PACKAGE_DOCUMENT,
    SEARCH_DOCUMENT,
)
from registry_gen.names import package_dir, tarball_path, url_spellings, validate_name
from registry_gen.packument import abbreviate
from registry_gen.ranges import INVALID, parse_spec, resolves
from registry_gen.settings import Settings
from registry_gen.site import package_folder
from registry_gen.versions import validate_version

PACKUMENT_FILE = PACKAGE_DOCUMENT
ABBREVIATED_FILE = ABBREVIATED_DOCUMENT
HASH_CHUNK = 1024 * 1024
SRI_ALGORITHMS = ("sha512", "sha384", "sha256", "sha1")


@dataclass(frozen=True, order=True)
class TreeProblem:
    path: str
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message} [{self.rule}]"


@dataclass
class VerifyReport:
    packages: int = 0
    tarballs: int = 0
    problems: list[TreeProblem] = field(default_factory=list)
    notes: list[TreeProblem] = field(default_factory=list)  # worth reading, never a failure
    external: list[TreeProblem] = field(default_factory=list)  # dependencies not served by this tree

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        return (
            f"{self.packages} packages, {self.tarballs} tarballs, {len(self.problems)} problems, "
            f"{len(self.notes)} notes, {len(self.external)} external dependencies"
        )


def verify_tree(
    out_dir: Path, *, allow_external: bool = False, settings: Settings | None = None, proxied: Callable[[str], bool] | None = None
) -> VerifyReport:
    """Every problem of the tree at out_dir, sorted by path. `settings`: where the build's state is
    (default: beside the tree), asked whether a server's refresh of -/all is still pending.
    `proxied`: the names the mirror fetches from an uplink when asked (a dependency on one is no
    problem)."""
    report = VerifyReport()
    if not out_dir.is_dir():
        report.problems.append(TreeProblem(str(out_dir), "tree-missing", "no such folder"))
        return report
    names = sorted(find_package_names(out_dir))
    mirrored = set()
    for name in names:
        problems, tarballs = check_package(out_dir, name)
        report.problems += problems
        report.tarballs += tarballs
        note = mirror_note(out_dir, name)
        if note is not None:
            mirrored.add(name)
            report.notes.append(note)
    report.packages = len(names)
    # Open entries (version-less on purpose) have no page and are not listed in the indexes; a
    # mirrored package is listed once a tarball of it is held here (the build's own count).
    listed = [name for name in names if not is_open_entry_document(out_dir, name) and name not in mirrored]
    state = open_state(settings or Settings(out_dir=out_dir))
    for problem in check_indexes(out_dir, listed, ignored=mirrored):
        if problem.rule == "index-mismatch" and state.whole_documents_stale():
            pending = f"{problem.message}; a write left it to its server's refresh (index_refresh_seconds)"
            report.notes.append(TreeProblem(problem.path, "index-refresh-pending", pending + "; `registry-gen build` rewrites it now"))
        else:
            report.problems.append(problem)
    if state.listings_stale():  # not a problem: the front page, browse pages and shards follow a write
        report.notes.append(TreeProblem(
            "-/web", "listings-refresh-pending",
            "writes left listing pages (front page, browse pages, search shards) to the leader of the api instances, "
            "which renders them within index_refresh_seconds",
        ))  # fmt: skip
    report.problems += check_gzip_siblings(out_dir)
    closure = check_dependency_closure(out_dir, names, allow_external=allow_external, proxied=proxied)
    report.problems += closure.problems
    report.notes += closure.notes
    report.external += closure.external
    report.problems.sort()
    return report


def find_package_names(out_dir: Path) -> Iterator[str]:
    """Package folders: top-level folders, and folders inside `@scope` folders (never `-/` or dot folders)."""
    for entry in _folders(out_dir):
        if entry.name.startswith("@"):
            for inner in _folders(entry):
                yield f"{entry.name}/{inner.name}"
        elif entry.name != "-":
            yield entry.name


def _folders(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.is_symlink() and not p.name.startswith("."))


# ---------------------------------------------------------------- one package


def check_package(out_dir: Path, name: str) -> tuple[list[TreeProblem], int]:
    """The problems of one package folder, and how many tarballs it lists."""
    base = f"{name}/{PACKUMENT_FILE}"
    try:
        validate_name(name, legacy=True)
    except InvalidName as exc:
        return [TreeProblem(name, "packument-name", f"folder is not a valid package name: {exc}")], 0
    document, problem = _load_json(out_dir, base, "packument")
    if problem:
        return [problem], 0
    if not isinstance(document, dict) or not isinstance(document.get("versions"), dict):
        return [TreeProblem(base, "packument-json", "not a package document (no versions object)")], 0
    problems: list[TreeProblem] = []
    if document.get("name") != name or document.get("_id") != name:
        problems.append(TreeProblem(base, "packument-name", f"document is for {document.get('name')!r}, folder is {name!r}"))
    versions: dict[str, Any] = document["versions"]
    problems += _check_dist_tags(base, document)
    mirrored = isinstance(document.get("_mirror"), dict)
    for version, manifest in sorted(versions.items()):
        if mirrored and not (out_dir / tarball_path(name, version)).is_file():
            continue  # the mirror fetches it from its uplink on its first request (mirror_note counts them)
        problems += _check_tarball(out_dir, name, version, manifest)
    problems += _check_orphans(out_dir, name, versions)
    problems += _check_twins(out_dir, name, document)
    problems += _check_spellings(out_dir, name)
    held = [v for v in versions if not mirrored or (out_dir / tarball_path(name, v)).is_file()]
    if held and not (out_dir / package_folder(name) / "index.html").is_file():
        problems.append(TreeProblem(f"{package_folder(name)}/index.html", "web-page-missing", "no HTML page for the package"))
    return problems, len(versions)


def mirror_note(out_dir: Path, name: str) -> TreeProblem | None:
    """What a mirrored package's document says of its upstream, as a note (None: not mirrored)."""
    document, problem = _load_json(out_dir, f"{name}/{PACKUMENT_FILE}", "packument")
    marker = document.get("_mirror") if problem is None and isinstance(document, dict) else None
    if not isinstance(marker, dict) or not isinstance(document.get("versions"), dict):
        return None
    versions = document["versions"]
    held = sum(1 for version in versions if (out_dir / tarball_path(name, version)).is_file())
    back = len(marker.get("held") or {})
    return TreeProblem(
        f"{name}/{PACKUMENT_FILE}", "mirrored",
        f"mirrored from the uplink {marker.get('uplink')} ({marker.get('url')}), last refreshed {marker.get('refreshed')}: "
        f"{held} of {len(versions)} served versions' tarballs held here (the rest are fetched on first request), "
        f"{back} held back by the policy",
    )  # fmt: skip


def _check_dist_tags(base: str, document: dict[str, Any]) -> list[TreeProblem]:
    tags = document.get("dist-tags")
    if not isinstance(tags, dict):
        return [TreeProblem(base, "latest-missing", "no dist-tags object")]
    problems = []
    if not tags and not document["versions"]:
        # An entry opened by the legacy publish's first step (PUT /<name>) before its first upload:
        # version-less on purpose, and the registry's own output (see build.is_open_entry).
        return problems
    if "latest" not in tags:
        problems.append(TreeProblem(base, "latest-missing", "dist-tags has no latest"))
    for tag, version in sorted(tags.items()):
        if not isinstance(version, str) or version not in document["versions"]:
            rule = "latest-dangling" if tag == "latest" else "dist-tag-dangling"
            problems.append(TreeProblem(base, rule, f"dist-tag {tag} points at {version!r}, which is not a published version"))
    return problems


def _check_tarball(out_dir: Path, name: str, version: str, manifest: Any) -> list[TreeProblem]:
    base = f"{name}/{PACKUMENT_FILE}"
    try:
        validate_version(version)
        relative = tarball_path(name, version)
    except (InvalidVersion, InvalidName) as exc:
        return [TreeProblem(base, "tarball-url", f"version {version!r} cannot have a tarball: {exc}")]
    dist = manifest.get("dist") if isinstance(manifest, dict) else None
    if not isinstance(dist, dict):
        return [TreeProblem(base, "tarball-url", f"{version} has no dist object")]
    problems = []
    url_path = unquote(urlsplit(str(dist.get("tarball", ""))).path)
    if not url_path.endswith("/" + relative):
        problems.append(TreeProblem(base, "tarball-url", f"{version}: dist.tarball does not end with /{relative}"))
    target = out_dir / relative
    if not target.is_file():
        return [*problems, TreeProblem(relative, "tarball-missing", f"{name}@{version} lists this tarball; it is not there")]
    sha1, digests = hash_file(target)
    if dist.get("shasum") != sha1:
        problems.append(TreeProblem(relative, "tarball-shasum", f"sha1 {sha1} differs from dist.shasum {dist.get('shasum')}"))
    problems += _check_integrity(relative, str(dist.get("integrity", "")), digests)
    return problems


def hash_file(path: Path) -> tuple[str, dict[str, str]]:
    """sha1 hex, and base64 digests per SRI algorithm, reading the file in chunks."""
    hashes = {algorithm: hashlib.new(algorithm) for algorithm in SRI_ALGORITHMS}
    with open(path, "rb") as handle:
        while block := handle.read(HASH_CHUNK):
            for digest in hashes.values():
                digest.update(block)
    return hashes["sha1"].hexdigest(), {a: base64.b64encode(h.digest()).decode("ascii") for a, h in hashes.items()}


def _check_integrity(relative: str, integrity: str, digests: dict[str, str]) -> list[TreeProblem]:
    """Every hash of the SRI string that we can check must match; at least one must be there."""
    checked = 0
    for item in integrity.split():
        algorithm, _, value = item.partition("-")
        if algorithm in digests:
            checked += 1
            if value.split("?")[0] != digests[algorithm]:
                return [TreeProblem(relative, "tarball-integrity", f"{algorithm} digest differs from dist.integrity")]
    if not checked:
        return [TreeProblem(relative, "tarball-integrity", f"dist.integrity {integrity!r} has no checkable hash")]
    return []


def _check_orphans(out_dir: Path, name: str, versions: dict[str, Any]) -> list[TreeProblem]:
    folder = out_dir / name / "-"
    if not folder.is_dir():
        return []
    listed = set()
    for version in versions:
        try:
            listed.add(tarball_path(name, version).rsplit("/", 1)[1])
        except (InvalidName, InvalidVersion):
            continue
    return [
        TreeProblem(f"{name}/-/{path.name}", "tarball-orphan", "tarball no published version lists")
        for path in sorted(folder.iterdir())
        if not path.name.startswith(".") and path.name not in listed  # dot files: a writer's temp files
    ]


def _check_twins(out_dir: Path, name: str, document: dict[str, Any]) -> list[TreeProblem]:
    """abbreviated.json and the dist-tags file say what the full document says."""
    problems = []
    relative = f"{name}/{ABBREVIATED_FILE}"
    abbreviated, problem = _load_json(out_dir, relative, "abbreviated")
    if problem:
        problems.append(problem)
    elif abbreviated != _json_roundtrip(abbreviate(document)):
        problems.append(TreeProblem(relative, "abbreviated-mismatch", "differs from the full document"))
    relative = f"-/package/{package_dir(name)}/dist-tags"
    tags, problem = _load_json(out_dir, relative, "dist-tags")
    if problem:
        problems.append(problem)
    elif tags != document.get("dist-tags"):
        problems.append(TreeProblem(relative, "dist-tags-mismatch", f"says {tags}, the document says {document.get('dist-tags')}"))
    return problems


def _check_spellings(out_dir: Path, name: str) -> list[TreeProblem]:
    """A static server decodes %2f/%2F to '/': each spelling must reach this very file."""
    document = out_dir / name / PACKUMENT_FILE
    problems = []
    for spelling in url_spellings(name):
        target = out_dir / unquote(spelling).lstrip("/") / PACKUMENT_FILE
        if not (target.is_file() and os.path.samefile(target, document)):
            problems.append(TreeProblem(f"{name}/{PACKUMENT_FILE}", "spelling-unresolved", f"{spelling} does not reach the document"))
    return problems


# ---------------------------------------------------------------- the dependency closure

CLOSURE_FIELDS = ("dependencies", "optionalDependencies", "peerDependencies")


@dataclass(frozen=True)
class PublishedPackage:
    versions: frozenset[str]
    dist_tags: dict[str, str]
    latest: dict[str, Any] | None  # the manifest `latest` points at


def load_published(out_dir: Path, names: list[str]) -> dict[str, PublishedPackage]:
    """Versions, dist-tags and latest manifest of every readable package document."""
    published = {}
    for name in names:
        document, problem = _load_json(out_dir, f"{name}/{PACKUMENT_FILE}", "packument")
        if problem or not isinstance(document, dict) or not isinstance(document.get("versions"), dict):
            continue  # reported by check_package
        tags = document.get("dist-tags") if isinstance(document.get("dist-tags"), dict) else {}
        tags = {tag: version for tag, version in tags.items() if isinstance(version, str)}
        latest = document["versions"].get(tags.get("latest", ""))
        published[name] = PublishedPackage(frozenset(document["versions"]), tags, latest if isinstance(latest, dict) else None)
    return published


def check_dependency_closure(
    out_dir: Path, names: list[str], *, allow_external: bool = False, proxied: Callable[[str], bool] | None = None
) -> VerifyReport:
    """problems, notes and external dependencies of every package's `latest` version; a missing
    dependency the mirror proxies (`proxied`) is external: it is fetched when first asked for."""
    report = VerifyReport()
    published = load_published(out_dir, names)
    for name, package in sorted(published.items()):
        if package.latest is None:
            continue  # a dangling or missing latest is reported by _check_dist_tags
        where = f"{name}/{PACKUMENT_FILE}"
        requester = f"{name}@{package.latest.get('version')}"
        for field_name, dependency, spec_text in _dependency_entries(package.latest):
            spec = parse_spec(dependency, spec_text)
            wanted = f"{requester} -> {dependency}@{spec_text}"
            if not spec.from_registry and spec.kind != INVALID:
                report.external.append(TreeProblem(where, f"dependency-{spec.kind}", f"{wanted} ({field_name}; not checked)"))
                continue
            target = published.get(spec.name)
            if target is not None and resolves(spec, target.versions, target.dist_tags):
                continue
            reason = "not in this tree" if target is None else "no version in this tree satisfies it"
            if spec.kind == INVALID:
                reason = "not a range, tag, alias, git, URL or file spec npm can read"
            kind = _miss_kind(package.latest, field_name, dependency, target, allow_external and spec.kind != INVALID)
            if kind == "problem" and target is None and proxied is not None and proxied(spec.name):
                kind = "mirror"
            _record_miss(report, where, f"{wanted} ({field_name}): {reason}", kind)
    return report


def _dependency_entries(manifest: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(field, dependency, spec) to resolve; bundled dependencies ship inside the tarball itself."""
    bundled = bundled_dependencies(manifest)
    for field_name in CLOSURE_FIELDS:
        entries = manifest.get(field_name)
        if isinstance(entries, dict):
            for dependency, spec_text in sorted(entries.items()):
                if isinstance(spec_text, str) and not (field_name != "peerDependencies" and dependency in bundled):
                    yield field_name, dependency, spec_text


def bundled_dependencies(manifest: Mapping[str, Any]) -> set[str]:
    """The dependencies a manifest ships inside its tarball (npm never looks them up)."""
    for field_name in ("bundleDependencies", "bundledDependencies"):
        value = manifest.get(field_name)
        if value is True:
            return set(manifest.get("dependencies") or {}) | set(manifest.get("optionalDependencies") or {})
        if isinstance(value, list):
            return {name for name in value if isinstance(name, str)}
    return set()


def _miss_kind(manifest: dict[str, Any], field_name: str, dependency: str, target: PublishedPackage | None, allow_external: bool) -> str:
    """'problem', 'note' or 'external' for a registry spec the tree does not satisfy."""
    meta = manifest.get("peerDependenciesMeta")
    optional_peer = field_name == "peerDependencies" and isinstance(meta, dict) and _is_optional(meta.get(dependency))
    if field_name == "optionalDependencies" or optional_peer:
        return "note"
    if target is None and allow_external:
        return "external"
    return "problem"


def _is_optional(meta: Any) -> bool:
    return isinstance(meta, dict) and meta.get("optional") is True


def _record_miss(report: VerifyReport, where: str, message: str, kind: str) -> None:
    if kind == "problem":
        report.problems.append(TreeProblem(where, "dependency-missing", message))
    elif kind == "note":
        report.notes.append(TreeProblem(where, "dependency-optional-missing", f"{message}; optional, clients install without it"))
    elif kind == "mirror":
        report.external.append(TreeProblem(where, "dependency-mirrored", f"{message}; proxied: the mirror fetches it from its uplink when asked"))
    else:
        report.external.append(TreeProblem(where, "dependency-external", f"{message}; allowed by --allow-external"))


# ---------------------------------------------------------------- the whole tree


def is_open_entry_document(out_dir: Path, name: str) -> bool:
    """A package document with neither versions nor dist-tags: the legacy publish's first step."""
    document, problem = _load_json(out_dir, f"{name}/{PACKUMENT_FILE}", "packument")
    return problem is None and isinstance(document, dict) and document.get("versions") == {} and not document.get("dist-tags")


def check_indexes(out_dir: Path, names: list[str], ignored: AbstractSet[str] = frozenset()) -> list[TreeProblem]:
    problems = []
    if not (out_dir / "-/ping").is_file():
        problems.append(TreeProblem("-/ping", "index-missing", "no ping file"))
    everything, problem = _load_json(out_dir, ALL_DOCUMENT, "index")
    if problem:
        problems.append(problem)
    elif not isinstance(everything, dict) or sorted(k for k in everything if k != "_updated" and k not in ignored) != names:
        listed = sorted(k for k in everything if k != "_updated" and k not in ignored) if isinstance(everything, dict) else []
        missing = sorted(set(names) - set(listed))
        extra = sorted(set(listed) - set(names))
        problems.append(TreeProblem(ALL_DOCUMENT, "index-mismatch", f"missing {missing}, extra {extra}"))
    _, problem = _load_json(out_dir, SEARCH_DOCUMENT, "index")
    if problem:
        problems.append(problem)
    return problems


def check_gzip_siblings(out_dir: Path) -> list[TreeProblem]:
    """Every X.gz holds exactly X (nginx's gzip_static serves it instead of X)."""
    problems = []
    for root, folders, files in os.walk(out_dir):
        folders[:] = [f for f in folders if not (root == str(out_dir) and f == LEGACY_STATE_FOLDER)]
        for filename in files:
            if not filename.endswith(".gz") or filename.startswith("."):
                continue
            packed = Path(root) / filename
            plain = packed.with_name(filename[:-3])
            relative = packed.relative_to(out_dir).as_posix()
            try:
                same = plain.is_file() and gzip.decompress(packed.read_bytes()) == plain.read_bytes()
            except (OSError, EOFError, zlib.error):
                same = False
            if not same:
                problems.append(TreeProblem(relative, "gzip-mismatch", f"does not hold exactly {plain.name}"))
    return problems


def _load_json(out_dir: Path, relative: str, kind: str) -> tuple[Any, TreeProblem | None]:
    try:
        return json.loads((out_dir / relative).read_bytes()), None
    except FileNotFoundError:
        return None, TreeProblem(relative, f"{kind}-missing", "file is missing")
    except (OSError, ValueError) as exc:
        return None, TreeProblem(relative, f"{kind}-json", f"not readable JSON: {exc}")


def _json_roundtrip(value: Any) -> Any:
    return json.loads(json.dumps(value))
