"""Verdaccio's storage layout (pure): one folder per package (`@scope/name` for scoped ones) holding
a `package.json` package document and the tarballs it names. Also the reverse, for the export."""

from __future__ import annotations

import fnmatch
import json
from datetime import datetime
from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath
from typing import Any

from registry_gen.importers.identity import manifest_problem
from registry_gen.importers.model import ImportProblem, PackageRecord, Skipped, VersionSource, iso_time
from registry_gen.names import split_name, tarball_filename, tarball_path

DOCUMENT = "package.json"
DATABASE = ".verdaccio-db.json"
CONFIG = "config.yaml"
# Verdaccio's groups: they name nobody, so they make nobody an owner here.
_GROUPS = frozenset({"$all", "$anonymous", "$authenticated", "@all", "@anonymous", "@authenticated", "all", "anonymous"})


def publishers(config: Mapping[str, Any], name: str) -> tuple[dict[str, str], ...]:
    """The users Verdaccio's `packages:` rules name as publishers of `name` (first matching pattern).

    Verdaccio 6 keeps no maintainers in its storage: who may publish is this config. Groups
    ($authenticated...) name nobody and give nobody ownership."""
    rules = config.get("packages") if isinstance(config, Mapping) else None
    for pattern, rule in (rules or {}).items():
        if isinstance(rule, Mapping) and fnmatch.fnmatchcase(name, str(pattern).replace("**", "*")):
            allowed = rule.get("publish") or ""
            people = allowed.split() if isinstance(allowed, str) else [str(p) for p in allowed]
            return tuple({"name": p} for p in people if p not in _GROUPS and not p.startswith(("$", "@")))
    return ()


def bind_accounts(people: Iterable[Mapping[str, str]], accounts: Mapping[str, str]) -> tuple[dict[str, str], ...]:
    """Maintainer entries bound to the accounts this import created (`{username: account id}`).

    Only those: a name that matched an account already in the user store stays unbound (nothing
    says it is the same person); an administrator binds it with `registry-gen owner claim`."""
    bound = []
    for person in people:
        entry = {k: v for k, v in person.items() if k != "account"}
        account = accounts.get(entry["name"].lower())
        bound.append({**entry, "account": account} if account else entry)
    return tuple(bound)


def package_folders(entries: Mapping[str, list[str]]) -> list[str]:
    """Package folders of a storage tree given {folder: [child folders]} of its top two levels."""
    found = []
    for top in sorted(entries.get("", [])):
        if top.startswith("."):
            continue
        if top.startswith("@"):
            found += [f"{top}/{child}" for child in sorted(entries.get(top, [])) if not child.startswith(".")]
        else:
            found.append(top)
    return found


def parse_document(raw: bytes, folder: str) -> dict[str, Any]:
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ImportProblem(f"{folder}/{DOCUMENT}: not valid JSON ({exc})") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("versions"), dict):
        raise ImportProblem(f"{folder}/{DOCUMENT}: not a package document (no `versions` object)")
    return doc


def _maintainers(doc: Mapping[str, Any], latest: Mapping[str, Any]) -> tuple[dict[str, str], ...]:
    """The document's maintainers, else the latest version's, else who published it (`_npmUser`)."""
    for people in (doc.get("maintainers"), latest.get("maintainers"), [latest.get("_npmUser")]):
        if isinstance(people, list):
            found = [
                {k: str(v) for k, v in p.items() if k in ("name", "email") and isinstance(v, str)}
                for p in people if isinstance(p, dict) and isinstance(p.get("name"), str)
            ]  # fmt: skip
            if found:
                return tuple(found)
    return ()


def _tarball_file(name: str, version: str, manifest: Mapping[str, Any]) -> str:
    """The file Verdaccio stored: the last segment of dist.tarball, else npm's conventional name."""
    url = str((manifest.get("dist") or {}).get("tarball") or "")
    last = PurePosixPath(url.split("?")[0]).name if url else ""
    if last and last.endswith(".tgz") and last not in (".", ".."):
        return last
    return tarball_filename(name, version)


