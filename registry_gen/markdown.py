"""README text -> safe HTML for the package pages (a pure function of the text).

markdown-it-py renders CommonMark (plus GFM tables and strikethrough) with raw HTML allowed,
because real READMEs lean on it (centred logos, badges, <details>). Everything then goes
through nh3 (ammonia), an allow-list sanitiser: scripts, styles, event handlers, forms,
iframes and any URL scheme other than http(s)/mailto are dropped, so a hostile README renders
inert. Sanitising last means no Markdown trick (reference links, autolinks, entities) can
smuggle something past it.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import PurePosixPath

import nh3
from markdown_it import MarkdownIt
from markupsafe import Markup, escape

# README files in these formats are shown verbatim: rendering them as Markdown garbles them.
PLAIN_TEXT_SUFFIXES = frozenset({".txt", ".rst", ".adoc", ".asciidoc", ".org", ".textile", ".rdoc"})
SAFE_URL_SCHEMES = frozenset({"http", "https", "mailto"})
# Links out of the README must not hand the registry's URL (private hostnames) to other sites.
LINK_REL = "nofollow noopener noreferrer"
# Tags removed together with their content; everything else not allowed keeps its text.
DROPPED_WITH_CONTENT = frozenset({"script", "style", "template", "noscript", "iframe", "object", "embed", "svg", "math"})


@lru_cache(maxsize=1)
def _renderer() -> MarkdownIt:
    return MarkdownIt("commonmark", {"html": True, "linkify": False, "typographer": False}).enable(
        ["table", "strikethrough"]
    )


def _allowed_attributes() -> dict[str, set[str]]:
    attributes = {tag: set(names) for tag, names in nh3.ALLOWED_ATTRIBUTES.items()}
    # GitHub-style READMEs centre logos with align; keep the (harmless) presentational bits.
    for tag in ("p", "div", "h1", "h2", "h3", "h4", "h5", "h6"):
        attributes.setdefault(tag, set()).add("align")
    attributes.setdefault("a", set()).add("title")
    attributes.setdefault("img", set()).add("title")
    attributes.setdefault("details", set()).add("open")
    attributes.setdefault("code", set()).add("class")  # language-xyz from fenced code blocks
    return attributes


def _filter_attribute(tag: str, attribute: str, value: str) -> str | None:
    # A free class would let a README dress itself up as the page's own notices; keep only
    # the language-xyz marker of fenced code.
    if attribute == "class":
        kept = [c for c in value.split() if re.fullmatch(r"language-[\w+#.-]{1,40}", c)]
        return " ".join(kept) or None
    return value


def sanitize_html(html: str) -> str:
    """Allow-list sanitising of an HTML fragment (nh3/ammonia)."""
    return nh3.clean(
        html,
        tags=set(nh3.ALLOWED_TAGS) - {"map", "area"},
        clean_content_tags=set(DROPPED_WITH_CONTENT),
        attributes=_allowed_attributes(),
        attribute_filter=_filter_attribute,
        url_schemes=set(SAFE_URL_SCHEMES),
        link_rel=LINK_REL,
        strip_comments=True,
    )


def is_plain_text(filename: str | None) -> bool:
    return filename is not None and PurePosixPath(filename).suffix.lower() in PLAIN_TEXT_SUFFIXES


def render_readme(text: str | None, filename: str | None = None) -> Markup:
    """The README as sanitised HTML, ready to embed (empty Markup when there is no README)."""
    if not text or not text.strip():
        return Markup("")
    if is_plain_text(filename):
        return Markup("<pre class=\"readme-text\">") + escape(text) + Markup("</pre>")
    return Markup(sanitize_html(_renderer().render(text)))
