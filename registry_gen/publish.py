"""The write rules: how publish, deprecate, unpublish, owner and dist-tag requests change a package.

Pure functions over a `PackageState` (the package's registry-meta.json plus the versions the tree
serves); they return the new `PackageMeta` or raise. Decoding a publish body is pure too (bytes
in, a checked `Upload` out). The I/O — content/ storage, the build lock, the rebuild — lives in
the write service (registry_gen.writes).

Who may write (see RATIONALE in the report): a package with maintainers accepts writes from them
and from administrators; a package built from archives dropped into content/ by hand (no
maintainers recorded) only from administrators; a name nobody holds from any logged-in user, who
becomes its maintainer.
"""

from __future__ import annotations

import base64
import binascii
import calendar
import dataclasses
import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from registry_gen.archive import Digests, read_archive_bytes
from registry_gen.errors import Forbidden, InvalidVersion, NotFound, RegistryError, RevisionConflict, VersionConflict
from registry_gen.manifest import manifest_problems, validate_manifest
from registry_gen.meta import PackageMeta
from registry_gen.names import split_name, tarball_filename, validate_name
from registry_gen.packument import REVISION_HASH_LENGTH, document_revision
from registry_gen.settings import Limits
from registry_gen.timestamps import now_iso
from registry_gen.versions import validate_version

MAX_TAG_LENGTH = 128
# Legacy staging (`PUT /<name>/<v>/-tag/<tag>` before the tarball): every write rewrites the meta
# under the global lock, so the staged documents of one package are bounded and expire.
MAX_STAGED_VERSIONS = 10
MAX_STAGED_BYTES = 64 * 1024
STAGE_TTL_SECONDS = 24 * 3600
# Tags share the URL and the npmrc namespace with versions and ranges; npm refuses range-like tags.
_TAG = re.compile(r"^[A-Za-z][A-Za-z0-9._-]*$")
_RANGE_LIKE_TAGS = frozenset({"x", "X"})


class BadRequest(RegistryError, ValueError):
    """A write request that is malformed or contradicts itself (HTTP 400)."""


class ArchiveTooLarge(RegistryError):
    """The tarball is over the registry's archive cap (HTTP 413)."""


@dataclass(frozen=True)
class Actor:
    """The authenticated caller of a write."""

    name: str
    email: str | None = None
    is_admin: bool = False
    # The account's immutable id (every HTTP write passes it). Without one an actor holds no
    # maintainer rights at all: names alone never grant anything.
    account_id: str | None = None

    def person(self) -> dict[str, str]:
        entry = {"name": self.name, "email": self.email} if self.email else {"name": self.name}
        if self.account_id:
            entry["account"] = self.account_id
        return entry


def maintainer_entry(name: str, email: str | None, account_id: str) -> dict[str, str]:
    """The meta's record of a maintainer bound to an account."""
    entry = {"name": name, "email": email} if email else {"name": name}
    entry["account"] = account_id
    return entry


def grants(entry: Mapping[str, str], actor: Actor) -> bool:
    """Whether a maintainer entry gives `actor` rights: only through the account it is bound to.

    An entry with no bound account (hand-edited meta, names from a package.json, from another
    user database) grants nothing, whoever registers that name later."""
    return actor.account_id is not None and entry.get("account") == actor.account_id


