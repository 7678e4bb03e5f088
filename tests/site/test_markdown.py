"""README rendering: Markdown features survive, anything executable does not."""

from __future__ import annotations

import subprocess
import sys
from html.parser import HTMLParser

import pytest

from registry_gen.markdown import RepositoryFiles, render_readme, repository_files

HOSTILE = [
    "<script>window.__pwned = 1</script>",
    '<img src="x" onerror="window.__pwned = 1">',
    "[click me](javascript:window.__pwned=1)",
    '<a href="JaVaScRiPt:window.__pwned=1">mixed case</a>',
    '<a href="jav&#x09;ascript:window.__pwned=1">entity tab</a>',
    '<a href="data:text/html,<script>window.__pwned=1</script>">data</a>',
    '<iframe src="https://example.org/"></iframe>',
    '<svg onload="window.__pwned=1"><circle r="4"/></svg>',
    "<style>body { display: none }</style>",
    '<div style="position:fixed;inset:0">overlay</div>',
    '<form action="https://example.org/"><input name="password"></form>',
    '<object data="x.swf"></object><embed src="x.swf">',
    "<body onload=\"window.__pwned=1\">",
    '<a href="vbscript:msgbox(1)">vb</a>',
    '<math><mtext><table><mglyph><style><img src=x onerror="window.__pwned=1">',
]


