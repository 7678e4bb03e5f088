"""README text -> safe HTML for the package pages (a pure function of the text).

cmark-gfm (GitHub's own renderer, via cmarkgfm) renders GitHub Flavored Markdown: tables,
bare-URL autolinks, task lists and strikethrough, with raw HTML allowed, because real READMEs
lean on it (centred logos, badges, <details>). Everything then goes through nh3 (ammonia), an
allow-list sanitiser: scripts, styles, event handlers, forms, inputs, iframes and any URL scheme
other than http(s)/mailto are dropped, so a hostile README renders inert. Sanitising last means
no Markdown trick (reference links, autolinks, entities) can smuggle something past it.

Relative image and link URLs are resolved against the package's repository the way npmjs.com
does it: images from the host's raw files, links to its file view, both at `HEAD` (the default
branch) under `repository.directory`.
"""

from __future__ import annotations

import ctypes
import posixpath
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import quote, urlsplit

from markupsafe import Markup, escape

# README files in these formats are shown verbatim: rendering them as Markdown garbles them.
PLAIN_TEXT_SUFFIXES = frozenset({".txt", ".rst", ".adoc", ".asciidoc", ".org", ".textile", ".rdoc"})
SAFE_URL_SCHEMES = frozenset({"http", "https", "mailto"})
# Links out of the README must not hand the registry's URL (private hostnames) to other sites.
LINK_REL = "nofollow noopener noreferrer"
# Tags removed together with their content; everything else not allowed keeps its text.
DROPPED_WITH_CONTENT = frozenset({"script", "style", "template", "noscript", "iframe", "object", "embed", "svg", "math"})
GFM_EXTENSIONS = ("table", "autolink", "tasklist", "strikethrough")
# cmark-gfm's task-list boxes are <input> elements, which the sanitiser (rightly) drops: they
# become plain marks before sanitising. A README writing the same markup by hand gets the same mark.
_TASK_BOX = re.compile(r'<input type="checkbox"( checked="")? disabled="" />')
TASK_CLASSES = frozenset({"task", "task-done"})
_CODE_LANGUAGE = re.compile(r"language-[\w+#.-]{1,40}")
# Where a repository host serves a file's bytes (images) and shows a file (links), at `HEAD`.
_HOST_TEMPLATES = {
    "github.com": ("https://raw.githubusercontent.com/{owner}/{repo}/HEAD/", "https://github.com/{owner}/{repo}/blob/HEAD/"),
    "gitlab.com": ("https://gitlab.com/{owner}/{repo}/-/raw/HEAD/", "https://gitlab.com/{owner}/{repo}/-/blob/HEAD/"),
    "bitbucket.org": ("https://bitbucket.org/{owner}/{repo}/raw/HEAD/", "https://bitbucket.org/{owner}/{repo}/src/HEAD/"),
}
_URL_ATTRIBUTES = {("a", "href"): "link", ("img", "src"): "image"}


@dataclass(frozen=True)
class RepositoryFiles:
    """Where a README's relative URLs point: the repository's raw and browse bases, and the
    package's folder inside it (`repository.directory`), all without leading or trailing slash."""

    raw_base: str
    blob_base: str
    directory: str = ""

    def resolve(self, url: str, kind: str) -> str:
        """A relative `url` of the README as an absolute one; anything else unchanged."""
        parts = urlsplit(url)
        if parts.scheme or parts.netloc or not parts.path or url.startswith("#"):
            return url
        start = "" if parts.path.startswith("/") else self.directory
        path = posixpath.normpath(posixpath.join("/", start, parts.path)).lstrip("/")
        if path in ("", "."):
            return url
        base = self.raw_base if kind == "image" else self.blob_base
        tail = (f"?{parts.query}" if parts.query else "") + (f"#{parts.fragment}" if parts.fragment else "")
        return base + quote(path, safe="/@!$&'()*+,;=:~-._") + tail


def repository_files(browse_url: str | None, directory: object = None) -> RepositoryFiles | None:
    """RepositoryFiles for a repository's browsable URL (`https://github.com/owner/repo`), or None
    when the host is not one whose file URLs are known."""
    if not browse_url:
        return None
    parts = urlsplit(browse_url)
    templates = _HOST_TEMPLATES.get(parts.netloc.lower().removeprefix("www."))
    segments = [s for s in parts.path.split("/") if s]
    if templates is None or len(segments) < 2:
        return None
    owner, repo = (quote(s, safe="-._~") for s in (segments[0], segments[1].removesuffix(".git")))
    folder = directory.strip().strip("/") if isinstance(directory, str) else ""
    if any(part in ("..", ".") for part in folder.split("/")):
        folder = ""
    raw, blob = (t.format(owner=owner, repo=repo) for t in templates)
    return RepositoryFiles(raw, blob, folder)


