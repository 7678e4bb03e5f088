"""The repository's own Markdown files shown as pages of the site (README.md, SECURITY.md, ...).

They are included, not copied, so the site and the repository say the same thing. Their links
point at repository paths (`[SECURITY.md](SECURITY.md)`, `user_api/AUTH.md`,
`docs/operating/backups.md`): a link to a file the site shows, or to a page of the site itself,
becomes a link to its page (anchors kept, so the strict build checks them); a link to any other
file of the repository becomes its path in code, since the site cannot open it.
"""

from __future__ import annotations

import posixpath
import re

# Repository file -> the page of the site that includes it.
PAGES = {
    "README.md": "project/readme",
    "ARCHITECTURE.md": "project/architecture",
    "RATIONALE.md": "project/rationale",
    "SECURITY.md": "security/index",
    "user_api/AUTH.md": "security/accounts",
}
SITE_FOLDER = "docs/"  # the site's own pages, which the repository files link as `docs/PAGE.md`
_LINK = re.compile(r"(?<!!)\[(?P<text>[^\]\n]+)\]\((?P<target>[^)\s]+)\)")
_FENCE = re.compile(r"^([ \t]*(?:```|~~~))", re.MULTILINE)


def is_external(target: str) -> bool:
    return target.startswith("#") or re.match(r"^[a-z][a-z0-9+.-]*:", target) is not None


def rewritten_link(text: str, target: str, included: str) -> str:
    """The markdown for one link of the repository file `included` (a repository path)."""
    path, hash_mark, anchor = target.partition("#")
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(included), path))
    if resolved in PAGES:
        return f"[{text}](/{PAGES[resolved]}.md{hash_mark}{anchor})"
    if resolved.startswith(SITE_FOLDER) and resolved.endswith(".md"):
        return f"[{text}](/{resolved.removeprefix(SITE_FOLDER)}{hash_mark}{anchor})"
    shown = resolved.rstrip("/")
    if text.strip("`").rstrip("/") in (shown, path.rstrip("/"), posixpath.dirname(shown)):
        return f"`{shown}`"
    return f"{text} (`{shown}` in the repository)"


def site_links(markdown: str, included: str) -> str:
    """`markdown` (the text of the repository file `included`) with its links made to work in
    the site; fenced code blocks are left as they are."""
    pieces = _FENCE.split(markdown)
    # split() with one group yields: text, fence, text, fence, ...; odd texts sit inside a fence.
    out, inside = [], False
    for index, piece in enumerate(pieces):
        if index % 2 == 1:
            out.append(piece)
            inside = not inside
            continue
        out.append(piece if inside else _LINK.sub(lambda m: _site_link(m, included), piece))
    return "".join(out)


def _site_link(match: re.Match[str], included: str) -> str:
    target = match["target"].strip("<>")
    if is_external(target):
        return match.group(0)
    return rewritten_link(match["text"], target, included)
