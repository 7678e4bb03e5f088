"""The HTTP references: the user service's is made from the very document the server serves, and
lists every route the server answers; the npm routes table lists every route of ROUTES, each with
what it is for."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import webtest

from refgen import http_reference as reference
from refgen.text import MissingDescription
from registry_gen.settings import Settings
from user_api.app import create_user_app
from user_api.registry_routes import ROUTES
from user_api.store import open_user_store

from tests.docs.conftest import edit_descriptions


@pytest.fixture
def user_app(tmp_path: Path) -> Iterator[webtest.TestApp]:
    store = open_user_store(Settings(data_dir=tmp_path))
    try:
        yield webtest.TestApp(create_user_app(Settings(), store))
    finally:
        store.close()


def shape(path: str) -> str:
    """A path with its parameters blanked: `/user/<user_id:re:…>` and `/user/{id}` alike."""
    return re.sub(r"<[^>]+>|\{[^}]+\}", "{}", path)


def test_the_reference_shows_the_document_the_server_serves(user_app: webtest.TestApp) -> None:
    served = user_app.get("/-/user-api/openapi.json", headers={"Accept": "application/json"}).json
    assert served == reference.openapi_document()


def test_every_route_of_the_user_service_has_an_entry(user_app: webtest.TestApp) -> None:
    page = reference.user_api_reference()
    documented = {(method, shape(path)) for method, path in re.findall(r"^### (GET|PUT|POST|PATCH|DELETE) (\S+)$", page, re.MULTILINE)}
    answered = {(route.method, shape(route.rule)) for route in user_app.app.routes}
    assert len(answered) >= 14
    assert answered <= documented
    for name in reference.openapi_document()["components"]["schemas"]:
        assert f"\n### {name}\n" in page


def test_an_operation_without_a_summary_stops_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    document = reference.openapi_document()
    document["paths"]["/user"]["get"].pop("summary")
    monkeypatch.setattr(reference, "openapi_document", lambda: document)
    with pytest.raises(MissingDescription) as raised:
        reference.user_api_reference()
    assert raised.value.names == ("GET /user",)


def test_every_npm_route_has_an_entry_with_what_it_is_for() -> None:
    page = reference.npm_routes_reference()
    lines = page.splitlines()
    for route in ROUTES:
        row = next((line for line in lines if line.startswith(f"| {route.method} | `{reference.route_path(route.rule)}` |")), None)
        assert row is not None, route
        assert route.handler.__name__ in row and len(row.split("|")[3].strip()) > 10


@pytest.mark.parametrize(
    ("rule", "shown"),
    [
        ("/-/user/<username:couch>/-rev/<rev>", "/-/user/org.couchdb.user:{username}/-rev/{rev}"),
        ("/<name:pkg>/-/<filename:re:.+\\.tgz>/-rev/<rev>", "/{name}/-/{filename}/-rev/{rev}"),
        ("/<name:pkg>/<tag:re:[^/\\-][^/]*>", "/{name}/{tag}"),
    ],
)
def test_bottle_rules_are_shown_as_paths(rule: str, shown: str) -> None:
    assert reference.route_path(rule) == shown


@pytest.mark.parametrize(("drop", "add"), [("GET /-/ping", None), ("", {"GET /-/no-such-route": "gone"})])
def test_a_route_without_one_description_stops_the_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, drop: str, add: dict[str, str] | None
) -> None:
    edit_descriptions(tmp_path, monkeypatch, reference, "ROUTE_DESCRIPTIONS_FILE", drop, add)
    with pytest.raises(MissingDescription) as raised:
        reference.npm_routes_reference()
    assert raised.value.names[0].startswith(drop or "GET /-/no-such-route (no such route")
