"""The npm registry's dynamic side as a Bottle app: every write, accounts, tokens, web login, search.

The routes are plain functions grouped by resource (`routes_service`, `routes_accounts`,
`routes_weblogin`, `routes_packages`, `routes_disttags`), registered here on Bottle's router in
one table. A package name may hold a slash (`@scope/name`): the `pkg` route filter matches both
spellings; the `couch` filter matches CouchDB's `org.couchdb.user:<name>` document ids.
A write reads forward: route → `registry_gen.writes.WriteService` (lock, rule, content/, rebuild)
→ reply. Every reply is a JSON object; errors are `{"error": "..."}` with the status of the one
table in `user_api.web`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, NamedTuple

import bottle
import jinja2

from registry_gen.settings import Settings
from registry_gen.storage import ContentStorage
from registry_gen.objectstore import ObjectStore
from registry_gen.refresher import IndexRewrites
from registry_gen.writes import WriteService
from user_api import routes_accounts as accounts
from user_api import routes_disttags as disttags
from user_api import routes_hooks as hooks
from user_api import routes_packages as packages
from user_api import routes_service as service
from user_api import routes_weblogin as weblogin
from user_api.registry_context import CONTEXT_KEY, RegistryContext, RegistryLimits, publish_body_limit
from user_api.store import UserStore
from user_api.web import error_status, is_expected_outage, json_response, loggable_path, login_guard, web_limits, web_login_sessions

__all__ = ["ROUTES", "RegistryLimits", "create_registry_app", "publish_body_limit"]

log = logging.getLogger(__name__)

TEMPLATES: Final = Path(__file__).resolve().parent / "templates"
SERVER_PATHS: Final = frozenset({"user"})  # /user is the user API's resource; a package there would be shadowed
# A package name: scoped (one slash) or not; never the registry's own "-" namespace.
PACKAGE_NAME: Final = r"@[^/]+/[^/]+|(?!-(?:/|$))[^/@][^/]*"
COUCH_USER_ID: Final = r"org\.couchdb\.user:[^/]+"


class Route(NamedTuple):
    method: str
    rule: str
    handler: Callable[..., bottle.HTTPResponse]


ROUTES: Final = (
    Route("GET", "/-/ping", service.ping),
    Route("GET", "/-/whoami", service.whoami),
    Route("GET", "/-/v1/search", service.search),
    Route("GET", "/-/changes", service.changes),
    Route("POST", "/-/npm/v1/security/advisories/bulk", service.audit),
    Route("POST", "/-/npm/v1/security/audits/quick", service.audit),
    Route("POST", "/-/v1/login", weblogin.web_login_start),
    Route("GET", "/-/v1/login/<login_id>", weblogin.web_login_form),
    Route("POST", "/-/v1/login/<login_id>", weblogin.web_login_submit),
    Route("GET", "/-/v1/done/<done_id>", weblogin.web_login_done),
    Route("GET", "/-/user/<username:couch>", accounts.user_document),
    Route("PUT", "/-/user/<username:couch>", accounts.couch_login),
    Route("PUT", "/-/user/<username:couch>/-rev/<rev>", accounts.couch_login),
    Route("DELETE", "/-/user/token/<token:path>", accounts.logout),
    Route("GET", "/-/npm/v1/tokens", accounts.list_tokens),
    Route("POST", "/-/npm/v1/tokens", accounts.create_token),
    Route("DELETE", "/-/npm/v1/tokens/token/<key>", accounts.revoke_token),
    Route("POST", "/-/npm/v1/hooks/hook", hooks.add_hook),
    Route("GET", "/-/npm/v1/hooks", hooks.list_hooks),
    Route("GET", "/-/npm/v1/hooks/hook/<hook_id>", hooks.get_hook),
    Route("PUT", "/-/npm/v1/hooks/hook/<hook_id>", hooks.update_hook),
    Route("DELETE", "/-/npm/v1/hooks/hook/<hook_id>", hooks.remove_hook),
    Route("PUT", "/-/package/<name:pkg>/dist-tags/<tag>", disttags.dist_tag_set),
    Route("DELETE", "/-/package/<name:pkg>/dist-tags/<tag>", disttags.dist_tag_remove),
    Route("PUT", "/<name:pkg>", packages.package_put),
    Route("PUT", "/<name:pkg>/-rev/<rev>", packages.package_rev_put),
    Route("DELETE", "/<name:pkg>/-rev/<rev>", packages.package_delete),
    Route("PUT", "/<name:pkg>/-/<filename:re:.+\\.tgz>/-rev/<rev>", packages.tarball_put),
    Route("DELETE", "/<name:pkg>/-/<filename:re:.+\\.tgz>/-rev/<rev>", packages.tarball_delete),
    Route("PUT", "/<name:pkg>/<version>/-tag/<tag>", packages.stage_version),
    Route("PUT", "/<name:pkg>/<tag:re:[^/\\-][^/]*>", disttags.dist_tag_set),  # npm 6 / yarn 1 `PUT /<name>/<tag>`
)


def _package_filter(config: str) -> tuple[str, None, None]:
    return PACKAGE_NAME, None, None


def _couch_user_filter(config: str) -> tuple[str, Callable[[str], str], None]:
    """CouchDB's user document id, `org.couchdb.user:<name>`, as the name alone."""
    return COUCH_USER_ID, lambda matched: matched.partition(":")[2], None


