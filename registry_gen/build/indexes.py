"""Phase 5, index: the listing documents (front page, browse tree, search shards) and the whole
documents (-/all, -/search.json)."""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from registry_gen import site
from registry_gen.build.results import BuildResult
from registry_gen.hosting import LEGACY_SEARCH_FOLDER, STATIC_EXTRAS
from registry_gen.layout import ALL_DOCUMENT, LEGACY_FULL_SEARCH_FILE, SEARCH_DOCUMENT
from registry_gen.packument import all_index_chunks, search_document_chunks
from registry_gen.settings import Settings
from registry_gen.state.sqlite_cache import SHARDS_STALE, WHOLE_STALE, BuildState
from registry_gen.writer import gzip_bytes, remove_tree, write_if_changed, write_streams_if_changed

if TYPE_CHECKING:  # the run object is passed in; importing it here would be a cycle
    from registry_gen.build.run import BuildRun


# Front pages by rank and the one search index of every package (before schema 6): a full build removes them.
LEGACY_LISTINGS = (f"{site.WEB_ROOT}/page", f"{site.WEB_ROOT}/search-index.json", f"{site.WEB_ROOT}/search-index.json.gz")


def _write_listings(run: BuildRun) -> None:
    """The front page, and the browse pages and search shards this build's changes touched (all
    of them in a full build; emptied ones removed): a publish rewrites O(1) files here, each of
    bounded size, whatever the registry's size."""
    settings, state, result = run.settings, run.state, run.result
    changes = state.listing_changes
    if run.full:
        roots = state.listed_ranges() | _folders_in(settings.out_dir / site.BROWSE_ROOT)
        for root in sorted(roots):
            _write_browse_tree(run, root)
    else:
        for key in sorted(changes.ranges):
            _write_browse_path(run, key)
        for key in sorted(changes.pages):
            write_browse_page(run, _listing_prefix(state, key))
    every_shard = run.full or bool(state.get_setting(SHARDS_STALE))
    shards = state.listed_shards() | _shards_on_disk(settings.out_dir) if every_shard else set(changes.shards)
    changed_leaves: dict[str, set[str]] = defaultdict(set)
    for key, bound in changes.leaves:
        changed_leaves[key].add(bound)
    for key in sorted(shards | set(changed_leaves)):
        _write_shard(run, key, recut=key in shards, changed=None if every_shard else changed_leaves[key])
    state.set_setting(SHARDS_STALE, "")
    if changes.front or run.full:
        counts = state.ranges()
        page = site.front_page(state.recent_summaries(site.RECENT_COUNT), sum(c for _, c in counts), counts, settings)
        _write_files(settings.out_dir, page, result)


def _write_browse_path(run: BuildRun, key: str) -> None:
    """The browse pages from a changed package's two-character range down to the range that lists
    it: O(depth) pages. A range that has just grown past PAGE_SIZE gets its sub-ranges written."""
    prefix = key[:2]
    while True:
        children = write_browse_page(run, prefix)
        if children is None:
            return
        for child in children:
            if key.startswith(child) or child in run.browse_pages:  # next on this path, or written already
                continue
            if not (run.settings.out_dir / site.browse_page_path(child)).is_file():
                _write_browse_tree(run, child)
        if len(prefix) >= len(key):
            return
        prefix = key[: len(prefix) + 1]


def _listing_prefix(state: BuildState, key: str) -> str:
    """The browse page that lists the packages of browse key `key`: the first range on its path
    that is not split into sub-ranges, or the key itself (a split page lists its exact key)."""
    prefix = key[:2]
    while len(prefix) < len(key) and state.prefix_count(prefix) > site.PAGE_SIZE:
        prefix = key[: len(prefix) + 1]
    return prefix


def _write_browse_tree(run: BuildRun, prefix: str) -> None:
    """The page of `prefix` and of every range under it (a full build, a range that split)."""
    for child in write_browse_page(run, prefix) or []:
        _write_browse_tree(run, child)


