"""README rendering: Markdown features survive, anything executable does not."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from registry_gen.markdown import render_readme

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


@pytest.mark.parametrize("snippet", HOSTILE)
def test_hostile_html_renders_inert(snippet: str) -> None:
    html = str(render_readme(f"# Title\n\n{snippet}\n\nafter\n", "README.md"))
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
    assert "<s>old</s>" in html


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
