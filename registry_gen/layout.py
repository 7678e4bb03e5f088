"""The one home of the output tree's layout: file names, content types, cache headers, and the
paths that are never files. The build writes by these names; `registry-gen serve`, the nginx and
object-store configs, verify and the search endpoint read by them."""

from __future__ import annotations

from typing import Final

# File names (RATIONALE.md §1): a package document is <name>/index.html, so any static host's
# index-file lookup serves GET /<name>; the abbreviated one sits beside it.
PACKAGE_DOCUMENT: Final = "index.html"
ABBREVIATED_DOCUMENT: Final = "abbreviated.json"
ALL_DOCUMENT: Final = "-/all/index.html"
# Every package's search entry, which the API filters for GET /-/v1/search. It lives away from that
# URL on purpose: a static host ignores the query string, so serving it there would answer every
# `npm search` with every package. Without the API, /-/v1/search is a 404 and npm says so.
SEARCH_DOCUMENT: Final = "-/search.json"
WEB_ROOT: Final = "-/web"  # the HTML site
NOT_FOUND_DOCUMENT: Final = "-/404.json"  # the object store's error document
PAGES_NOT_FOUND: Final = "404.html"  # GitHub Pages serves this one, with status 404, for any missing path
NOJEKYLL: Final = ".nojekyll"  # GitHub Pages: serve the files as they are, no Jekyll pass

# The build's state (databases, the first-seen ledger, caches, refused archives, the full search
# document behind read rules) lives beside the tree, never in it: `public/` is deployed as it is.
# Default: OUT_DIR.state (`public.state/`); registry.yaml `state_dir` moves it. Trees built before
# kept it in OUT_DIR/.registry-gen/, which the next build moves out (registry_gen.statedir).
STATE_SUFFIX: Final = ".state"
LEGACY_STATE_FOLDER: Final = ".registry-gen"
STATE_DATABASE: Final = "state.sqlite3"
LEGACY_FULL_SEARCH_FILE: Final = "search-all.json"  # the API searched this before the state held search rows; a full build deletes it
CONVERTED_FOLDER: Final = "converted"  # .zip archives converted to the .tgz the tree serves

# Content types and cache headers.
ABBREVIATED_TYPE: Final = "application/vnd.npm.install-v1+json"
JSON_TYPE: Final = "application/json"
TARBALL_TYPE: Final = "application/octet-stream"
HTML_TYPE: Final = "text/html; charset=utf-8"
IMMUTABLE_CACHE: Final = "public, max-age=31536000, immutable"  # a name@version is never reused
DOCUMENT_CACHE: Final = "public, max-age=0, must-revalidate"  # new versions show up at once
ERROR_CACHE: Final = "no-cache"

# GET paths whose answer depends on who asks or on the query: never files, always the API.
API_READ_PREFIXES: Final = ("/-/whoami", "/-/v1/search", "/-/changes", "/-/v1/login", "/-/v1/done/", "/-/user/", "/-/npm/")
USER_API_PREFIXES: Final = ("/user/", "/-/user-api/")
USER_API_EXACT: Final = ("/user",)