@dataclass(frozen=True)
class PackageState:
    """What the registry holds for one name right now."""

    name: str
    meta: PackageMeta
    published: frozenset[str]  # versions the tree serves (each has an archive)
    now: str | None = None  # when the write happens (ISO 8601); None: the clock's now

    @property
    def maintainer_names(self) -> list[str]:
        return [m["name"] for m in self.meta.maintainers]

    @property
    def used_versions(self) -> set[str]:
        """Every number ever handed out: it can never be published again.

        A number with a recorded time but neither an archive nor an unpublish record is what a
        crash between writing the meta and storing the archive leaves: nobody got a success reply
        for it, so it stays free (unpublishing always records the number in `unpublished`)."""
        return set(self.published) | set(self.meta.unpublished)

    @property
    def is_held(self) -> bool:
        """Somebody holds the name: a published version; an unpublished one (its maintainers keep
        the name); a staged version that has not expired; or an entry the legacy publish's first
        step opened less than STAGE_TTL_SECONDS ago. A version-less entry older than that holds
        nothing: whoever publishes first takes the name (issue 13, "Version-less entries")."""
        if self.published or self.meta.unpublished:
            return True
        now = self.now or now_iso()
        return bool(live_pending(self.meta.pending, now)) or _within_stage_ttl(self.meta.created, now)

    def holders_after(self, actor: Actor) -> list[dict[str, str]]:
        """The maintainers once `actor` writes: the current ones, or `actor` when nobody holds the
        name (a free name, an expired version-less entry, archives dropped in without any)."""
        if self.is_held and self.meta.maintainers:
            return [dict(m) for m in self.meta.maintainers]
        return [actor.person()]


@dataclass(frozen=True)
class Upload:
    """A checked tarball for name@version, ready to store."""

    name: str
    version: str
    data: bytes
    manifest: dict[str, Any]
    digests: Digests
    tags: dict[str, str]


# ---------------------------------------------------------------- who may write


def check_revision(state: PackageState, rev: str | None) -> None:
    """CouchDB's optimistic concurrency for npm's read-modify-write commands (unpublish of one
    version, deprecate, owner add/rm, unpublish of all): they GET the document, change it and send
    it back naming the `_rev` they read. Unless that is still the document's, RevisionConflict
    (409): nothing changes, and the client reads again (a stale unpublish must not remove a version
    published in between). None (a client that names no rev) and a name nobody holds (the rule
    answers 404) are not checked. A rev of a document an earlier release rendered (another hash
    form) is taken when its counter is the current one: that document has not been re-rendered yet."""
    if rev is None or not state.is_held:
        return
    current = document_revision(state.meta, state.published)
    if rev == current:
        return
    number, _, digest = rev.partition("-")
    if len(digest) != REVISION_HASH_LENGTH and number == current.partition("-")[0]:
        return
    raise RevisionConflict(
        f"conflict: {state.name} changed since this copy of its document was read (rev {rev}, now {current}); "
        "nothing was changed: read it again and retry (run the npm command again)"
    )


def authorize(state: PackageState, actor: Actor, action: str) -> None:
    """Raises Forbidden unless `actor` may `action` (publish, deprecate, ...) the package."""
    if actor.is_admin or not state.is_held:
        return
    owners = state.maintainer_names
    if any(grants(entry, actor) for entry in state.meta.maintainers):
        return
    if actor.name in owners:
        raise Forbidden(
            f"the maintainer entry {actor.name!r} of {state.name} is not bound to your account; an administrator "
            f"can bind it with `registry-gen owner claim {state.name} {actor.name}`"
        )
    if not owners:
        raise Forbidden(
            f"{state.name} has no maintainers on record (its archives were added to content/ by hand); "
            f"only an administrator may {action} it or add an owner"
        )
    raise Forbidden(
        f"you ({actor.name}) are not a maintainer of {state.name} and may not {action} it; "
        f"a maintainer ({', '.join(owners)}) can run `npm owner add {actor.name} {state.name}`"
    )


# ---------------------------------------------------------------- checking input


def validate_tag(tag: object) -> str:
    if not isinstance(tag, str) or not tag:
        raise BadRequest("a dist-tag must be a non-empty string")
    if len(tag) > MAX_TAG_LENGTH:
        raise BadRequest(f"dist-tag is longer than {MAX_TAG_LENGTH} characters")
    if tag in _RANGE_LIKE_TAGS or not _TAG.match(tag) or re.match(r"^v\d", tag):
        raise BadRequest(
            f"dist-tag {tag!r} is not allowed: it must start with a letter, hold only letters, digits, "
            "'.', '_' and '-', and must not look like a version or a range"
        )
    return tag


def checked_version(version: object) -> str:
    canonical = validate_version(version)
    if canonical != version:
        raise InvalidVersion(f"version {version!r} is not in canonical form ({canonical})")
    return canonical


