"""Private reads: the `packages:` rules, the in-process check of `serve`, the API's decision for
nginx, the listings, and deploy's refusal."""

from __future__ import annotations

import base64
import dataclasses
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import webtest

from registry_gen.access import (
    ANONYMOUS,
    REFUSED_SPELLINGS,
    Caller,
    is_plain_request_path,
    package_of_path,
    package_of_served_path,
    parse_rules,
    read_status,
)
from registry_gen.build import run_build
from registry_gen.cli import main as registry_gen
from registry_gen.errors import ConfigError
from registry_gen.hosting import nginx_site
from registry_gen.names import is_valid_name
from registry_gen.nginx_access import NAME_PART, ReadCheck
from registry_gen.search import search_registry
from registry_gen.state import open_state
from registry_gen.settings import Settings, load_settings
from tests.support import make_tarball

RULES = {"@internal/*": {"read": "authenticated"}, "secret-*": {"read": ["group-a"]}}


def test_rules_first_match_wins_and_default_is_public() -> None:
    rules = parse_rules({**RULES, "**": {"read": "all"}})
    alice, bob, admin = Caller("alice", frozenset({"group-a"})), Caller("bob"), Caller("root", admin=True)
    assert rules.in_force
    assert rules.may_read("@internal/lib", bob) and not rules.may_read("@internal/lib", ANONYMOUS)
    assert rules.may_read("secret-tool", alice) and not rules.may_read("secret-tool", bob)
    assert rules.may_read("secret-tool", admin)
    assert rules.may_read("plain", ANONYMOUS) and rules.is_public("plain")
    assert not rules.is_public("@internal/x") and rules.is_public("@internal-other/x")  # `*` stays inside the scope
    assert not parse_rules({"**": {"read": "all"}}).in_force
    assert not parse_rules(None).in_force


@pytest.mark.parametrize(
    "bad",
    [{"x": {"read": "nobody"}}, {"x": {"read": []}}, {"x": {"write": "all"}}, {"x": "all"}, ["x"], {"a b": {"read": "all"}}],
)
def test_bad_rules_name_the_pattern(bad: object) -> None:
    with pytest.raises(ConfigError, match="packages"):
        parse_rules(bad)


def test_rules_come_from_registry_yaml(tmp_path: Path) -> None:
    (tmp_path / "registry.yaml").write_text("packages:\n  '@internal/*': {read: authenticated}\n  'secret-*': {read: [group-a]}\n")
    assert load_settings(tmp_path / "registry.yaml").packages == parse_rules(RULES)
    (tmp_path / "registry.yaml").write_text("packages:\n  'x': {read: maybe}\n")
    with pytest.raises(ConfigError, match="registry.yaml"):
        load_settings(tmp_path / "registry.yaml")


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/@internal%2flib", "@internal/lib"),
        ("/@internal%2Flib", "@internal/lib"),
        ("/@internal/lib/-/lib-1.0.0.tgz", "@internal/lib"),
        ("/secret-tool/latest", "secret-tool"),
        ("/secret-tool?write=true", "secret-tool"),
        ("/-/package/@internal/lib/dist-tags", "@internal/lib"),
        ("/-/web/package/secret-tool/index.html", "secret-tool"),
        ("/-/all", None),
        ("/-/v1/search?text=secret", None),
        ("/", None),
        ("//secret-tool", "secret-tool"),  # not a URL's authority
        ("/secret-tool#/../plain", "secret-tool"),  # nginx's path ends at the fragment
    ],
)
def test_the_package_a_path_reads(path: str, name: str | None) -> None:
    assert package_of_path(path) == name


@pytest.mark.parametrize(
    ("path", "name"),
    [("/@internal/lib/-/lib-1.0.0.tgz", "@internal/lib"), ("/@internal%2flib", None), ("/secret-tool?x", "secret-tool?x"),
     ("/-/web/package/@internal/lib/v/1.0.0/", "@internal/lib"), ("/-/package/secret-tool/dist-tags", "secret-tool")],
)  # fmt: skip
def test_a_served_path_is_taken_as_it_is(path: str, name: str | None) -> None:
    """Decoded already (nginx's $uri, serve's PATH_INFO): nothing is decoded or cut again."""
    assert package_of_served_path(path) == name


@pytest.mark.parametrize(
    "uri",
    ["/x/..%2fsecret-tool", "/x/%2E%2e/secret-tool", "/x/../secret-tool", "/./secret-tool", "//secret-tool", "/x/.hidden",
     "/x%2f..%2fsecret-tool", "/@s%2fp%2fq", "/x%2Fy", "/@s%2f/p", "/x/%0d%0aX:%201", "/x#y", "/-/all/%7f"],
)  # fmt: skip
def test_spellings_that_could_serve_another_path_are_refused(uri: str) -> None:
    assert not is_plain_request_path(uri)


