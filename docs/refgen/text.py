"""Markdown pieces the reference pages are made of (pure functions)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

# Code spans stay as they are (help texts use them on purpose); elsewhere these would turn into
# emphasis, raw HTML or, in a table, a new cell.
_CODE_SPAN = re.compile(r"(`+)(?:.+?)\1", re.DOTALL)
_SPECIAL = re.compile(r"([\\*_<>|\[\]])")


class MissingDescription(ValueError):
    """Something the code offers has no description to show: say which, all at once."""

    def __init__(self, kind: str, names: Sequence[str]) -> None:
        super().__init__(f"no description for {len(names)} {kind}: {', '.join(names)}")
        self.names = tuple(names)


def escaped(text: str) -> str:
    """`text` as markdown that shows it literally, its code spans kept, on one line."""
    flat = " ".join(text.split())
    pieces, last = [], 0
    for span in _CODE_SPAN.finditer(flat):
        pieces.append(_SPECIAL.sub(r"\\\1", flat[last : span.start()]))
        pieces.append(span.group(0).replace("|", "\\|"))
        last = span.end()
    pieces.append(_SPECIAL.sub(r"\\\1", flat[last:]))
    return "".join(pieces)


def code(text: str) -> str:
    """`text` as one inline code span (backticks inside it are fenced by longer runs)."""
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    padded = f" {text} " if text.startswith("`") or text.endswith("`") else text
    return f"{fence}{padded}{fence}".replace("|", "\\|")


def paragraphs(text: str) -> list[str]:
    """A docstring's paragraphs, each escaped onto one line."""
    return [escaped(block) for block in re.split(r"\n\s*\n", text.strip()) if block.strip()]


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A GFM table; cells are markdown already (see `escaped`, `code`)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("\n", " ") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def slug(heading: str) -> str:
    """The anchor MyST gives a heading's text (myst_heading_anchors: GitHub's rule)."""
    from myst_parser.slugs import github_slugify

    return github_slugify(heading)