def _attachment_names(name: str, version: str) -> set[str]:
    """npm names the attachment `<full name>-<version>.tgz`; others use the bare name."""
    bare = tarball_filename(name, version)
    return {bare, f"{name}-{version}.tgz", f"{split_name(name)[1]}-{version}.tgz"}


def check_tarball(name: str, version: str | None, data: bytes, limits: Limits) -> tuple[dict[str, Any], Digests]:
    """Reads an uploaded tarball as the build would; its package.json must name name@version."""
    if len(data) > limits.max_archive_bytes:
        raise ArchiveTooLarge(f"the tarball is larger than this registry's limit of {limits.max_archive_bytes} bytes")
    contents = read_archive_bytes(data, limits)
    if contents.converted is not None:
        raise BadRequest(
            "the tarball must be an npm tarball: a gzip-compressed tar with every file under one folder (package/)"
        )
    manifest = validate_manifest(contents.manifest)
    if manifest["name"] != name:
        raise BadRequest(f"package.json in the tarball names {manifest['name']!r}, but this request publishes {name!r}")
    if version is not None and manifest["version"] != version:
        raise BadRequest(
            f"package.json in the tarball says version {manifest['version']}, but this request publishes {version}"
        )
    return manifest, contents.digests


def _decode_base64(data: object, label: str) -> bytes:
    if not isinstance(data, str):
        raise BadRequest(f"{label}: `data` must be a base64 string")
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise BadRequest(f"{label}: `data` is not valid base64 ({exc})") from exc


SRI_ALGORITHMS = {"sha1": "sha1", "sha256": "sha256", "sha384": "sha384", "sha512": "sha512"}
_SRI_TOKEN = re.compile(r"^(?P<alg>[A-Za-z0-9]+)-(?P<digest>[A-Za-z0-9+/]+={0,2})(?:\?[\x21-\x7e]*)?$")


def check_integrity(integrity: str, data: bytes) -> None:
    """Every hash in an SRI string must match `data`; an unknown or malformed entry is refused.

    npm writes one `sha512-` entry, older clients `sha1-`; an SRI string may carry several."""
    tokens = integrity.split()
    if not tokens:
        raise BadRequest("dist.integrity is empty")
    for token in tokens:
        found = _SRI_TOKEN.match(token)
        if found is None or found["alg"].lower() not in SRI_ALGORITHMS:
            raise BadRequest(f"dist.integrity entry {token[:40]!r} is not an SRI hash this registry checks (sha1, sha256, sha384, sha512)")
        expected = base64.b64encode(hashlib.new(SRI_ALGORITHMS[found["alg"].lower()], data).digest()).decode()
        if found["digest"] != expected:
            raise BadRequest("the attachment does not match dist.integrity: it was damaged or is not the packed tarball")


def _check_declared_digests(dist: Any, digests: Digests, data: bytes) -> None:
    """The client hashed the bytes it sent; a mismatch means the attachment was damaged on the way.
    A publish that declares no digest at all is refused: nothing would catch a damaged upload."""
    dist = dist if isinstance(dist, dict) else {}
    shasum, integrity = dist.get("shasum"), dist.get("integrity")
    if not (isinstance(shasum, str) and shasum) and not (isinstance(integrity, str) and integrity):
        raise BadRequest("the version's dist must carry shasum or integrity (npm publish sends both)")
    if isinstance(shasum, str) and shasum and shasum.lower() != digests.shasum:
        raise BadRequest("the attachment does not match dist.shasum: it was damaged or is not the packed tarball")
    if integrity is not None and not isinstance(integrity, str):
        raise BadRequest("dist.integrity must be a string")
    if isinstance(integrity, str) and integrity:
        check_integrity(integrity, data)


def _tags_for(body: Mapping[str, Any], version: str) -> dict[str, str]:
    tags = body.get("dist-tags", {})
    if tags is None:
        return {}
    if not isinstance(tags, dict):
        raise BadRequest("dist-tags must be an object of tag -> version")
    # Only tags for the version being published are taken; others are not this request's business.
    return {validate_tag(tag): version for tag, value in tags.items() if value == version}


