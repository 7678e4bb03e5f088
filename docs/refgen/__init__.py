"""The Sphinx extension that fills the reference pages from the code at every build.

A page of the site holds a line `<!-- generated: NAME -->` where the reference NAME goes
(GENERATORS); the page's own text around it is hand-written. The references are made while the
page is read, so they cannot drift from the code; a command, option, key or route without a
description stops the build (refgen.text.MissingDescription). The repository's Markdown files
that pages include get their links made to work in the site (refgen.repository).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from refgen import cli_reference, config_reference, http_reference
from refgen.repository import site_links

GENERATORS: dict[str, Callable[[], str]] = {
    "cli": cli_reference.cli_reference,
    "configuration": config_reference.config_reference,
    "user-api": http_reference.user_api_reference,
    "npm-api": http_reference.npm_routes_reference,
}
MARKER = re.compile(r"^<!-- generated: (?P<name>[a-z-]+) -->$", re.MULTILINE)


def filled(text: str, where: str) -> str:
    """`text` with each marker replaced by the reference it names."""

    def generated(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in GENERATORS:
            raise ValueError(f"{where}: no reference named {name!r} (known: {', '.join(GENERATORS)})")
        return GENERATORS[name]()

    return MARKER.sub(generated, text)


def fill_references(app: Any, docname: str, source: list[str]) -> None:
    from sphinx.errors import ExtensionError

    try:
        source[0] = filled(source[0], docname)
    except ValueError as exc:  # MissingDescription among them: the build stops, naming what lacks one
        raise ExtensionError(f"{docname}: {exc}") from exc


def link_repository_files(app: Any, relative_path: Path, parent_docname: str, content: list[str]) -> None:
    """`include-read`: links of an included repository file, made to work in the site."""
    repository = Path(app.srcdir).resolve().parent
    included = (Path(app.srcdir) / relative_path).resolve()
    if included.suffix == ".md" and included.is_relative_to(repository):
        content[0] = site_links(content[0], included.relative_to(repository).as_posix())


def generated_pages(app: Any, env: Any, added: set[str], changed: set[str], removed: set[str]) -> list[str]:
    """`env-get-outdated`: the pages with a reference are read again at every build (the code
    they are made from may have changed while their own file did not)."""
    pages = []
    for docname in env.found_docs - added - changed - removed:
        path = Path(env.doc2path(docname))
        if path.suffix == ".md" and MARKER.search(path.read_text(encoding="utf-8")):
            pages.append(docname)
    return pages


def setup(app: Any) -> dict[str, Any]:
    app.connect("source-read", fill_references)
    app.connect("env-get-outdated", generated_pages)
    app.connect("include-read", link_repository_files)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
