"""The Code tab in a real Chromium: a version's files read in the browser from its tarball.

The tree holds express's real tarball (from the real-world corpus, else fetched alone), a package
of every kind of file the tab describes, and a tarball past the tab's cap. Hostile tarballs, which
the build would refuse, are served in place of a real one (page.route): the reader in the browser
must stay safe whatever bytes a host serves.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, Route, expect

from registry_gen import site
from registry_gen.build import run_build
from registry_gen.names import tarball_path
from registry_gen.settings import Settings
from tests.site.test_accessibility import EXPRESS, real_tarball
from tests.registry_api.helpers import RegistryProcess, add_user
from tests.site.test_browser import browser, page, web_url  # noqa: F401 (fixtures)
from tests.support import make_tarball, static_server

pytestmark = pytest.mark.slow

BIG_BYTES = 50 * 1000 * 1000  # the acceptance's "50 MB tarball"
PNG_BYTES = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256))
HTML_IN_A_FILE = "<script>window.__pwned = 'script'</script>\n</code></pre><img src=x onerror=\"window.__pwned = 'img'\">\n"
LONG_TEXT = ("x" * 99 + "\n") * (site.CODE_TAB_LIMITS["shown"] // 100 + 10)


def tarball_members(path: Path) -> dict[str, bytes]:
    """Path below the top folder -> bytes, of every regular file (Python's tarfile, the reference)."""
    with tarfile.open(path) as archive:
        return {m.name.split("/", 1)[1]: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}  # type: ignore[union-attr]


def big_tarball(folder: Path) -> Path:
    """A valid package whose tarball is 50 MB: random bytes do not compress."""
    target = folder / "big-blob" / "big-blob-1.0.0.tgz"
    target.parent.mkdir(parents=True)
    with tarfile.open(target, "w:gz", compresslevel=1) as archive:
        for name, data in (("package/package.json", json.dumps({"name": "big-blob", "version": "1.0.0"}).encode()), ("package/blob.bin", os.urandom(BIG_BYTES))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return target


@pytest.fixture(scope="module")
def code_tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """express, a package of every kind of file and a 50 MB one, built and served: (url, content)."""
    root = tmp_path_factory.mktemp("code-tab")
    content, out = root / "content", root / "public"
    (content / "express").mkdir(parents=True)
    out.mkdir()
    shutil.copyfile(real_tarball(EXPRESS), content / "express" / EXPRESS.filename)
    make_tarball(
        content / "kinds",
        "kinds",
        "1.0.0",
        files={
            "index.js": "module.exports = 1;\n",
            "logo.png": PNG_BYTES,
            "notes/long.txt": LONG_TEXT,
            "notes/ünïcode näme.md": "# Grüße\n",
            "page.html": HTML_IN_A_FILE,
            "empty.txt": "",
        },
    )
    big_tarball(content)
    with static_server(out) as url:
        result = run_build(Settings(content_dir=content, out_dir=out, base_url=url))
        assert not result.errors, result.errors
        yield url, content


def open_code_tab(page: Page, url: str, relative: str) -> None:
    page.goto(web_url(url, relative))
    page.locator("#tab-code").click()


def listed_paths(page: Page) -> list[str]:
    """Every file button's full path (its title), in the order shown."""
    return page.locator("#code-files .code-open").evaluate_all("buttons => buttons.map(b => b.title)")


def shown_text(page: Page) -> str:
    expect(page.locator("#code-text")).to_be_visible()
    return page.locator("#code-text code").evaluate("code => code.textContent")


def test_the_code_tab_of_express_lists_its_tarball_and_shows_its_files(code_tree: tuple[str, Path], page: Page) -> None:
    url, content = code_tree
    members = tarball_members(content / "express" / EXPRESS.filename)
    fetched: list[str] = []
    page.on("request", lambda request: fetched.append(request.url) if request.url.endswith(".tgz") else None)
    open_code_tab(page, url, f"package/express/v/{EXPRESS.version}/index.html")
    expect(page.locator("#code-status")).to_have_text(re.compile(rf"^{len(members)} files, "))
    assert sorted(listed_paths(page)) == sorted(members)
    expect(page.locator("#readme-panel")).to_be_hidden()
    expect(page).to_have_url(re.compile(r"#code$"))
    for path in ("package.json", "index.js", "lib/router/index.js"):
        page.locator(f'#code-files .code-open[title="{path}"]').click()
        expect(page.locator("#code-file")).to_have_text(path)
        assert shown_text(page) == members[path].decode()
        expect(page.locator(f'#code-files .code-open[title="{path}"]')).to_have_attribute("aria-current", "true")
    expect(page).to_have_url(re.compile(r"#code/lib/router/index\.js$"))
    # The tarball came from this tree, as the page names it, and nothing else did.
    assert set(fetched) == {url + tarball_path("express", EXPRESS.version)}
    # A link to a file opens the tab on it; the package page reads its latest version.
    page.goto(web_url(url, "package/express/index.html#code/lib/router/index.js"))
    expect(page.locator("#code-file")).to_have_text("lib/router/index.js")
    assert shown_text(page) == members["lib/router/index.js"].decode()
    expect(page.locator("#tab-code")).to_have_attribute("aria-selected", "true")
    assert page.problems == []  # type: ignore[attr-defined]


def test_binary_huge_empty_and_html_files_are_described_or_shown_as_text(code_tree: tuple[str, Path], page: Page) -> None:
    url, _ = code_tree
    open_code_tab(page, url, "package/kinds/v/1.0.0/index.html")
    expect(page.locator("#code-status")).to_have_text(re.compile(r"^7 files, "))
    page.locator('.code-open[title="logo.png"]').click()
    expect(page.locator("#code-about")).to_have_text(f"{len(PNG_BYTES)} B, binary (not UTF-8 text): not shown.")
    expect(page.locator("#code-text")).to_be_hidden()
    page.locator('.code-open[title="notes/long.txt"]').click()
    expect(page.locator("#code-about")).to_contain_text("too large to show here")
    expect(page.locator("#code-text")).to_be_hidden()
    page.locator('.code-open[title="empty.txt"]').click()
    expect(page.locator("#code-about")).to_have_text("0 B, 0 lines.")
    page.locator('.code-open[title="notes/ünïcode näme.md"]').click()
    assert shown_text(page) == "# Grüße\n"
    page.locator('.code-open[title="page.html"]').click()
    assert shown_text(page) == HTML_IN_A_FILE
    assert page.locator("#code script, #code img").count() == 0
    assert page.evaluate("() => window.__pwned") is None
    assert page.problems == []  # type: ignore[attr-defined]


def test_a_50_mb_tarball_is_refused_politely_without_downloading_it(code_tree: tuple[str, Path], page: Page) -> None:
    url, content = code_tree
    size = (content / "big-blob" / "big-blob-1.0.0.tgz").stat().st_size
    assert size > BIG_BYTES
    fetched: list[str] = []
    page.on("request", lambda request: fetched.append(request.url) if request.url.endswith(".tgz") else None)
    open_code_tab(page, url, "package/big-blob/v/1.0.0/index.html")
    expect(page.locator("#code-status")).to_have_text(
        f"This tarball is {site.format_size(size)}: the Code tab reads tarballs of up to "
        f"{site.format_size(site.CODE_TAB_LIMITS['tarball'])}. Download the tarball to read its files."
    )
    expect(page.locator("#code").get_by_role("link", name="Download the tarball")).to_be_visible()
    assert fetched == []  # the page knew the size
    assert page.problems == []  # type: ignore[attr-defined]


def test_a_tarball_whose_size_the_page_does_not_know_is_refused_from_its_content_length(code_tree: tuple[str, Path], page: Page) -> None:
    """A page that does not name the size (a theme's own template, say) of a tarball past the
    cap: the response's length is checked before its body is read."""
    url, content = code_tree
    size = (content / "big-blob" / "big-blob-1.0.0.tgz").stat().st_size
    version_page = web_url(url, "package/kinds/v/1.0.0/index.html")

    def without_size(route: Route) -> None:
        html = route.fetch().text()
        html, count = re.subn(r'data-tarball="([^"]*)kinds/-/kinds-1\.0\.0\.tgz" data-tarball-bytes="\d+"', r'data-tarball="\1big-blob/-/big-blob-1.0.0.tgz" data-tarball-bytes=""', html)
        assert count == 1
        route.fulfill(body=html, content_type="text/html; charset=utf-8")

    page.route(version_page, without_size)
    page.goto(version_page)
    page.locator("#tab-code").click()
    expect(page.locator("#code-status")).to_contain_text(f"This tarball is {site.format_size(size)}: the Code tab reads tarballs of up to")
    expect(page.locator("#code-files")).to_be_hidden()


def tar_entry(name: str, data: bytes, tar_format: int = tarfile.USTAR_FORMAT, **fields: object) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for key, value in fields.items():
        setattr(info, key, value)
    return info.tobuf(tar_format, "utf-8", "surrogateescape") + data + b"\0" * (-len(data) % 512)


def hostile_tarball() -> tuple[bytes, dict[str, str]]:
    """Names that climb out or are markup, a GNU long name and a pax path, HTML and script in
    content, then an entry declaring a size of 1 TiB (base-256): the bytes, and what must show."""
    long_name = "package/" + "deep/" * 30 + "long-name.js"
    pax_name = "package/pax/" + "ü" * 120 + ".js"
    shown = {
        "../../../etc/passwd": "root:x:0:0\n",
        "<img src=x onerror=\"window.__pwned='name'\">.js": HTML_IN_A_FILE,
        long_name.split("/", 1)[1]: "gnu long name\n",
        pax_name.split("/", 1)[1]: "pax path\n",
    }
    body = b"".join(
        (
            tar_entry("package/../../../etc/passwd", shown["../../../etc/passwd"].encode()),
            tar_entry("package/<img src=x onerror=\"window.__pwned='name'\">.js", HTML_IN_A_FILE.encode()),
            tar_entry(long_name, b"gnu long name\n", tarfile.GNU_FORMAT),
            tar_entry(pax_name, b"pax path\n", tarfile.PAX_FORMAT),
        )
    )
    huge = tarfile.TarInfo("package/huge.bin")
    huge.size = 1 << 40  # GNU writes it in base-256; no data follows
    body += huge.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape") + b"\0" * 1024
    return gzip.compress(body), shown


def serve_instead(page: Page, url: str, name: str, version: str, body: bytes) -> None:
    def answer(route: Route) -> None:
        route.fulfill(body=body, content_type="application/octet-stream")

    page.route(url + tarball_path(name, version), answer)


def test_a_hostile_tarball_is_listed_and_shown_as_text_only(code_tree: tuple[str, Path], page: Page) -> None:
    url, _ = code_tree
    body, shown = hostile_tarball()
    serve_instead(page, url, "kinds", "1.0.0", body)
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    open_code_tab(page, url, "package/kinds/v/1.0.0/index.html")
    expect(page.locator("#code-status")).to_contain_text("declares a size of 1.1 TB, more than the Code tab unpacks")
    expect(page.locator("#code-status")).to_contain_text("The files before that point are listed.")
    assert sorted(listed_paths(page)) == sorted(shown)
    for path, text in shown.items():
        page.locator("#code-files .code-open").filter(has_text=path.rsplit("/", 1)[-1]).click()
        expect(page.locator("#code-file")).to_have_text(path)
        assert shown_text(page) == text
    assert page.locator("#code script, #code img, #code iframe").count() == 0
    assert page.evaluate("() => window.__pwned") is None
    assert not [u for u in requested if not u.startswith(url) or "/x" in u or "passwd" in u]
    assert page.problems == []  # type: ignore[attr-defined]


def test_a_truncated_tarball_lists_what_came_before_the_cut(code_tree: tuple[str, Path], page: Page) -> None:
    url, _ = code_tree
    files = {f"part-{n}.txt": os.urandom(40_000).hex() for n in range(6)}  # hex of random bytes: compresses only 2:1
    body = gzip.compress(b"".join(tar_entry(f"package/{name}", text.encode()) for name, text in files.items()) + b"\0" * 1024)
    serve_instead(page, url, "kinds", "1.0.0", body[: len(body) // 2])
    open_code_tab(page, url, "package/kinds/v/1.0.0/index.html")
    expect(page.locator("#code-status")).to_contain_text("truncated or damaged")
    listed = listed_paths(page)
    assert listed and set(listed) < set(files), listed
    page.locator("#code-files .code-open").first.click()
    assert shown_text(page) == files[sorted(listed)[0]]


def test_the_code_tab_by_keyboard(code_tree: tuple[str, Path], page: Page) -> None:
    """Arrow keys move between the tabs (the tab pattern of WAI-ARIA), Tab enters the panel, a
    folder opens with Enter and a file with Enter; the "N files" link opens the tab too."""
    url, content = code_tree
    page.goto(web_url(url, f"package/express/v/{EXPRESS.version}/index.html"))
    page.locator("#tab-readme").focus()
    page.keyboard.press("ArrowRight")
    expect(page.locator("#tab-code")).to_be_focused()
    expect(page.locator("#tab-code")).to_have_attribute("aria-selected", "true")
    expect(page.locator("#code-files")).to_be_visible()
    page.keyboard.press("Tab")
    expect(page.locator("#code-files summary").first).to_be_focused()
    page.keyboard.press("Enter")  # closes lib/
    expect(page.locator("#code-files details").first).not_to_have_attribute("open", "")
    page.keyboard.press("Tab")
    expect(page.locator('#code-files .code-open[title="History.md"]')).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("#code-file")).to_have_text("History.md")
    page.locator("#tab-code").focus()
    page.keyboard.press("ArrowLeft")
    expect(page.locator("#tab-readme")).to_be_focused()
    expect(page.locator("#readme")).to_be_visible()
    expect(page.locator("#code")).to_be_hidden()
    page.locator("#browse-files").click()
    expect(page.locator("#tab-code")).to_have_attribute("aria-selected", "true")
    expect(page.locator("#code")).to_be_visible()
    assert page.problems == []  # type: ignore[attr-defined]


def test_a_private_package_s_code_tab_reads_with_the_page_s_credentials(tmp_path: Path, browser: Browser) -> None:  # noqa: F811
    """Through a real `registry-gen serve` with a read rule: a reader whose browser sends a token
    (as a proxy or extension in front of the site does) sees the Code tab of a private package,
    its tarball fetched with the same credentials; the tarball alone, without them, is refused."""
    (tmp_path / "registry.yaml").write_text("signup: open\npackages:\n  'secret-*': {read: authenticated}\n")
    make_tarball(tmp_path / "content" / "secret-tool", "secret-tool", "1.0.0", files={"index.js": "module.exports = 'secret';\n"})
    process = RegistryProcess(tmp_path).start()
    try:
        token = add_user(process.base, "alice", "alice-password-1")
        version_page = web_url(process.base, "package/secret-tool/v/1.0.0/index.html")
        anonymous = browser.new_context(service_workers="block")
        try:
            assert anonymous.request.get(process.base + tarball_path("secret-tool", "1.0.0")).status == 401
        finally:
            anonymous.close()
        context = browser.new_context(service_workers="block", extra_http_headers={"Authorization": f"Bearer {token}"})
        try:
            reader = context.new_page()
            reader.goto(version_page + "#code/index.js")
            expect(reader.locator("#code-status")).to_have_text(re.compile(r"^2 files, "))
            assert shown_text(reader) == "module.exports = 'secret';\n"
        finally:
            context.close()
    finally:
        process.stop()


def test_an_old_file_list_link_opens_the_version_s_code_tab(code_tree: tuple[str, Path], page: Page) -> None:
    """Versions had a file-list page (…/v/<version>/files/); a host answers its old address with
    -/web/404.html (nginx and serve do), which sends the reader to the version's Code tab."""
    url, _ = code_tree
    not_found = page.request.get(web_url(url, "404.html")).body()
    old = web_url(url, f"package/express/v/{EXPRESS.version}/files/index.html")
    page.route(old, lambda route: route.fulfill(status=404, body=not_found, content_type="text/html; charset=utf-8"))
    page.goto(old)
    expect(page).to_have_url(web_url(url, f"package/express/v/{EXPRESS.version}/index.html#code"))
    expect(page.locator("#tab-code")).to_have_attribute("aria-selected", "true")
    expect(page.locator("#code-status")).to_have_text(re.compile(r"^\d+ files, "))