def _check_access(body: Mapping[str, Any]) -> None:
    """`access` is taken and not stored: who reads a package is the registry's read rules'
    business (registry.yaml `packages:`, default: everyone), not a flag of one publish. yarn 4
    sends `restricted` for every scoped package by default; Verdaccio ignores it the same way."""
    access = body.get("access")
    if access not in (None, "public", "restricted"):
        raise BadRequest("access must be \"public\", \"restricted\" or null")


def check_body_name(name: str, body: Mapping[str, Any]) -> None:
    for key in ("name", "_id"):
        if key in body and body[key] != name:
            raise BadRequest(f"the body's {key} {body[key]!r} does not match the package in the URL ({name})")


def decode_publish(name: str, body: Mapping[str, Any], limits: Limits) -> Upload:
    """Checks a modern publish body (`PUT /<name>` with `_attachments`) and its tarball.
    A legacy name passes here; `apply_*` hold a name nobody holds yet to the rule for new ones."""
    validate_name(name, legacy=True)
    check_body_name(name, body)
    _check_access(body)
    versions = body.get("versions")
    if not isinstance(versions, dict) or len(versions) != 1:
        raise BadRequest("a publish must carry exactly one version in `versions`")
    ((version, document),) = versions.items()
    version = checked_version(version)
    if not isinstance(document, dict):
        raise BadRequest(f"versions[{version!r}] must be an object")
    if document.get("name", name) != name or document.get("version", version) != version:
        raise BadRequest(f"versions[{version!r}] names {document.get('name')}@{document.get('version')}, not {name}@{version}")
    attachments = body.get("_attachments")
    if not isinstance(attachments, dict):
        raise BadRequest("_attachments must be an object")
    tarballs = {k: v for k, v in attachments.items() if isinstance(k, str) and k.endswith(".tgz")}
    if len(tarballs) != 1:
        raise BadRequest("a publish must carry exactly one .tgz attachment")
    ((filename, attachment),) = tarballs.items()
    if filename not in _attachment_names(name, version):
        raise BadRequest(f"attachment {filename!r} is not named after {name}@{version}")
    if not isinstance(attachment, dict):
        raise BadRequest(f"attachment {filename!r} must be an object with data and length")
    data = _decode_base64(attachment.get("data"), f"attachment {filename}")
    length = attachment.get("length")
    if isinstance(length, bool) or not isinstance(length, int):
        raise BadRequest(f"attachment {filename}: `length` must be the tarball's size in bytes")
    if len(data) != length:
        raise BadRequest(f"attachment {filename} decodes to {len(data)} bytes, but its length says {length}")
    manifest, digests = check_tarball(name, version, data, limits)
    _check_declared_digests(document.get("dist"), digests, data)
    return Upload(name, version, data, manifest, digests, _tags_for(body, version))


def decode_upload(name: str, filename: str, data: bytes, limits: Limits) -> Upload:
    """Checks a legacy raw tarball upload (`PUT /<name>/-/<file>.tgz/-rev/<rev>`)."""
    validate_name(name, legacy=True)
    manifest, digests = check_tarball(name, None, data, limits)
    version = manifest["version"]
    if filename.rsplit("/", 1)[-1] not in {n.rsplit("/", 1)[-1] for n in _attachment_names(name, version)}:
        raise BadRequest(f"the file name {filename!r} does not match {name}@{version} from its package.json")
    return Upload(name, version, data, manifest, digests, {})


# ---------------------------------------------------------------- the transitions


def _bump(meta: PackageMeta, now: str, **changes: Any) -> PackageMeta:
    return dataclasses.replace(meta, modified=now, revision=meta.revision + 1, **changes)


def _refuse_reuse(state: PackageState, version: str) -> None:
    if version in state.meta.unpublished:
        raise VersionConflict(
            f"{state.name}@{version} was unpublished on {state.meta.unpublished[version]}; "
            "a version number can never be used again, publish a new version"
        )
    if version in state.used_versions:
        raise VersionConflict(f"you cannot publish over the previously published version {state.name}@{version}")


