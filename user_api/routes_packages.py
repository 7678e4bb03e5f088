"""Package writes of the npm protocol: publish (new and legacy), deprecate, unpublish, owners,
staged versions. Each route decodes the request, picks the pure rule of `registry_gen.publish`,
and hands it to the write service; the reply is sent once the tree is rebuilt."""

from __future__ import annotations

from typing import Any

import bottle

from registry_gen import publish
from registry_gen.errors import NotFound
from registry_gen.names import tarball_filename
from registry_gen.publish import Actor, BadRequest, PackageState
from registry_gen.writes import Change, Rule, revision_after
from user_api import web
from user_api.registry_context import context, environ, json_body, json_object, lookup_person, ok, writer_actor


def commit(name: str, rule: Rule, actor: Actor, status: int = 201, *, rev: str | None = None) -> bottle.HTTPResponse:
    """Applies `rule` under the write lock. `rev`: the `_rev` a whole-document write names, which
    must still be the document's (else 409, publish.check_revision). The rule runs first (it is
    pure: nothing is written until it returns), so who may not write hears 403 whatever rev they
    name. The reply carries the document's new `rev`, as CouchDB's does."""
    after: list[str | None] = []

    def checked(state: PackageState) -> Change:
        change = rule(state)
        publish.check_revision(state, rev)
        after.append(revision_after(state, change))
        return change

    context().writes.apply(name, checked, actor)
    new_rev = after[0] if after else None
    return ok(status, id=name, **({"rev": new_rev} if new_rev else {}))


def _publish(name: str, body: dict[str, Any], actor: Actor) -> bottle.HTTPResponse:
    upload = publish.decode_publish(name, body, context().settings.limits)  # heavy and pure: outside the lock
    context().writes.publish(upload, actor)
    return ok(201, id=name, success=True)


def package_put(name: str) -> bottle.HTTPResponse:
    actor = writer_actor()
    body = json_object(context().publish_limit)
    if body.get("_attachments"):
        return _publish(name, body, actor)
    publish.check_body_name(name, body)
    now = publish.now_iso()
    versions = body.get("versions")
    if versions:  # npm deprecate: the whole document back, with the `_rev` it read
        return commit(name, lambda s: Change(meta=publish.apply_deprecations(s, versions, actor, now)), actor, rev=_body_rev(body))
    return commit(name, lambda s: Change(meta=publish.apply_create(s, actor, now)), actor)


def package_rev_put(name: str, rev: str) -> bottle.HTTPResponse:
    actor = writer_actor()
    body = json_object(context().publish_limit)
    if body.get("_attachments"):
        return _publish(name, body, actor)
    publish.check_body_name(name, body)
    now = publish.now_iso()
    if "versions" in body:
        return commit(name, _version_set_rule(body, actor, now), actor, 200, rev=rev)
    if "maintainers" in body:
        owners = body["maintainers"]
        return commit(name, lambda s: Change(meta=publish.apply_owners(s, owners, actor, now, lookup_person)), actor, 200, rev=rev)
    if "users" in body:
        # npm star: accepted and not recorded (a static tree has no place for per-user stars).
        return ok(200, id=name)
    raise BadRequest("this request changes nothing: send versions (unpublish) or maintainers (owner)")


def _body_rev(body: dict[str, Any]) -> str | None:
    rev = body.get("_rev")
    if rev is not None and not isinstance(rev, str):
        raise BadRequest("_rev must be a string")
    return rev


def _version_set_rule(body: dict[str, Any], actor: Actor, now: str) -> Rule:
    """npm unpublish of one version: the document comes back without it."""
    versions = body["versions"]
    if not isinstance(versions, dict):
        raise BadRequest("versions must be an object")

    def rule(state: PackageState) -> Change:
        meta, removed = publish.apply_version_set(state, versions, body.get("dist-tags"), actor, now)
        return Change(meta=meta if meta is not state.meta else None, delete_meta=meta is None, removed=removed)

    return rule


def package_delete(name: str, rev: str) -> bottle.HTTPResponse:
    actor = writer_actor()
    now = publish.now_iso()

    def rule(state: PackageState) -> Change:
        if not state.is_held and not state.meta.unpublished:
            raise NotFound(f"{name} is not in this registry")
        meta, removed = publish.apply_unpublish_all(state, actor, now)
        return Change(meta=meta, delete_meta=meta is None, removed=removed)

    return commit(name, rule, actor, 200, rev=rev)


def tarball_put(name: str, filename: str, rev: str) -> bottle.HTTPResponse:
    actor = writer_actor()
    settings = context().settings
    data = web.read_body(environ(), settings.limits.max_archive_bytes)
    upload = publish.decode_upload(name, filename, data, settings.limits)
    context().writes.publish(upload, actor)
    return ok(201, id=name)


def tarball_delete(name: str, filename: str, rev: str) -> bottle.HTTPResponse:
    actor = writer_actor()
    now = publish.now_iso()
    # npm derives this path from dist.tarball; older scoped URLs carry the full name as the file.
    bare = filename.rsplit("/", 1)[-1]

    def rule(state: PackageState) -> Change:
        version = next((v for v in state.published if bare == tarball_filename(name, v)), None)
        if version is None:
            if any(bare == tarball_filename(name, v) for v in state.meta.unpublished):
                publish.authorize(state, actor, "unpublish")
                return Change()  # already gone with the document PUT that came first
            raise NotFound(f"{filename} is not a tarball of {name}")
        meta, removed = publish.apply_unpublish_version(state, version, actor, now)
        return Change(meta=meta, delete_meta=meta is None, removed=removed)

    return commit(name, rule, actor, 200, rev=rev)


def stage_version(name: str, version: str, tag: str) -> bottle.HTTPResponse:
    actor = writer_actor()
    document = json_body()
    now = publish.now_iso()
    return commit(name, lambda s: Change(meta=publish.apply_stage(s, version, tag, document, actor, now)), actor)
