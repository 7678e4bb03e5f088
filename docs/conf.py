"""Sphinx configuration of the registry-gen documentation (`make docs`; `make test` builds it too).

Pages are Markdown (MyST). The reference pages are filled from the code at build time by the
local extension in refgen/. The build runs with -W --keep-going -n (Makefile): any warning, a
broken link or anchor among them, fails it. Nothing is fetched from the network.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the refgen extension

project = "registry-gen"
author = "the registry-gen authors"
copyright = "the registry-gen authors"  # noqa: A001 - Sphinx's name for it

extensions = ["myst_parser", "refgen"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "refgen", ".venv"]

myst_heading_anchors = 4  # `page.md#a-heading` links, checked by the strict build
# Sphinx's default smart quotes also turn `--` into an en dash, which breaks an option written in
# running text (`--all` would read and copy as `–all`): keep quotes and ellipses, drop the dashes.
smartquotes_action = "qe"

html_theme = "furo"
html_title = "registry-gen"
html_show_sourcelink = False  # a reference page's source is a marker, not its text
html_copy_source = False
html_last_updated_fmt = None