def _check_new_name(state: PackageState) -> None:
    """A name nobody holds yet follows npm's rule for new packages (no capitals...); a legacy
    name the registry already holds (`JSONStream`) keeps getting new versions, as on npm."""
    if not state.is_held:
        validate_name(state.name)


def apply_publish(state: PackageState, upload: Upload, actor: Actor, now: str) -> PackageMeta:
    """A new version: refused when the number was ever used; the first publisher becomes maintainer."""
    authorize(state, actor, "publish")
    _check_new_name(state)
    _refuse_reuse(state, upload.version)
    meta = state.meta
    tags = dict(meta.dist_tags)
    pending = dict(meta.pending)
    staged = pending.pop(upload.version, None)
    pending = live_pending(pending, now)
    if isinstance(staged, dict) and isinstance(staged.get("_tag"), str):
        tags[staged["_tag"]] = upload.version
    tags.update(upload.tags)
    return _bump(
        meta,
        now,
        dist_tags=tags,
        maintainers=state.holders_after(actor),
        time={**meta.time, upload.version: now},
        pending=pending,
        created=meta.created or now,
    )


def apply_create(state: PackageState, actor: Actor, now: str) -> PackageMeta | None:
    """Legacy step 1 (`PUT /<name>` with no versions): makes an empty entry; never touches a held one."""
    authorize(state, actor, "publish")
    _check_new_name(state)
    if state.published:
        return None
    # A fresh entry, or one whose versions were all unpublished: (re)open it, so the version-less
    # packument the legacy client reads next is served (see build: entry-only packages).
    # An open entry keeps its first time: re-sending step 1 must not hold the name past its expiry.
    reopen = not state.is_held or bool(state.meta.unpublished)
    return _bump(state.meta, now, maintainers=state.holders_after(actor), created=now if reopen else state.meta.created)


def apply_stage(state: PackageState, version: str, tag: str, document: Any, actor: Actor, now: str) -> PackageMeta:
    """Legacy step 3 (`PUT /<name>/<version>/-tag/<tag>`): tags a published version, or stages an
    unpublished one in `pending` (invisible to installers) until its tarball arrives."""
    authorize(state, actor, "publish")
    _check_new_name(state)
    version = checked_version(version)
    tag = validate_tag(tag)
    meta = state.meta
    if version in state.published:
        return _bump(meta, now, dist_tags={**meta.dist_tags, tag: version})
    _refuse_reuse(state, version)
    if not isinstance(document, dict):
        raise BadRequest("the body must be the version's package.json")
    if document.get("name", state.name) != state.name or document.get("version", version) != version:
        raise BadRequest(f"the body describes {document.get('name')}@{document.get('version')}, not {state.name}@{version}")
    problems = manifest_problems({**document, "name": state.name, "version": version})
    if problems:
        raise BadRequest("invalid package.json: " + "; ".join(map(str, problems)))
    staged = {k: v for k, v in document.items() if not k.startswith("_")}
    staged["_tag"] = tag
    staged["_staged"] = now
    pending = live_pending(meta.pending, now)
    pending.pop(version, None)
    _check_stage_bounds(state.name, pending, staged)
    return _bump(
        meta,
        now,
        pending={**pending, version: staged},
        maintainers=state.holders_after(actor),
        created=meta.created or now,
    )


def _iso_seconds(stamp: object) -> float | None:
    if not isinstance(stamp, str):
        return None
    try:
        return calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def _within_stage_ttl(stamp: object, now: str) -> bool:
    at = _iso_seconds(stamp)
    return at is not None and (_iso_seconds(now) or 0.0) - at < STAGE_TTL_SECONDS