@pytest.mark.parametrize(
    "uri",
    ["/secret-tool", "/@s%2fp", "/@s%2Fp", "/%40s%2fp", "/@s/p/-/p-1.0.0.tgz", "/-/package/@s%2fp/dist-tags",
     "/-/web/package/@s%2Fp/", "/x/-/x-1.0.0+b.1.tgz", "/-/v1/search?text=../a%2fb//c", "/x/%252e%252e/y", "/JSONStream"],
)  # fmt: skip
def test_every_client_spelling_is_plain(uri: str) -> None:
    assert is_plain_request_path(uri)


def test_status_is_401_without_a_token_and_404_with_one_lacking_access() -> None:
    rules = parse_rules(RULES)
    assert read_status(rules, "/secret-tool", ANONYMOUS) == 401
    assert read_status(rules, "/secret-tool", Caller("bob")) == 404
    assert read_status(rules, "/secret-tool", Caller("alice", frozenset({"group-a"}))) == 200
    assert read_status(rules, "/-/all", ANONYMOUS) == 200


# ---------------------------------------------------------------- serve and the API


@dataclasses.dataclass
class Registry:
    app: webtest.TestApp
    settings: Settings
    tokens: dict[str, str]


@pytest.fixture
def registry(settings: Settings) -> Iterator[Registry]:
    from user_api.server import create_server_app
    from user_api.store import open_user_store

    make_tarball(settings.content_dir, "@internal/lib", "1.0.0")
    make_tarball(settings.content_dir, "secret-tool", "1.0.0")
    make_tarball(settings.content_dir, "plain", "1.0.0")
    ruled = dataclasses.replace(settings, packages=parse_rules(RULES))
    assert run_build(ruled).errors == []
    store = open_user_store(ruled)
    tokens = {}
    for name in ("alice", "bob"):
        user = store.create_user(name, f"{name}-password-1")
        tokens[name] = store.create_token(user.id)[0]
        if name == "alice":
            store.change_groups(user.id, add=["group-a"])
    try:
        yield Registry(webtest.TestApp(create_server_app(ruled, store)), ruled, tokens)
    finally:
        store.close()


def _get(registry: Registry, path: str, who: str | None, **headers: str) -> webtest.TestResponse:
    if who:
        headers["Authorization"] = f"Bearer {registry.tokens[who]}"
    return registry.app.get(path, headers=headers, expect_errors=True)


@pytest.mark.parametrize(
    ("path", "who", "status"),
    [
        ("/@internal/lib", None, 401),
        ("/@internal/lib/-/lib-1.0.0.tgz", None, 401),
        ("/@internal/lib", "bob", 200),
        ("/secret-tool", "bob", 404),
        ("/secret-tool/-/secret-tool-1.0.0.tgz", "bob", 404),
        ("/-/web/package/secret-tool/", "bob", 404),
        ("/secret-tool", "alice", 200),
        ("/secret-tool/-/secret-tool-1.0.0.tgz", "alice", 200),
        ("/plain", None, 200),
    ],
)
def test_serve_applies_the_rules(registry: Registry, path: str, who: str | None, status: int) -> None:
    reply = _get(registry, path, who)
    assert reply.status_int == status
    if status == 401:
        assert reply.headers["WWW-Authenticate"].startswith("Bearer")
    if status == 404:
        assert reply.json == {"error": "not found"}  # the same answer as a package that does not exist
        assert _get(registry, "/no-such-package", who).json == reply.json


def test_a_revoked_or_unknown_token_is_anonymous(registry: Registry) -> None:
    assert registry.app.get("/@internal/lib", headers={"Authorization": "Bearer nope"}, expect_errors=True).status_int == 401


def test_the_read_check_answers_nginx(registry: Registry) -> None:
    def decision(uri: str, who: str | None) -> int:
        return _get(registry, "/-/registry-gen/read-access", who, **{"X-Original-URI": uri}).status_int

    assert decision("/@internal%2flib", None) == 401
    assert decision("/secret-tool/-/secret-tool-1.0.0.tgz", "bob") == 403  # nginx serves it as 404
    assert decision("/secret-tool", "alice") == 200
    assert decision("/plain", None) == 200
    assert decision("/plain/..%2fsecret-tool", "alice") == 403  # a config without the served path: refused spellings


def test_the_read_check_decides_on_the_path_nginx_serves(registry: Registry) -> None:
    def decision(served: str | None, sent: str | None, who: str | None = None) -> int:
        headers = {name: value for name, value in (("X-Registry-Gen-Path", served), ("X-Original-URI", sent)) if value is not None}
        return _get(registry, "/-/registry-gen/read-access", who, **headers).status_int

    assert decision("/@internal/lib", "/@internal%2flib") == 401  # decoded: the path served
    assert decision("/@internal/lib", "/@internal%2flib", "bob") == 200
    assert decision("/secret-tool", "/plain/%2e%2e/secret-tool", "alice") == 403  # refused as sent, whoever asks
    assert decision("/plain/../secret-tool", "/plain", "alice") == 403  # nginx resolves dot segments: never decided
    assert decision("/secret-tool", None) == 401 and decision("/plain", None) == 200
    assert decision(None, None) == 403  # a question without a path: nothing is allowed

    def kept(served: str | None, sent: str) -> bool:  # whether nginx may cache the answer
        headers = {"X-Original-URI": sent, **({"X-Registry-Gen-Path": served} if served else {})}
        return "X-Accel-Expires" not in _get(registry, "/-/registry-gen/read-access", None, **headers).headers

    assert kept("/secret-tool", "/secret-tool") and kept("/plain", "/plain")
    assert not kept("/secret-tool", "/plain/..%2fsecret-tool")  # a refusal is about no package
    # A config without the served path keys by the URI as sent: none of its answers may be kept.
    assert not kept(None, "/plain") and not kept(None, "/secret-tool")