class _Inspector(HTMLParser):
    """Collects what could run: tags, event-handler attributes, and URLs with their schemes."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.handlers: list[str] = []
        self.urls: list[str] = []
        self.styles: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        for name, value in attrs:
            if name.startswith("on"):
                self.handlers.append(name)
            if name == "style":
                self.styles.append(value or "")
            if name in ("href", "src", "action", "formaction", "data", "srcset", "xlink:href"):
                self.urls.append((value or "").strip())


def inspect(html: str) -> _Inspector:
    inspector = _Inspector()
    inspector.feed(html)
    inspector.close()
    return inspector


GITHUB = repository_files("https://github.com/acme/widget-kit", "packages/kit")


@pytest.mark.parametrize("files", [None, GITHUB], ids=["no-repository", "github-repository"])
@pytest.mark.parametrize("snippet", HOSTILE)
def test_hostile_html_renders_inert(snippet: str, files: RepositoryFiles | None) -> None:
    html = str(render_readme(f"# Title\n\n{snippet}\n\nafter\n", "README.md", files))
    found = inspect(html)
    assert not found.tags & {"script", "style", "iframe", "svg", "math", "form", "input", "object", "embed", "body"}, html
    assert found.handlers == [] and found.styles == [], html
    for url in found.urls:
        assert url.startswith(("https://", "http://", "mailto:")) or ":" not in url.split("/")[0], url
    if "<style>" not in snippet:  # a stray <style> swallows the rest as its (dropped) content
        assert "after" in html  # the rest of the README survives


def test_markdown_features_render() -> None:
    text = "\n".join(
        [
            "# Widget",
            "",
            "Some *emphasis*, **strong**, `code` and a [link](https://example.org/docs).",
            "",
            "| option | default |",
            "| --- | --- |",
            "| size | 3 |",
            "",
            "```js",
            "const x = '<b>';",
            "```",
            "",
            '<p align="center"><img src="https://example.org/logo.png" alt="logo" width="120"></p>',
            "",
            "<details><summary>More</summary>Hidden text</details>",
            "",
            "~~old~~",
        ]
    )
    html = str(render_readme(text, "README.md"))
    assert "<h1>Widget</h1>" in html
    assert "<em>emphasis</em>" in html and "<strong>strong</strong>" in html
    assert '<a href="https://example.org/docs" rel="nofollow noopener noreferrer">link</a>' in html
    assert "<table>" in html and "<td>size</td>" in html
    assert '<code class="language-js">' in html and "&lt;b&gt;" in html
    assert '<p align="center"><img src="https://example.org/logo.png" alt="logo" width="120"></p>' in html
    assert "<details><summary>More</summary>" in html
    assert "<del>old</del>" in html  # GFM strikethrough, as cmark-gfm spells it


def test_free_classes_are_dropped_but_code_languages_kept() -> None:
    html = str(render_readme('<code class="notice language-c">x</code> <span class="notice-warn">y</span>', "README.md"))
    assert 'class="language-c"' in html
    assert "notice" not in html


@pytest.mark.parametrize("filename", ["README.txt", "README.rst", "readme.adoc"])
def test_plain_text_readmes_are_shown_verbatim(filename: str) -> None:
    html = str(render_readme("Title\n=====\n\n<script>x</script> *not emphasis*", filename))
    assert html.startswith('<pre class="readme-text">')
    assert "&lt;script&gt;" in html and "<em>" not in html


@pytest.mark.parametrize("text", [None, "", "   \n"])
def test_missing_readme_is_empty(text: str | None) -> None:
    assert str(render_readme(text, "README.md")) == ""


def test_bare_urls_are_links_and_task_lists_show_their_state() -> None:
    html = str(render_readme("See https://example.org/docs and www.example.com.\n\n- [x] shipped\n- [ ] next\n", "README.md"))
    assert '<a href="https://example.org/docs" rel="nofollow noopener noreferrer">https://example.org/docs</a>' in html
    assert '<a href="http://www.example.com" rel="nofollow noopener noreferrer">www.example.com</a>' in html
    assert '<li><span class="task task-done">\u2611</span> shipped</li>' in html
    assert '<li><span class="task">\u2610</span> next</li>' in html
    assert "<input" not in html


def test_hand_written_inputs_stay_dropped() -> None:
    html = str(render_readme('<input type="text" name="password" value="x"> and <input type="checkbox">', "README.md"))
    assert "<input" not in html and "password" not in html


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        ("![logo](docs/logo.png)", '<img src="https://raw.githubusercontent.com/acme/widget-kit/HEAD/packages/kit/docs/logo.png" alt="logo">'),
        ("![logo](./logo.png)", 'src="https://raw.githubusercontent.com/acme/widget-kit/HEAD/packages/kit/logo.png"'),
        ("![logo](../../shared/logo.png)", 'src="https://raw.githubusercontent.com/acme/widget-kit/HEAD/shared/logo.png"'),
        ("![logo](/assets/logo.png)", 'src="https://raw.githubusercontent.com/acme/widget-kit/HEAD/assets/logo.png"'),
        ('<img src="img/a b.png">', 'src="https://raw.githubusercontent.com/acme/widget-kit/HEAD/packages/kit/img/a%20b.png"'),
        ("[guide](docs/guide.md#setup)", 'href="https://github.com/acme/widget-kit/blob/HEAD/packages/kit/docs/guide.md#setup"'),
        ("[licence](LICENSE?plain=1)", 'href="https://github.com/acme/widget-kit/blob/HEAD/packages/kit/LICENSE?plain=1"'),
        ("[usage](#usage)", 'href="#usage"'),
        ("[site](https://example.org/x.png)", 'href="https://example.org/x.png"'),
        ("![remote](https://example.org/x.png)", 'src="https://example.org/x.png"'),
        ("[mail](mailto:a@example.org)", 'href="mailto:a@example.org"'),
    ],
)
def test_relative_urls_resolve_against_the_repository_like_npmjs(markdown: str, expected: str) -> None:
    assert expected in str(render_readme(markdown, "README.md", GITHUB))


def test_repository_hosts_and_unknown_hosts() -> None:
    gitlab = repository_files("https://gitlab.com/acme/kit.git")
    assert gitlab is not None
    assert 'src="https://gitlab.com/acme/kit/-/raw/HEAD/a.png"' in str(render_readme("![a](a.png)", "README.md", gitlab))
    assert 'href="https://gitlab.com/acme/kit/-/blob/HEAD/b.md"' in str(render_readme("[b](b.md)", "README.md", gitlab))
    assert repository_files("https://git.example.org/acme/kit") is None
    assert repository_files("https://github.com/acme") is None
    assert repository_files(None) is None
    # A directory trying to climb out of the repository is ignored, not followed.
    assert repository_files("https://github.com/acme/kit", "../../etc") == repository_files("https://github.com/acme/kit")
    # Without a known repository, relative URLs are left as they are.
    assert 'src="docs/logo.png"' in str(render_readme("![logo](docs/logo.png)", "README.md"))


def test_rendering_frees_what_cmark_gfm_allocates() -> None:
    """cmarkgfm's one-call renderer frees neither the syntax tree nor the HTML (~1 MB per 20 KB
    README): a worker writing thousands of packages grew to 2 GB and `serve` grew with every
    publish. 1,500 renders of a 20 KB README must not grow the process by more than a few MB of
    what one render needs (the leak would be ~1.5 GB)."""
    script = (
        "import resource, sys\n"
        "from registry_gen.markdown import markdown_to_html\n"
        "text = '# T\\n\\n' + 'Some *text*, `code`, https://x.y and | a |\\n|---|\\n| 1 |\\n\\n' * 300\n"
        "markdown_to_html(text)\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "for i in range(1500):\n"
        "    markdown_to_html(text + str(i))\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n"
    )
    grown_kb = int(subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True).stdout)
    assert grown_kb < 64 * 1024, f"grew by {grown_kb // 1024} MB over 1,500 renders"