def record_from_document(doc: Mapping[str, Any], folder: str, origin: str = "") -> tuple[PackageRecord, list[Skipped]]:
    """A PackageRecord whose tarballs are paths relative to the storage root.

    A storage entry is trusted only for the name it is filed under: a document naming another
    package than its folder is refused whole, a version entry naming another package or version
    is refused alone."""
    name = doc.get("name")
    if not isinstance(name, str) or not _files_under(folder, name):
        raise ImportProblem(f"{folder}/{DOCUMENT}: the document is named {str(name)[:120]!r}, not {folder!r}: "
                            "refused, nothing of it is imported")  # fmt: skip
    times = doc.get("time") if isinstance(doc.get("time"), dict) else {}
    tags = {k: v for k, v in (doc.get("dist-tags") or {}).items() if isinstance(k, str) and isinstance(v, str)}
    versions, skipped = [], []
    for version, manifest in doc["versions"].items():
        problem = f"{folder}/{DOCUMENT}: version entry is not an object" if not isinstance(manifest, dict) else (
            manifest_problem(manifest, name, version, "version entry"))  # fmt: skip
        if problem:
            skipped.append(Skipped(f"{name}@{version}", problem, error=isinstance(manifest, dict)))
            continue
        dist = manifest.get("dist") if isinstance(manifest.get("dist"), dict) else {}
        deprecated = manifest.get("deprecated")
        versions.append(VersionSource(
            name, version, f"{folder}/{_tarball_file(name, version, manifest)}",
            integrity=dist.get("integrity"), shasum=dist.get("shasum"),
            time=iso_time(times.get(version)),
            deprecated=deprecated if isinstance(deprecated, str) and deprecated else None,
        ))  # fmt: skip
    latest = doc["versions"].get(tags.get("latest", ""), {})
    record = PackageRecord(
        name, tuple(versions), tags, _maintainers(doc, latest if isinstance(latest, dict) else {}),
        created=iso_time(times.get("created")),
        modified=iso_time(times.get("modified")),
        origin=origin,
    )
    return record, skipped


def _files_under(folder: str, name: str) -> bool:
    try:
        return storage_folder(name) == folder
    except ValueError:
        return False


# ---------------------------------------------------------------- export


def storage_document(packument: Mapping[str, Any], held: Iterable[str] | None = None) -> dict[str, Any]:
    """The `package.json` Verdaccio 6 keeps for a package it hosts, from our package document.

    A mirrored package (`_mirror`) is written the way Verdaccio keeps one it proxies: its uplink in
    `_uplinks`, and the tarballs not `held` here in `_distfiles` (their upstream URLs), so a
    Verdaccio configured with an uplink of that name fetches them as this mirror would."""
    name = str(packument["name"])
    versions = dict(packument.get("versions") or {})
    kept = set(versions) if held is None else set(held)
    attachments = {
        tarball_filename(name, version): {"shasum": (manifest.get("dist") or {}).get("shasum"), "version": version}
        for version, manifest in versions.items() if version in kept
    }  # fmt: skip
    doc = {
        "name": name,
        "versions": versions,
        "time": dict(packument.get("time") or {}),
        "users": {},
        "dist-tags": dict(packument.get("dist-tags") or {}),
        "_uplinks": {},
        "_distfiles": {},
        "_attachments": attachments,
        "_rev": str(packument.get("_rev") or "1-0"),
        "_id": name,
        "readme": str(packument.get("readme") or ""),
    }
    marker = packument.get("_mirror")
    if isinstance(marker, Mapping):
        doc.update(_proxied(name, versions, kept, marker))
    if packument.get("maintainers"):
        doc["maintainers"] = packument["maintainers"]
    return doc


def _proxied(name: str, versions: Mapping[str, Any], kept: set[str], marker: Mapping[str, Any]) -> dict[str, Any]:
    uplink, url = str(marker.get("uplink")), str(marker.get("url") or "")
    fetched = iso_time(marker.get("refreshed"))
    distfiles = {
        tarball_filename(name, version): {
            "url": url.rstrip("/") + "/" + tarball_path(name, version),
            "sha": (manifest.get("dist") or {}).get("shasum"),
            "registry": uplink,
        }
        for version, manifest in versions.items() if version not in kept
    }  # fmt: skip
    stamp = int(datetime.fromisoformat(fetched.replace("Z", "+00:00")).timestamp() * 1000) if fetched else 0
    return {"_uplinks": {uplink: {"etag": "", "fetched": stamp}}, "_distfiles": distfiles}