def live_pending(pending: Mapping[str, Any], now: str) -> dict[str, Any]:
    """Staged versions younger than STAGE_TTL_SECONDS (a stage without a time, from before the
    bound, expires at once: nobody got a tarball stored for it)."""
    current = _iso_seconds(now) or 0.0
    live = {}
    for version, staged in pending.items():
        at = _iso_seconds(staged.get("_staged")) if isinstance(staged, dict) else None
        if at is not None and current - at < STAGE_TTL_SECONDS:
            live[version] = staged
    return live


def _check_stage_bounds(name: str, pending: Mapping[str, Any], staged: Mapping[str, Any]) -> None:
    size = len(json.dumps(staged, separators=(",", ":")).encode())
    if size > MAX_STAGED_BYTES:
        raise BadRequest(f"a staged package.json may hold at most {MAX_STAGED_BYTES} bytes; this one holds {size}")
    if len(pending) >= MAX_STAGED_VERSIONS:
        raise BadRequest(
            f"{name} already has {len(pending)} staged versions waiting for their tarballs (at most {MAX_STAGED_VERSIONS}); "
            f"upload their tarballs, or wait {STAGE_TTL_SECONDS // 3600} h for them to expire"
        )


def apply_deprecations(state: PackageState, versions: Any, actor: Actor, now: str) -> PackageMeta | None:
    """`npm deprecate`: a whole document PUT back; only each version's `deprecated` is taken.
    An empty message un-deprecates. Returns None when nothing changes."""
    authorize(state, actor, "deprecate")
    if not isinstance(versions, dict):
        raise BadRequest("versions must be an object")
    deprecated = dict(state.meta.deprecated)
    for version, document in versions.items():
        if version not in state.published:
            raise BadRequest(
                f"{state.name}@{version} is not published; to publish it, send its tarball in _attachments"
            )
        message = document.get("deprecated") if isinstance(document, dict) else None
        if isinstance(message, str) and message:
            deprecated[version] = message
        else:
            deprecated.pop(version, None)
    if deprecated == state.meta.deprecated:
        return None
    return _bump(state.meta, now, deprecated=deprecated)


def _remaining_tags(tags: Mapping[str, Any], kept: Iterable[str]) -> dict[str, str]:
    """Tags that still name a kept version. When `latest` goes, the build points it at the highest
    remaining stable version (versions.choose_dist_tags), so it always names one that exists."""
    keep = set(kept)
    return {
        tag: version
        for tag, version in tags.items()
        if isinstance(tag, str) and isinstance(version, str) and version in keep and _TAG.match(tag)
    }


def apply_unpublish_all(state: PackageState, actor: Actor, now: str) -> tuple[PackageMeta | None, set[str]]:
    """`npm unpublish <pkg> --force`. Every number stays recorded in `unpublished`, and maintainers
    are kept, so only they (or an administrator) can publish under the name again. An entry that
    never had a version has nothing to remember: None means "delete its meta file"."""
    authorize(state, actor, "unpublish")
    removed = set(state.published)
    meta = state.meta
    numbers = (removed | set(meta.time)) - set(meta.unpublished)
    if not numbers and not meta.unpublished:
        return None, removed
    unpublished = {**meta.unpublished, **{v: now for v in numbers}}
    return _bump(meta, now, dist_tags={}, deprecated={}, time={}, pending={}, unpublished=unpublished), removed


def apply_version_set(
    state: PackageState, kept_versions: Iterable[str], tags: Any, actor: Actor, now: str
) -> tuple[PackageMeta | None, set[str]]:
    """`npm unpublish <pkg>@<ver>`: the remaining document is PUT back; the versions it lacks go.
    Its dist-tags are taken (npm moves tags off the removed version itself)."""
    authorize(state, actor, "unpublish")
    kept = set(kept_versions)
    added = kept - set(state.published)
    if added:
        raise BadRequest(
            f"this request cannot add versions ({', '.join(sorted(added))}); publish them with their tarballs"
        )
    removed = set(state.published) - kept
    if not removed:
        return state.meta, set()
    if not kept:
        return apply_unpublish_all(state, actor, now)
    meta = state.meta
    requested_tags = tags if isinstance(tags, dict) else meta.dist_tags
    return (
        _bump(
            meta,
            now,
            dist_tags=_remaining_tags(requested_tags, kept),
            deprecated={v: m for v, m in meta.deprecated.items() if v not in removed},
            time={v: t for v, t in meta.time.items() if v not in removed},
            unpublished={**meta.unpublished, **{v: now for v in removed}},
        ),
        removed,
    )


