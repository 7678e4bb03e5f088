"""Package documents ("packuments") and the index documents, as pure functions of their inputs."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from registry_gen.manifest import has_install_script, keyword_list
from registry_gen.meta import PackageMeta
from registry_gen.mirror.policy import allowed_latest
from registry_gen.mirror.record import MirrorRecord
from registry_gen.names import tarball_path
from registry_gen.signing import Signer
from registry_gen.versions import choose_dist_tags, sort_versions

# Top-level fields hoisted from the `latest` version, as the public registry does.
HOISTED_FIELDS = ("description", "keywords", "license", "repository", "homepage", "bugs", "author", "contributors")
# Per-version fields of the abbreviated ("corgi") document, plus what pnpm and yarn read in practice.
ABBREVIATED_VERSION_FIELDS = (
    "name",
    "version",
    "dependencies",
    "optionalDependencies",
    "devDependencies",
    "bundleDependencies",
    "bundledDependencies",
    "peerDependencies",
    "peerDependenciesMeta",
    "bin",
    "directories",
    "dist",
    "engines",
    "_hasShrinkwrap",
    "hasInstallScript",
    "deprecated",
    "os",
    "cpu",
    "libc",
    "_npmUser",
)


@dataclass(frozen=True)
class Release:
    """One published version: its normalised manifest and the facts about its tarball."""

    version: str
    manifest: Mapping[str, Any]
    shasum: str
    integrity: str
    size: int
    file_count: int
    unpacked_size: int
    time: str


def dumps(document: Any) -> bytes:
    """Compact, deterministic JSON (clients download these often: no pretty-printing).

    `<`, `>` and `&` are written as JSON escapes: package documents are named index.html so that
    plain static hosts serve them, and a host that labels them text/html must not let a browser run
    markup from a package's description. The parsed values are unchanged.
    """
    return escaped(json.dumps(document, ensure_ascii=False, separators=(",", ":")))


def escaped(text: str) -> bytes:
    """Compact JSON text as dumps() writes it (see there)."""
    # Three str.replace passes, not str.translate: translate looks every character up in a dict
    # and cost 7x the serialisation itself on a 20-version document (bench/PROFILE.md).
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode("utf-8")


def _maintainers(meta: PackageMeta, latest: Mapping[str, Any]) -> list[dict[str, str]]:
    if meta.maintainers:
        # The account binding is the registry's own record, never part of a public document.
        return [{k: v for k, v in m.items() if k != "account"} for m in meta.maintainers]
    people = latest.get("maintainers")
    if isinstance(people, list):
        found = [_person(p) for p in people]
        found = [p for p in found if p]
        if found:
            return found
    author = _person(latest.get("author"))
    return [author] if author else []


def _person(value: Any) -> dict[str, str] | None:
    """npm's `name <email> (url)` string or {name, email} object, as {name, email}."""
    if isinstance(value, dict) and isinstance(value.get("name"), str):
        person = {"name": value["name"]}
        if isinstance(value.get("email"), str):
            person["email"] = value["email"]
        return person
    if isinstance(value, str) and value.strip():
        name, _, rest = value.partition("<")
        person = {"name": name.split("(")[0].strip()}
        if rest:
            person["email"] = rest.split(">")[0].strip()
        return person if person["name"] else None
    return None


def version_document(
    release: Release, name: str, base_url: str, meta: PackageMeta, signer: Signer | None = None
) -> dict[str, Any]:
    doc = dict(release.manifest)
    doc["name"] = name
    doc["version"] = release.version
    doc["_id"] = f"{name}@{release.version}"
    doc.setdefault("_hasShrinkwrap", False)
    if has_install_script(release.manifest):
        doc["hasInstallScript"] = True
    if release.version in meta.deprecated and meta.deprecated[release.version]:
        doc["deprecated"] = meta.deprecated[release.version]
    else:
        doc.pop("deprecated", None)
    doc["dist"] = {
        "tarball": base_url + tarball_path(name, release.version),
        "shasum": release.shasum,
        "integrity": release.integrity,
        "fileCount": release.file_count,
        "unpackedSize": release.unpacked_size,
    }
    # `dist` is rebuilt from the archive's facts, so an imported manifest's signatures (naming
    # another registry's keys) never pass through: only this registry's own are written.
    if signer is not None and release.integrity:
        doc["dist"]["signatures"] = [signer.signature(name, release.version, release.integrity)]
    return doc


