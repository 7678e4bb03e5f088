"""Issue 26: a public package's page never names a private package to anonymous visitors.

A static page is one file for every reader, so its Dependents list, its dependency links and its
types link name only packages anyone may read (a private dependency keeps its name, which the
public package's own document shows, but not a link into this registry). Checked on the built
files after a full build and after an incremental one, and anonymously through `registry-gen serve`."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from registry_gen.access import parse_rules
from registry_gen.build import run_build
from registry_gen.settings import Settings
from tests.registry_api.helpers import RegistryProcess, http
from tests.support import make_tarball

RULES = {"@internal/*": {"read": "authenticated"}, "secret-*": {"read": ["group-a"]}, "@types/plain-typed": {"read": "authenticated"}}
RULES_YAML = "packages:\n  '@internal/*': {read: authenticated}\n  'secret-*': {read: [group-a]}\n"
PRIVATE = ("secret-tool", "@internal/app", "secret-late", "@types/plain-typed")


def _content(content: Path) -> None:
    make_tarball(content, "plain-lib", "1.0.0")
    make_tarball(content, "plain-app", "1.0.0", dependencies={"plain-lib": "^1.0.0", "secret-tool": "^1.0.0"})
    make_tarball(content, "secret-tool", "1.0.0", dependencies={"plain-lib": "^1.0.0"})
    make_tarball(content, "@internal/app", "1.0.0", dependencies={"plain-lib": "^1.0.0", "secret-tool": "*"}, filename="internal-app-1.0.0.tgz")


def _page(out: Path, name: str, version: str | None = None) -> str:
    folder = out / "-/web/package" / name
    return ((folder / "v" / version if version else folder) / "index.html").read_text()


def _dependents(page: str) -> list[str]:
    section = page.split('id="dependents"', 1)[1].split("</section>", 1)[0]
    return re.findall(r'href="[^"]*package/([^"]+?)/index.html"', section)


def _private_links(page: str) -> list[str]:
    return [name for name in PRIVATE if f"package/{name}/index.html" in page]


def test_pages_list_and_link_only_what_anyone_may_read(settings: Settings) -> None:
    ruled = dataclasses.replace(settings, packages=parse_rules(RULES))
    _content(ruled.content_dir)
    assert run_build(ruled).errors == []
    out = ruled.out_dir
    assert _dependents(_page(out, "plain-lib")) == ["plain-app"]
    app = _page(out, "plain-app")
    assert "secret-tool" in app and _private_links(app) == []  # named, as its package.json does; not linked
    assert _private_links(_page(out, "plain-app", "1.0.0")) == []
    assert "package/plain-lib/index.html" in app  # public dependencies still link
    # An incremental build: a private dependent arrives, and a public package's private types.
    make_tarball(ruled.content_dir, "secret-late", "1.0.0", dependencies={"plain-lib": "*"})
    make_tarball(ruled.content_dir, "@types/plain-lib", "1.0.0")
    make_tarball(ruled.content_dir, "plain-typed", "1.0.0", dependencies={"plain-lib": "*"})
    make_tarball(ruled.content_dir, "@types/plain-typed", "1.0.0")
    assert run_build(ruled).errors == []
    lib = _page(out, "plain-lib")
    assert _dependents(lib) == ["plain-app", "plain-typed"] and _private_links(lib) == []
    assert "package/@types/plain-lib/index.html" in lib  # a public types package still links
    assert _private_links(_page(out, "plain-typed")) == [] and _private_links(_page(out, "plain-typed", "1.0.0")) == []
    # A private package's page is a static page too: it names no private package either.
    assert _dependents(_page(out, "secret-tool")) == ["plain-app"]


def test_serve_shows_anonymous_visitors_no_private_dependent(tmp_path: Path) -> None:
    server = RegistryProcess(tmp_path)
    server.content.mkdir()
    (tmp_path / "registry.yaml").write_text(RULES_YAML)
    _content(server.content)
    server.start()
    try:
        for path in ("-/web/package/plain-lib/", "-/web/package/plain-app/", "-/web/package/plain-app/v/1.0.0/"):
            page = http("GET", server.base + path)
            assert page.status == 200
            assert _private_links(page.body.decode()) == [], path
        assert _dependents(http("GET", server.base + "-/web/package/plain-lib/").body.decode()) == ["plain-app"]
        assert http("GET", server.base + "-/web/package/secret-tool/").status == 401
    finally:
        server.stop()
