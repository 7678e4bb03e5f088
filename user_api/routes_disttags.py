"""dist-tags: `npm dist-tag add/rm` (and the older `PUT /<name>/<tag>` of npm 6 and yarn 1)."""

from __future__ import annotations

import bottle

from registry_gen import publish
from registry_gen.writes import Change
from user_api.registry_context import json_body, writer_actor
from user_api.routes_packages import commit


def dist_tag_set(name: str, tag: str) -> bottle.HTTPResponse:
    actor = writer_actor()
    version = json_body()
    now = publish.now_iso()
    return commit(name, lambda s: Change(meta=publish.apply_dist_tag(s, tag, version, actor, now)), actor)


def dist_tag_remove(name: str, tag: str) -> bottle.HTTPResponse:
    actor = writer_actor()
    now = publish.now_iso()
    return commit(name, lambda s: Change(meta=publish.apply_dist_tag_removal(s, tag, actor, now)), actor, 200)