def write_browse_page(run: BuildRun, prefix: str) -> list[str] | None:
    """Writes (or, if nothing starts with it any more, removes) the page of `prefix`, once per
    build; returns its sub-ranges when it lists them instead of packages, else None. Sub-range
    folders that no longer belong go."""
    if prefix not in run.browse_pages:
        run.browse_pages[prefix] = _render_browse_page(run, prefix)
    return run.browse_pages[prefix]


def _render_browse_page(run: BuildRun, prefix: str) -> list[str] | None:
    settings, state, result = run.settings, run.state, run.result
    folder = site.browse_folder(prefix)
    total = state.prefix_count(prefix)
    if not total:
        if remove_tree(settings.out_dir, folder):
            result.removed.append(folder)
        return None
    split = total > site.PAGE_SIZE
    children = state.prefix_children(prefix) if split else []
    packages = state.prefix_summaries(prefix, exact=split)
    links = [(_past_single_narrowings(state, child, count), count) for child, count in children]
    _write_files(settings.out_dir, site.browse_page(prefix, total, packages, links, settings), result)
    wanted = {child[-1] for child, _ in children}
    for stale in sorted(_folders_in(settings.out_dir / folder) - wanted):
        if remove_tree(settings.out_dir, f"{folder}/{stale}"):
            result.removed.append(f"{folder}/{stale}")
    return [child for child, _ in children] if split else None


def _past_single_narrowings(state: BuildState, prefix: str, count: int) -> str:
    """Where a sub-range's link should land: past ranges that only narrow to one sub-range and hold
    no package of their own (`syn` -> `syn-` when every name goes on with a dash), so a reader is
    not walked through pages offering a single link. Those pages still exist, for breadcrumbs.
    That landing is the longest prefix every key under `prefix` shares (a key that is itself a
    prefix of the others stops it there), read from the smallest and greatest key: two index
    reads, however many single narrowings a long shared name part makes."""
    if count <= site.PAGE_SIZE:
        return prefix
    first, last = state.key_bounds(prefix)
    return os.path.commonprefix([first, last]) if first else prefix


def _write_shard(run: BuildRun, key: str, *, recut: bool, changed: set[str] | None) -> None:
    """One search shard: its records in `<key>.json` while it is one leaf; else that file lists its
    leaves, each in `<key>/<id>.json`. `recut`: its leaves were cut or joined (the list is written
    again and leaves no longer listed go); `changed`: the leaves whose records changed (None: all).
    Without a cut, only the changed leaves are looked at: O(1) however many leaves the shard has."""
    settings, state, result = run.settings, run.state, run.result
    relative, folder = site.search_shard_path(key), f"{site.SEARCH_SHARD_ROOT}/{key}"
    if state.leaf_count(key, at_most=2) <= 1:
        bounds = state.shard_leaves(key)
        for path in (folder,) if bounds else (folder, relative, relative + ".gz"):
            if remove_tree(settings.out_dir, path):
                result.removed.append(path)
        if bounds:
            _write_search_json(settings, relative, site.join_search_shard(state.leaf_entries(key, bounds[0])), result)
        return
    if recut or changed is None:
        targets = _recut_shard(run, key, changed)
    else:
        targets = sorted(bound for bound in changed if state.has_leaf(key, bound))
    for bound in targets:
        _write_search_json(settings, site.search_leaf_path(key, bound), site.join_search_shard(state.leaf_entries(key, bound)), result)


def _recut_shard(run: BuildRun, key: str, changed: set[str] | None) -> list[str]:
    """Writes the list of a shard's leaves and removes the leaf files it no longer lists; returns
    the leaves to write: the changed ones (None: all) and any whose file is missing."""
    settings, result = run.settings, run.result
    bounds = run.state.shard_leaves(key)
    _write_search_json(settings, site.search_shard_path(key), site.search_shard_index(bounds), result)
    folder = f"{site.SEARCH_SHARD_ROOT}/{key}"
    ids = {site.search_leaf_id(bound): bound for bound in bounds}
    on_disk = set()
    for name in sorted(_names_in(settings.out_dir / folder)):
        leaf = name.split(".", 1)[0]
        if leaf not in ids:
            if remove_tree(settings.out_dir, f"{folder}/{name}"):
                result.removed.append(f"{folder}/{name}")
        elif name.endswith(".json"):
            on_disk.add(leaf)
    return [bound for leaf, bound in ids.items() if changed is None or bound in changed or leaf not in on_disk]