def build_packument(
    name: str,
    releases: Iterable[Release],
    meta: PackageMeta,
    *,
    base_url: str,
    readme: str | None,
    readme_filename: str | None,
    signer: Signer | None = None,
) -> dict[str, Any]:
    """The full package document for `name`. `releases` may be in any order; with a `signer`,
    every version carries the registry's signature (see registry_gen.signing). A mirrored package's
    document comes from its meta alone (`mirrored_packument`)."""
    if meta.mirror is not None:
        return mirrored_packument(name, meta, meta.mirror, base_url=base_url, signer=signer)
    by_version = {r.version: r for r in releases}
    order = sort_versions(by_version)
    tags = choose_dist_tags(order, meta.dist_tags)
    latest = by_version[tags["latest"]].manifest if order else {}
    versions = {v: version_document(by_version[v], name, base_url, meta, signer) for v in order}
    times = {v: by_version[v].time for v in order}
    # Unpublished numbers keep their time so that nobody can publish them again.
    times.update({v: t for v, t in meta.unpublished.items() if v not in times})
    stamps = sorted(times.values())
    created = meta.created or (stamps[0] if stamps else None)
    modified = max([s for s in (meta.modified, stamps[-1] if stamps else None) if s] or [created or ""])
    time_doc: dict[str, str] = {}
    if created:
        time_doc["created"] = created
    if modified:
        time_doc["modified"] = modified
    time_doc.update({v: times[v] for v in sort_versions(times)})
    doc: dict[str, Any] = {"_id": name, "name": name}
    for field in HOISTED_FIELDS:
        if field in latest:
            doc[field] = latest[field]
    doc["dist-tags"] = tags
    doc["versions"] = versions
    doc["time"] = time_doc
    doc["maintainers"] = _maintainers(meta, latest)
    doc["readme"] = readme or ""
    if readme_filename:
        doc["readmeFilename"] = readme_filename
    if modified:
        doc["modified"] = modified
    doc["_rev"] = document_revision(meta, versions)
    return doc


def mirrored_packument(name: str, meta: PackageMeta, record: MirrorRecord, *, base_url: str, signer: Signer | None) -> dict[str, Any]:
    """The document of a package mirrored from an uplink: the upstream's versions the policy allows,
    with tarball URLs on this registry and the upstream's digests (what the mirror checks a tarball
    against when it fetches it), whether the tarball is held here yet or not. Versions held back
    are absent, `latest` moves to the newest allowed one; `_mirror` says where it comes from (the
    site reads it; clients ignore `_` fields)."""
    order = sort_versions(record.allowed)
    tags = {tag: v for tag, v in record.tags.items() if v in order and tag != "latest"}
    latest_version = allowed_latest(order, record.tags.get("latest"))
    if latest_version is None and order:
        latest_version = choose_dist_tags(order)["latest"]
    if latest_version is not None:
        tags["latest"] = latest_version
    latest = record.versions[latest_version] if latest_version else {}
    time_doc = {key: record.times[key] for key in ("created", "modified") if record.times.get(key)}
    time_doc.update({v: stamp for v in order if (stamp := _mirrored_time(record, v))})
    doc: dict[str, Any] = {"_id": name, "name": name}
    doc.update({field: latest[field] for field in HOISTED_FIELDS if field in latest})
    doc["dist-tags"] = dict(sorted(tags.items()))
    doc["versions"] = {v: mirrored_version_document(record.versions[v], name, v, base_url, signer) for v in order}
    doc["time"] = time_doc
    doc["maintainers"] = [dict(m) for m in record.maintainers]
    doc["readme"] = record.readme
    if record.readme_filename:
        doc["readmeFilename"] = record.readme_filename
    if time_doc.get("modified"):
        doc["modified"] = time_doc["modified"]
    doc["_mirror"] = {"uplink": record.uplink, "url": record.url, "refreshed": record.refreshed, "held": dict(sorted(record.held.items()))}
    doc["_rev"] = document_revision(meta, order)
    return doc