def apply_unpublish_version(
    state: PackageState, version: str, actor: Actor, now: str
) -> tuple[PackageMeta | None, set[str]]:
    """A tarball DELETE for a version that is still published (clients that skip the document PUT)."""
    return apply_version_set(state, set(state.published) - {version}, state.meta.dist_tags, actor, now)


def apply_owners(
    state: PackageState, requested: Any, actor: Actor, now: str, lookup: Callable[[str], dict[str, str] | None]
) -> PackageMeta | None:
    """`npm owner add|rm`: the new maintainer list; every name must be a registry account."""
    authorize(state, actor, "change the owners of")
    if not state.is_held:
        raise NotFound(f"{state.name} is not in this registry")
    if not isinstance(requested, list) or not all(isinstance(m, dict) and isinstance(m.get("name"), str) for m in requested):
        raise BadRequest("maintainers must be a list of {name, email} objects")
    names = list(dict.fromkeys(m["name"] for m in requested))
    if not names:
        raise BadRequest("a package needs at least one maintainer; add someone else first")
    # An entry recorded without an account stays unbound: only `owner claim` (an admin) binds one,
    # so re-sending the list through `npm owner add` never hands it to whoever holds that name now.
    unbound = {m["name"]: m for m in state.meta.maintainers if not m.get("account")}
    people = []
    for person in names:
        found = unbound.get(person) or lookup(person)
        if found is None:
            raise NotFound(f"there is no user named {person!r} on this registry")
        people.append(found)
    if people == state.meta.maintainers:
        return None
    return _bump(state.meta, now, maintainers=people)


def apply_dist_tag(state: PackageState, tag: str, version: Any, actor: Actor, now: str) -> PackageMeta | None:
    """`npm dist-tag add`: the version must be published."""
    authorize(state, actor, "tag")
    tag = validate_tag(tag)
    if not isinstance(version, str):
        raise BadRequest("the body must be the version as a JSON string, e.g. \"1.2.0\"")
    if version not in state.published:
        raise NotFound(f"{state.name}@{version} is not published, so it cannot be tagged {tag}")
    if state.meta.dist_tags.get(tag) == version:
        return None
    return _bump(state.meta, now, dist_tags={**state.meta.dist_tags, tag: version})


def apply_dist_tag_removal(state: PackageState, tag: str, actor: Actor, now: str) -> PackageMeta:
    """`npm dist-tag rm`: `latest` stays (it must always name a version; move it instead)."""
    authorize(state, actor, "tag")
    if tag == "latest":
        raise BadRequest("the latest tag cannot be removed; point it at another version with npm dist-tag add")
    if tag not in state.meta.dist_tags:
        raise NotFound(f"{tag} is not a dist-tag of {state.name}")
    return _bump(state.meta, now, dist_tags={t: v for t, v in state.meta.dist_tags.items() if t != tag})


def apply_claim(state: PackageState, entry: Mapping[str, str], now: str) -> PackageMeta | None:
    """An administrator binds `entry` (a maintainer bound to an account) to the package.

    An existing entry with the same name is replaced (it keeps its place), otherwise the entry is
    added. This is the only way a name recorded without an account (a hand-edited meta, a
    package.json's maintainers, a previous user database) becomes a right again."""
    if not state.is_held:
        raise NotFound(f"{state.name} is not in this registry")
    if not entry.get("account"):
        raise BadRequest("a claimed maintainer must be bound to an account")
    current = [dict(m) for m in state.meta.maintainers]
    names = [m.get("name") for m in current]
    if entry["name"] in names:
        current[names.index(entry["name"])] = dict(entry)
    else:
        current.append(dict(entry))
    if current == state.meta.maintainers:
        return None
    return _bump(state.meta, now, maintainers=current)