def _write_search_json(settings: Settings, relative: str, data: bytes, result: BuildResult) -> None:
    # Level 6, not 9: a publish rewrites up to SEARCH_KEY_LIMIT leaves; 9 costs 2-3x for ~2 % smaller.
    files = {relative: data, relative + ".gz": gzip_bytes(data, 6)} if settings.gzip else {relative: data}
    _write_files(settings.out_dir, files, result)


def _write_files(out: Path, files: Mapping[str, bytes], result: BuildResult) -> None:
    for relative, data in files.items():
        if write_if_changed(out / relative, data):
            result.written.append(relative)


def _folders_in(folder: Path) -> set[str]:
    try:
        return {entry.name for entry in os.scandir(folder) if entry.is_dir()}
    except FileNotFoundError:
        return set()


def _names_in(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return []


def _shards_on_disk(out: Path) -> set[str]:
    """The shards the tree holds: `<key>.json` files and the leaf folders of `<key>`."""
    root = out / site.SEARCH_SHARD_ROOT
    names = _names_in(root)
    keys = {name.split(".", 1)[0] for name in names if name.endswith((".json", ".json.gz"))}
    return {key for key in keys | {name for name in names if (root / name).is_dir()} if key}


def _write_fixed_files(settings: Settings, result: BuildResult) -> None:
    """What a full build writes once: the site's assets and not-found page, the ping answer and
    the extras for unconfigurable hosts; and what older trees kept that this layout does not."""
    _write_files(settings.out_dir, {**site.site_assets(settings), "-/ping": b"{}", **STATIC_EXTRAS}, result)
    for legacy in (LEGACY_SEARCH_FOLDER, *LEGACY_LISTINGS):
        if remove_tree(settings.out_dir, legacy):
            result.removed.append(legacy)
    (settings.state_folder / LEGACY_FULL_SEARCH_FILE).unlink(missing_ok=True)


def _write_whole_documents(settings: Settings, state: BuildState, result: BuildResult) -> None:
    """-/all and -/search.json: one URL each, listing every package, so they cannot be sharded.
    The long-running writers defer them (Settings.index_refresh_seconds; see IndexRefresher)."""
    out = settings.out_dir
    stamp = state.whole_document_stamp()
    # Both grow with the registry (tens of MB at 1M versions): streamed from the state to their
    # files and gzip siblings, never held whole.
    documents = {
        out / ALL_DOCUMENT: all_index_chunks(stamp, state.whole_document_fragments("all_fragment")),
        out / SEARCH_DOCUMENT: search_document_chunks(state.whole_document_fragments("search_fragment"), stamp),
    }
    written = write_streams_if_changed(documents, 9 if settings.gzip else None)
    result.written.extend(path.relative_to(out).as_posix() for path in written)
    state.set_setting(WHOLE_STALE, "")


def write_indexes(run: BuildRun, defer_whole: bool) -> None:
    """Phase 5: the listing documents; -/all and -/search.json now, or marked for the refresher."""
    settings, state = run.settings, run.state
    if run.full:
        _write_fixed_files(settings, run.result)
    if state.listing_changes.front or run.full or state.get_setting(SHARDS_STALE):
        _write_listings(run)
    changed = bool(run.result.rebuilt or run.package_set_changed or run.full)
    if not (changed or state.get_setting(WHOLE_STALE)):
        return
    if defer_whole:
        state.set_setting(WHOLE_STALE, "1")
    else:
        _write_whole_documents(settings, state, run.result)