def _allowed_attributes() -> dict[str, set[str]]:
    import nh3  # the renderers load with the first README, not with every import of the build

    attributes = {tag: set(names) for tag, names in nh3.ALLOWED_ATTRIBUTES.items()}
    # GitHub-style READMEs centre logos with align; keep the (harmless) presentational bits.
    for tag in ("p", "div", "h1", "h2", "h3", "h4", "h5", "h6"):
        attributes.setdefault(tag, set()).add("align")
    attributes.setdefault("a", set()).add("title")
    attributes.setdefault("img", set()).add("title")
    attributes.setdefault("details", set()).add("open")
    attributes.setdefault("code", set()).add("class")  # language-xyz from fenced code blocks
    attributes.setdefault("span", set()).add("class")  # task-list marks
    return attributes


def _attribute_filter(files: RepositoryFiles | None):  # type: ignore[no-untyped-def]
    def keep(tag: str, attribute: str, value: str) -> str | None:
        # A free class would let a README dress itself up as the page's own notices; keep only
        # the language-xyz marker of fenced code and the task-list marks.
        if attribute == "class":
            kept = [c for c in value.split() if _CODE_LANGUAGE.fullmatch(c) or c in TASK_CLASSES]
            return " ".join(kept) or None
        kind = _URL_ATTRIBUTES.get((tag, attribute))
        # The sanitiser has already refused unsafe schemes; only relative URLs are rewritten.
        return files.resolve(value, kind) if files is not None and kind else value

    return keep


def sanitize_html(html: str, files: RepositoryFiles | None = None) -> str:
    """Allow-list sanitising of an HTML fragment (nh3/ammonia)."""
    import nh3

    return nh3.clean(
        html,
        tags=set(nh3.ALLOWED_TAGS) - {"map", "area"},
        clean_content_tags=set(DROPPED_WITH_CONTENT),
        attributes=_allowed_attributes(),
        attribute_filter=_attribute_filter(files),
        url_schemes=set(SAFE_URL_SCHEMES),
        link_rel=LINK_REL,
        strip_comments=True,
    )


def _task_mark(match: re.Match[str]) -> str:
    if match.group(1):
        return '<span class="task task-done">☑</span>'
    return '<span class="task">☐</span>'


def markdown_to_html(text: str) -> str:
    """GitHub Flavored Markdown -> unsanitised HTML (raw HTML passes through, for nh3 to judge)."""
    return _TASK_BOX.sub(_task_mark, _render_gfm(text))


def _render_gfm(text: str) -> str:
    """cmark-gfm's parse and render, freeing what cmarkgfm's `markdown_to_html_with_extensions`
    leaks: it frees neither the syntax tree nor the rendered string (about 50x the README's size
    per call; a worker writing thousands of packages grew to 2 GB, and `serve` grew with every
    publish). cmarkgfm's cffi module does not declare `cmark_node_free`, so it is called from the
    same loaded library through ctypes."""
    from cmarkgfm import _cmark, cmark

    options = cmark.Options.CMARK_OPT_UNSAFE | cmark.Options.CMARK_OPT_VALIDATE_UTF8
    cmark.core_extensions_ensure_registered()
    parser = cmark.parser_new(options=options)
    root = None
    try:
        for name in GFM_EXTENSIONS:
            cmark.parser_attach_syntax_extension(parser, cmark.find_syntax_extension(name))
        cmark.parser_feed(parser, text)
        root = cmark.parser_finish(parser)
        raw = _cmark.lib.cmark_render_html(root, options, cmark.parser_get_syntax_extensions(parser))
        try:
            return _cmark.ffi.string(raw).decode("utf-8")
        finally:
            _c_functions().free(_address(_cmark.ffi, raw))
    finally:
        if root is not None:
            _c_functions().cmark_node_free(_address(_cmark.ffi, root))
        cmark.parser_free(parser)


def _address(ffi: Any, pointer: Any) -> ctypes.c_void_p:
    return ctypes.c_void_p(int(ffi.cast("uintptr_t", pointer)))


@lru_cache(maxsize=1)
def _c_functions() -> Any:
    """`cmark_node_free` from cmarkgfm's own library, and the C library's `free` (cmark's default
    allocator is calloc/realloc/free)."""
    from cmarkgfm import _cmark

    library = ctypes.CDLL(_cmark.__file__)
    library.cmark_node_free.argtypes = [ctypes.c_void_p]
    library.cmark_node_free.restype = None
    library.free.argtypes = [ctypes.c_void_p]
    library.free.restype = None
    return library


def is_plain_text(filename: str | None) -> bool:
    return filename is not None and PurePosixPath(filename).suffix.lower() in PLAIN_TEXT_SUFFIXES


@lru_cache(maxsize=64)
def render_readme(text: str | None, filename: str | None = None, files: RepositoryFiles | None = None) -> Markup:
    """The README as sanitised HTML, ready to embed (empty Markup when there is no README).

    Memoised: a package's versions usually share one README, and a build renders each of them.
    """
    if not text or not text.strip():
        return Markup("")
    if is_plain_text(filename):
        return Markup('<pre class="readme-text">') + escape(text) + Markup("</pre>")
    return Markup(sanitize_html(markdown_to_html(text), files))