def json_error_page(error: bottle.HTTPError) -> str:
    """What Bottle renders for errors raised outside a route (no route, wrong method): JSON too."""
    bottle.response.set_header("Content-Type", "application/json")
    bottle.response.set_header("Cache-Control", "no-store")
    if error.status_code == 405 and bottle.request.method in ("GET", "HEAD"):
        bottle.response.status = 404  # a read of a write-only path is simply not found
        if "Allow" in bottle.response.headers:
            del bottle.response.headers["Allow"]
        return json.dumps({"error": "not found"})
    if error.status_code == 404:
        return json.dumps({"error": "not found"})
    if error.status_code == 405:
        allowed = bottle.response.headers.get("Allow", "")
        return json.dumps({"error": f"{bottle.request.method} is not supported here (use {allowed})"})
    return json.dumps({"error": str(error.body or error.status_line)})


def replies_in_json(callback: Callable[..., Any]) -> Callable[..., Any]:
    """Bottle plugin: every error a route raises becomes its JSON reply (one table); every request is logged."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        environ = bottle.request.environ
        method = str(environ.get("REQUEST_METHOD", "GET")).upper()
        try:
            response = callback(*args, **kwargs)
        except Exception as error:  # noqa: BLE001 - the one place errors become replies
            status, message, headers = error_status(error)
            if status >= 500 and not is_expected_outage(error):
                log.exception("%s %s failed", method, loggable_path(environ.get("PATH_INFO")))
            response = json_response(status, {"error": message}, headers)
        log.debug("%s %s %d", method, loggable_path(environ.get("PATH_INFO")), response.status_code)
        return response

    return wrapper


def create_registry_app(
    settings: Settings,
    store: UserStore,
    *,
    storage: ContentStorage | None = None,
    limits: RegistryLimits | None = None,
    refresher: IndexRewrites | None = None,
    objects: ObjectStore | None = None,
) -> bottle.Bottle:
    """The registry's dynamic endpoints as a fresh Bottle app (see the module docstring).
    `refresher`: the server's IndexRefresher or Leader (without one, each write rewrites -/all at once)."""
    limits = limits or web_limits(settings)
    app = bottle.Bottle(catchall=True)
    app.router.add_filter("pkg", _package_filter)
    app.router.add_filter("couch", _couch_user_filter)
    app.config[CONTEXT_KEY] = RegistryContext(
        settings=settings,
        store=store,
        writes=WriteService(settings, storage, reserved_names=SERVER_PATHS, refresher=refresher, objects=objects),
        limits=limits,
        web_logins=web_login_sessions(store, limits),
        pages=jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True),
        logins=login_guard(store, limits),
    )
    app.install(replies_in_json)
    for route in ROUTES:
        app.route(route.rule, route.method, route.handler)
    app.default_error_handler = json_error_page  # type: ignore[method-assign]
    return app