def test_listings_show_only_what_everyone_may_read(registry: Registry) -> None:
    out = registry.settings.out_dir
    everything = [(out / "-/all/index.html").read_text(), (out / "-/search.json").read_text(),
                  (out / "-/web/index.html").read_text()]  # fmt: skip
    shards = [path.read_text() for path in (out / "-/web/search").glob("*.json")]
    assert all("plain" in text for text in everything) and any("plain" in text for text in shards)
    assert not any("secret-tool" in text or "@internal/lib" in text for text in everything + shards)
    # What the API searches per caller sits in the build's state, beside the tree (never served).
    hidden = search_registry(open_state(registry.settings), "secret", size=20, offset=0, listed_only=False)
    assert [o["package"]["name"] for o in hidden["objects"]] == ["secret-tool"]
    assert not (out / ".registry-gen").exists()


@pytest.mark.parametrize(
    ("who", "names"),
    [(None, []), ("bob", ["@internal/lib"]), ("alice", ["@internal/lib", "secret-tool"])],
)
def test_npm_search_shows_each_caller_what_they_may_read(registry: Registry, who: str | None, names: list[str]) -> None:
    found = _get(registry, "/-/v1/search?text=test+package", who).json
    listed = sorted(o["package"]["name"] for o in found["objects"])
    assert listed == sorted(["plain", *names])
    assert _get(registry, "/-/v1/search?size=x", who).status_int == 400


# ---------------------------------------------------------------- nginx config and deploy


def test_nginx_config_checks_reads_through_the_api(tmp_path: Path) -> None:
    site = nginx_site(tmp_path, "127.0.0.1:8080", "127.0.0.1:4874", read_check=ReadCheck("/var/cache/x", 7))
    assert "auth_request /-/registry-gen/read-access;" in site and "proxy_cache_valid 200 401 403 7s;" in site
    assert "error_page 403 =404 @registry_gen_404;" in site
    assert "proxy_set_header X-Registry-Gen-Path $registry_gen_read_path;" in site  # $uri, the path served
    assert all(f'"~^[^?]*(?:{pattern})" 1;' in site for pattern in REFUSED_SPELLINGS)
    with pytest.raises(ValueError, match="API"):
        nginx_site(tmp_path, "127.0.0.1:8080", None, read_check=ReadCheck("/var/cache/x"))
    assert "auth_request" not in nginx_site(tmp_path, "127.0.0.1:8080", "127.0.0.1:4874")


def test_the_nginx_cache_key_takes_every_character_of_a_package_name() -> None:
    """A name nginx cannot key is refused (so keys hold no space): it must be no name we host."""
    for code in range(32, 127):
        name = "a" + chr(code)
        assert (re.fullmatch(NAME_PART, name) is not None) == is_valid_name(name, legacy=True), name


def test_deploy_refuses_private_packages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "content").mkdir()
    make_tarball(tmp_path / "content", "secret-tool", "1.0.0")
    (tmp_path / "registry.yaml").write_text("content_dir: content\nout_dir: public\npackages:\n  'secret-*': {read: [group-a]}\n")
    assert registry_gen(["build", "-c", str(tmp_path / "registry.yaml")]) == 0
    code = registry_gen(["deploy", "s3://bucket", "--endpoint-url", "http://127.0.0.1:9", "-c", str(tmp_path / "registry.yaml")])
    assert code == 1
    assert "secret-tool" in capsys.readouterr().err  # refused before talking to any bucket


def test_reads_honour_token_networks_and_take_no_passwords(registry: Registry) -> None:
    from user_api.store import open_user_store

    store = open_user_store(registry.settings)
    try:
        user = store.get_by_username("bob")
        assert user is not None
        limited = store.create_token(user.id, cidr=["10.0.0.0/8"])[0]
    finally:
        store.close()
    headers = {"Authorization": f"Bearer {limited}"}
    assert registry.app.get("/@internal/lib", headers=headers, extra_environ={"REMOTE_ADDR": "127.0.0.1"}, expect_errors=True).status_int == 401
    assert registry.app.get("/@internal/lib", headers=headers, extra_environ={"REMOTE_ADDR": "10.1.2.3"}).status_int == 200
    basic = {"Authorization": "Basic " + base64.b64encode(b"bob:bob-password-1").decode()}
    assert registry.app.get("/@internal/lib", headers=basic, expect_errors=True).status_int == 401