def _mirrored_time(record: MirrorRecord, version: str) -> str | None:
    """The time a mirrored version shows: the upstream's, or first seen here for an untrusted
    uplink (so a client's own release-age check sees the same age as this registry's)."""
    return record.first_seen.get(version) if record.untrusted else record.times.get(version) or record.first_seen.get(version)


def mirrored_version_document(manifest: Mapping[str, Any], name: str, version: str, base_url: str, signer: Signer | None) -> dict[str, Any]:
    doc = dict(manifest)
    doc["name"] = name
    doc["version"] = version
    doc["_id"] = f"{name}@{version}"
    upstream = manifest.get("dist") if isinstance(manifest.get("dist"), Mapping) else {}
    dist = {"tarball": base_url + tarball_path(name, version)}
    dist.update({key: upstream[key] for key in ("shasum", "integrity", "fileCount", "unpackedSize") if key in upstream})
    if signer is not None and dist.get("integrity"):
        dist["signatures"] = [signer.signature(name, version, str(dist["integrity"]))]
    doc["dist"] = dist
    return doc


# The hash part of a `_rev` this registry renders: 40 hex digits. Documents rendered before (32,
# an MD5 of the whole document) stay in a tree until their package is rendered again.
REVISION_HASH_LENGTH = 40


def document_revision(meta: PackageMeta, served: Iterable[str]) -> str:
    """The package document's CouchDB-style `_rev`, `<number>-<hash>`, from what a write can
    change: the meta (owners, dist-tags, deprecations, unpublish records, its revision counter)
    and the versions served. The write API derives the same from its read model, so a
    whole-document write can be checked against it under the write lock (a stale one gets 409)
    without reading the built tree; clients only echo it back."""
    versions = sorted(set(served))
    number = meta.revision or len(set(versions) | set(meta.unpublished))
    digest = hashlib.blake2b(digest_size=REVISION_HASH_LENGTH // 2)
    for piece in _revision_input(meta, versions):
        digest.update(piece)
    return f"{max(number, 1)}-{digest.hexdigest()}"


def _revision_input(meta: PackageMeta, versions: list[str]) -> Iterator[bytes]:
    """dumps([meta.to_json(), versions]) in pieces: a mirrored package's record (its `mirror`,
    the last key) from the record's one serialisation, not serialised again for each document."""
    if meta.mirror is None:
        yield dumps([meta.to_json(), versions])
        return
    yield b"[" + dumps(dataclasses.replace(meta, mirror=None).to_json())[:-1] + b',"mirror":'
    yield escaped(meta.mirror.serialised)
    yield b"}," + dumps(versions) + b"]"


def abbreviate(packument: Mapping[str, Any]) -> dict[str, Any]:
    """The install-only document (`application/vnd.npm.install-v1+json`), keeping `time` for pnpm."""
    versions = {
        v: {k: doc[k] for k in ABBREVIATED_VERSION_FIELDS if k in doc} for v, doc in packument["versions"].items()
    }
    abbreviated: dict[str, Any] = {"name": packument["name"]}
    if "modified" in packument:
        abbreviated["modified"] = packument["modified"]
    abbreviated["dist-tags"] = packument["dist-tags"]
    abbreviated["versions"] = versions
    abbreviated["time"] = packument.get("time", {})
    return abbreviated


def summarize(packument: Mapping[str, Any]) -> dict[str, Any]:
    """The few fields the indexes, the search document and the HTML front page need."""
    latest_version = packument["dist-tags"].get("latest")
    latest = packument["versions"].get(latest_version, {})
    return {
        "name": packument["name"],
        "description": packument["description"] if isinstance(packument.get("description"), str) else "",
        "version": latest_version,
        "dist-tags": packument["dist-tags"],
        "keywords": keyword_list(packument.get("keywords")),
        "maintainers": packument.get("maintainers", []),
        "modified": packument.get("modified", ""),
        "date": packument.get("time", {}).get(latest_version, packument.get("modified", "")),
        "license": packument.get("license") if isinstance(packument.get("license"), str) else None,
        "versions": len(packument["versions"]),
        "deprecated": latest.get("deprecated"),
    }


def all_index_entry(s: Mapping[str, Any]) -> dict[str, Any]:
    """One package's value in `/-/all`."""
    return {
        "name": s["name"],
        "description": s["description"],
        "dist-tags": s["dist-tags"],
        "keywords": s["keywords"],
        "maintainers": s["maintainers"],
        "time": {"modified": s["modified"]},
    }


def all_index(summaries: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """`/-/all`: every package by name (the old npm search index)."""
    return {s["name"]: all_index_entry(s) for s in sorted(summaries, key=lambda s: s["name"])}


# The two index documents grow with the registry; rewriting them after every publish must not
# serialise every package again. Each package's piece is serialised once, when the package
# changes (the build keeps it), and a document is the pieces joined: the same bytes as dumps().


def all_index_fragment(summary: Mapping[str, Any]) -> bytes:
    """`"<name>":{...}`: one member of the `/-/all` object."""
    return dumps(summary["name"]) + b":" + dumps(all_index_entry(summary))


def all_index_chunks(stamp: str, fragments: Iterable[bytes]) -> Iterator[bytes]:
    """dumps({"_updated": stamp, **all_index(...)}) in pieces, from fragments in name order (the
    document is tens of MB at 1M versions: it is streamed to its file, never held whole)."""
    yield b'{"_updated":' + dumps(stamp)
    for fragment in fragments:
        yield b"," + fragment
    yield b"}"


def search_fragment(summary: Mapping[str, Any], base_url: str) -> bytes:
    return dumps(search_object(summary, base_url))


def search_document_chunks(fragments: Iterable[bytes], stamp: str) -> Iterator[bytes]:
    """dumps(search_document(objects, stamp)) in pieces, from the objects' fragments; `total`
    comes after the objects, so it is their count as they went by."""
    yield b'{"objects":['
    total = 0
    for fragment in fragments:
        yield b"," + fragment if total else fragment
        total += 1
    yield b'],"total":' + str(total).encode() + b',"time":' + dumps(stamp) + b"}"


def search_object(summary: Mapping[str, Any], base_url: str) -> dict[str, Any]:
    """One entry of `/-/v1/search` (npm crashes when `maintainers` is missing)."""
    people = [{"username": m.get("name", ""), "email": m.get("email", "")} for m in summary["maintainers"]]
    package = {
        "name": summary["name"],
        "version": summary["version"],
        "description": summary["description"],
        "keywords": summary["keywords"],
        "date": summary["date"],
        "links": {"npm": base_url + "-/web/package/" + summary["name"] + "/index.html"},
        "maintainers": people,
    }
    if people:
        package["publisher"] = people[0]
    return {
        "package": package,
        "score": {"final": 1, "detail": {"quality": 1, "popularity": 1, "maintenance": 1}},
        "searchScore": 1,
    }


def search_document(objects: list[dict[str, Any]], stamp: str) -> dict[str, Any]:
    return {"objects": objects, "total": len(objects), "time": stamp}