def storage_folder(name: str) -> str:
    scope, bare = split_name(name)
    return f"{scope}/{bare}" if scope else bare


# ---------------------------------------------------------------- config.yaml -> registry.yaml

_UPLINK_KEYS = ("url", "timeout", "maxage", "max_fails", "fail_timeout", "retry", "auth", "headers")
_READ = {"$all": "all", "$anonymous": "all", "$authenticated": "authenticated", "@all": "all", "@authenticated": "authenticated"}
PACKAGE_FILTER = "@verdaccio/package-filter"


def registry_config(config: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The registry.yaml keys (`uplinks:`, `packages:`) that carry a Verdaccio config.yaml's intent,
    and a note for each thing that does not carry over (pure)."""
    notes: list[str] = []
    uplinks = {}
    for name, spec in (config.get("uplinks") or {}).items():
        if not isinstance(spec, Mapping):
            continue
        uplinks[str(name)] = {key: spec[key] for key in _UPLINK_KEYS if key in spec}
        dropped = sorted(set(spec) - set(_UPLINK_KEYS))
        if dropped:
            notes.append(f"uplinks.{name}: {', '.join(dropped)} not carried over (registry-gen keeps every tarball and has no proxy settings)")
    policy = _filter_policy(config, notes)
    packages = {str(pattern): _package_rule(str(pattern), rule, policy, notes) for pattern, rule in (config.get("packages") or {}).items()
                if isinstance(rule, Mapping)}  # fmt: skip
    return {"uplinks": uplinks, "packages": packages}, notes


def _package_rule(pattern: str, rule: Mapping[str, Any], policy: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    access = rule.get("access", "$all")
    people = access.split() if isinstance(access, str) else [str(a) for a in access or []]
    readers = {_READ.get(person, person) for person in people}
    if readers & {"all"} or not people:
        out["read"] = "all"
    elif readers == {"authenticated"}:
        out["read"] = "authenticated"
    else:
        out["read"] = sorted(readers - {"authenticated"})
        notes.append(f"packages.{pattern!r}: access {access!r} becomes read by the groups {out['read']} (give the users those groups)")
    proxies = rule.get("proxy", "")
    proxies = proxies.split() if isinstance(proxies, str) else [str(p) for p in proxies]
    if proxies:
        out["proxy"] = proxies[0]
        out.update(policy)
        if len(proxies) > 1:
            notes.append(f"packages.{pattern!r}: proxied to {proxies[0]} only (registry-gen mirrors each pattern from one uplink)")
    if any(key in rule for key in ("publish", "unpublish")):
        notes.append(f"packages.{pattern!r}: publish/unpublish not carried over (writes keep the owner rules: the first publisher owns a name)")
    return out


def _filter_policy(config: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    """Verdaccio's package-filter plugin (minAgeDays, block) as the mirror's policy keys."""
    found = (config.get("filters") or {}).get(PACKAGE_FILTER) if isinstance(config.get("filters"), Mapping) else None
    if not isinstance(found, Mapping):
        return {}
    policy: dict[str, Any] = {}
    if isinstance(found.get("minAgeDays"), (int, float)):
        policy["min_release_age"] = f"{found['minAgeDays']}d"
    block = []
    for entry in found.get("block") or []:
        if isinstance(entry, Mapping) and entry.get("scope"):
            block.append(str(entry["scope"]))
        elif isinstance(entry, Mapping) and entry.get("package"):
            versions = entry.get("versions")
            block.append(f"{entry['package']}@{versions}" if versions else str(entry["package"]))
    if block:
        policy["block"] = block
    dropped = sorted(set(found) - {"minAgeDays", "block"})
    if dropped:
        notes.append(f"filters.{PACKAGE_FILTER}: {', '.join(dropped)} not carried over")
    return policy
