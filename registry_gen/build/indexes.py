"""Phase 5, index: the derived indexes of the tree, decided here and written here.

The listing documents are keyed so that a change rewrites a bounded set of bounded files, whatever
the registry's size:

- the front page (recent packages, two-character ranges with counts);
- the browse tree: a page per name prefix (`site.name_key`), listing its packages while they fit
  in `site.PAGE_SIZE`, else its one-character-longer sub-ranges with counts;
- the search shards (`site_search.search_keys`): a shard past SEARCH_LEAF_MAX packages is cut into
  leaves of consecutive names, kept as the leaves of a one-level B-tree;
- `-/all` and `-/search.json`, one URL each listing every package (deferred by the long-running
  writers to registry_gen.refresher).

What changes is decided by pure functions of what changed, one package at a time:

- a package that moves in the listings (listing_move) moves the prefix counts of its old and new
  browse keys, and enters, leaves or stays in each of its shards (leaf_ops: enter a leaf, split
  it past SEARCH_LEAF_MAX, leave it, join it to a neighbour under a quarter full, drop it empty);
- rebuild the front page if any listed package changed;
- rebuild every browse page on the path of a key a package entered or left (its counts changed),
  and only the page listing a key whose package merely changed (listing_prefix);
- rebuild a shard's leaf list if its leaves were cut or joined, and each leaf whose records changed;
- rebuild `-/all` and `-/search.json` if any package was written, appeared or went.

The state (registry_gen.state) stores the counts, memberships and leaves, and applies the moves
decided here; `IndexWriter` renders what the decisions name.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from registry_gen import site
from registry_gen.build.context import BuildContext
from registry_gen.build.results import FileChanges
from registry_gen.hosting import LEGACY_SEARCH_FOLDER, STATIC_EXTRAS
from registry_gen.layout import ALL_DOCUMENT, LEGACY_FULL_SEARCH_FILE, SEARCH_DOCUMENT
from registry_gen.packument import all_index_chunks, search_document_chunks
from registry_gen.settings import Settings
from registry_gen.state import BuildListings, ListingMemory
from registry_gen.state.records import BuildStart, Leaf, LeafHood, LeafOp, ListedAt, ListingMove, ListingPlace, StalePage
from registry_gen.writer import gzip_bytes, remove_tree, write_if_changed, write_streams_if_changed


# Records in one leaf of a search shard; a fuller leaf splits in two. 200: a publish gzips ~1 ms per
# leaf (2.2 ms at 400), while a shard of 10,000 packages is still only 50-100 fetches for the search box.
SEARCH_LEAF_MAX = 200
# Shards whose first leaves (and, for one-leaf shards, records) are read in one query: a publish
# touches a few; a full build, which touches every shard, holds this many shards' records at once.
SHARDS_AT_ONCE = 100
# Front pages by rank and the one search index of every package (before schema 6): a full build removes them.
LEGACY_LISTINGS = (f"{site.WEB_ROOT}/page", f"{site.WEB_ROOT}/search-index.json", f"{site.WEB_ROOT}/search-index.json.gz")
# The `bound` of a `range` marking whose browse key a package left (StalePage): the range at the end
# of its path may have shrunk, so the renderer asks the readers' tree what that range's folder still
# holds. A bound, not a kind of its own: a leader of an earlier release renders it as a range.
LEFT = "left"
# The `bound` of a `range` marking whose key is a browse prefix a write made split (its count passed
# PAGE_SIZE): its page now links sub-ranges, and every page under it is rendered and uploaded, whatever
# the leader's folder holds. That folder may keep sub-range pages of an earlier split that another
# instance has since removed from the tree bucket (the range shrank under it); trusting them left the
# new links answering 404. A leader of an earlier release walks it as a range.
SPLIT = "split"

# The files the readers' tree holds under a folder (`-/web/browse/zq/`), as tree paths: on a bucket,
# one LIST of that prefix. Given where the build's work folder is not the readers' tree.
TreeListing = Callable[[str], Iterable[str]]


# ---------------------------------------------------------------- decisions (pure)


def prefix_rows(key: str, delta: int) -> list[tuple[str, str, int]]:
    """(prefix, parent, delta) for every prefix of browse key `key` of two characters or more: a
    package entering (1) or leaving (-1) the key moves the count of each page on its path."""
    return [(key[:n], key[: n - 1] if n > 2 else "", delta) for n in range(2, len(key) + 1)]


def listing_move(name: str, before: ListedAt | None, after: ListingPlace | None, hoods: Mapping[str, LeafHood]) -> ListingMove:
    """How package `name` moves from where it is listed (`before`) to `after` (None, or not
    listed: it leaves the listings). `hoods`: the leaf around the name in each shard it was or
    will be in."""
    now = after if after is not None and after.listed else None
    old_shards = before.shards if before else frozenset()
    rows: list[tuple[str, str, int]] = []
    if not (before and now and before.range_key == now.range_key):  # staying in its range moves no count
        rows = (prefix_rows(before.range_key, -1) if before else []) + (prefix_rows(now.range_key, 1) if now else [])
    shards_now = tuple(dict.fromkeys(now.search_keys)) if now else ()  # in the order the entry gives them
    gone = tuple(sorted(old_shards - set(shards_now)))
    ops = [op for key in gone for op in leave_leaf(key, name, hoods[key])]
    ops += [op for key in shards_now if key not in old_shards for op in enter_leaf(key, name, hoods[key])]
    return ListingMove(name, after, tuple(rows), gone, shards_now, tuple(ops))


def enter_leaf(key: str, name: str, hood: LeafHood) -> list[LeafOp]:
    """A name enters shard `key`: it goes to the leaf with the greatest bound not after it (a new
    first leaf when there is none: the shard's first name, or one before its first bound); a
    leaf past SEARCH_LEAF_MAX splits at its middle."""
    if hood.leaf is None:
        return [LeafOp("insert", key, name if hood.has_leaves else "", 1)]
    count = hood.leaf.count + 1
    ops = [LeafOp("count", key, hood.leaf.bound, count)]
    return ops + [LeafOp("split", key, hood.leaf.bound)] if count > SEARCH_LEAF_MAX else ops


def leave_leaf(key: str, name: str, hood: LeafHood) -> list[LeafOp]:
    """A name leaves shard `key`: an emptied leaf goes; one under a quarter full joins a neighbour
    when the two fit in three quarters of a leaf, so leaves stay well filled as packages come and
    go (and a join does not split soon)."""
    if hood.leaf is None:
        return []
    left = hood.leaf.count - 1
    if left == 0:
        return [LeafOp("delete", key, hood.leaf.bound)]
    ops = [LeafOp("count", key, hood.leaf.bound, left)]
    if left < SEARCH_LEAF_MAX // 4:
        leaf = Leaf(hood.leaf.bound, left)
        for first, second in ((hood.before, leaf), (leaf, hood.after)):
            if first and second and first.count + second.count <= SEARCH_LEAF_MAX * 3 // 4:
                return ops + [LeafOp("join", key, first.bound, first.count + second.count, other=second.bound)]
    return ops


def split_ranges(growth: Mapping[str, tuple[int, int]], page_size: int) -> set[str]:
    """The browse prefixes a build made split: `growth` gives, for each prefix whose count its moves
    raised, the lowest count before and the highest after such a move; a count moves by one per move,
    so a prefix that went past `page_size` had one at `page_size` or under (BuildListings.prefix_growth)."""
    return {prefix for prefix, (low, high) in growth.items() if low <= page_size < high}


def listing_prefix(key: str, counts: Mapping[str, int]) -> str:
    """The browse page that lists the packages of browse key `key`: the first range on its path
    that is not split into sub-ranges, or the key itself (a split page lists its exact key).
    `counts`: the package count of each prefix of `key`."""
    prefix = key[:2]
    while len(prefix) < len(key) and counts.get(prefix, 0) > site.PAGE_SIZE:
        prefix = key[: len(prefix) + 1]
    return prefix


def landing(prefix: str, count: int, first: str, last: str) -> str:
    """Where a sub-range's link should land: past ranges that only narrow to one sub-range and hold
    no package of their own (`syn` -> `syn-` when every name goes on with a dash), so a reader is
    not walked through pages offering a single link. Those pages still exist, for breadcrumbs.
    That landing is the longest prefix every key under `prefix` shares (a key that is itself a
    prefix of the others stops it there): the common prefix of its smallest and greatest key."""
    if count <= site.PAGE_SIZE or not first:
        return prefix
    return os.path.commonprefix([first, last])


@dataclass
class ListingChanges:
    """What a build's package changes touched, collected as their moves are applied: the front
    page, browse keys and search shards. A full build writes every listing page and shard, so it
    collects nothing (`collecting` False: the sets would hold an entry per package, never read)."""

    collecting: bool = True
    front: bool = False
    ranges: set[str] = field(default_factory=set)  # browse keys a package entered or left: their whole path
    left: set[str] = field(default_factory=set)  # those of `ranges` a package left: the end of the path may have shrunk
    split: set[str] = field(default_factory=set)  # browse prefixes that went past PAGE_SIZE: their whole tree
    pages: set[str] = field(default_factory=set)  # browse keys whose package only changed: the page listing it
    shards: set[str] = field(default_factory=set)  # shards whose leaves were cut or joined
    leaves: set[tuple[str, str]] = field(default_factory=set)  # (shard, bound) whose records changed

    def note(self, move: ListingMove, before: ListedAt | None, hoods: Mapping[str, LeafHood], splits: Mapping[str, str]) -> None:
        """Records what `move` changed; `splits`: the bound each split leaf's new half starts at."""
        if not self.collecting or not (before or move.listed):
            return
        self.front = True
        now = move.listed
        if before and now and before.range_key == now.range_key:
            self.pages.add(now.range_key)  # the counts above did not change: only the page that lists it
        else:
            self.ranges.update(place.range_key for place in (before, now) if place is not None)
            if before is not None:
                self.left.add(before.range_key)
        kept = set(move.shards_now) & (before.shards if before else frozenset())
        self.leaves.update((key, hood.leaf.bound) for key in kept if (hood := hoods[key]).leaf is not None)
        for op in move.leaf_ops:
            self._note_op(op, splits)

    @property
    def touched(self) -> bool:
        return self.front or bool(self.ranges or self.split or self.pages or self.shards or self.leaves)

    def stale_pages(self) -> list[StalePage]:
        """What these changes touched, as the pages a deferring build leaves to the rewrite."""
        pages = [StalePage("front", "")] if self.front else []
        pages += [StalePage("range", key, LEFT if key in self.left else "") for key in sorted(self.ranges)]
        pages += [StalePage("range", prefix, SPLIT) for prefix in sorted(self.split)]
        pages += [StalePage("page", key) for key in sorted(self.pages)]
        pages += [StalePage("shard", key) for key in sorted(self.shards)]
        return pages + [StalePage("leaf", key, bound) for key, bound in sorted(self.leaves)]

    def take(self, pages: Iterable[StalePage]) -> None:
        """Adds the pages earlier builds left (stale_pages' inverse): rendered with this build's."""
        for page in pages:
            if page.kind == "front":
                self.front = True
            elif page.kind == "leaf":
                self.leaves.add((page.key, page.bound))
            elif page.kind == "range" and page.bound == LEFT:
                self.ranges.add(page.key)
                self.left.add(page.key)
            elif page.kind == "range" and page.bound == SPLIT:
                self.split.add(page.key)
            else:
                {"range": self.ranges, "page": self.pages, "shard": self.shards}[page.kind].add(page.key)

    def _note_op(self, op: LeafOp, splits: Mapping[str, str]) -> None:
        if op.kind in ("insert", "delete", "split", "join"):
            self.shards.add(op.key)
        if op.kind in ("insert", "count", "join", "delete"):
            self.leaves.add((op.key, op.bound))
        if op.kind == "split":
            self.leaves.add((op.key, splits[op.key]))
        if op.kind == "join" and op.other is not None:
            # The leaf a join takes in goes, as a deleted one does (noted above): a render from the
            # markings names its file removed though its folder never held it (IndexWriter.remove).
            self.leaves.add((op.key, op.other))


def leaves_by_shard(leaves: Iterable[tuple[str, str]]) -> dict[str, set[str]]:
    grouped: dict[str, set[str]] = defaultdict(set)
    for key, bound in leaves:
        grouped[key].add(bound)
    return grouped


# ---------------------------------------------------------------- the writer (I/O)


class IndexWriter:
    """Writes the listing documents one build's changes name (all of them in a full build):
    each browse page at most once per build, however many changed keys walk through it."""

    def __init__(self, settings: Settings, state: ListingMemory, *, name_unchanged: bool = False, tree: TreeListing | None = None) -> None:
        self.settings, self.state, self.out = settings, state, settings.out_dir
        self.files = FileChanges()
        # The readers' tree, where this folder is not it (a bucket): asked once per range that may
        # have shrunk and per shard that lost a leaf, for what an earlier render (another instance's,
        # or before this folder existed) left under it; this folder only knows its own renders.
        self.tree = tree
        self.asked: set[str] = set()  # folders the tree was asked about in this build
        self.marked_leaves: Mapping[str, set[str]] = {}  # a full build's leaf markings: which ones went
        # Pages another instance's write left: this work folder's copy may equal what is rendered
        # now while the tree bucket holds another version (or an upload of it failed before), so
        # each is named written, and uploaded, whatever this folder held; and a page the state says
        # is gone is named removed though this folder never held it (another instance rendered it).
        self.name_unchanged = name_unchanged
        self.browse_pages: dict[str, list[str] | None] = {}  # page -> what write_browse_page returned

    def write_listings(self, changes: ListingChanges, *, full: bool, every_shard: bool) -> FileChanges:
        """The front page, and the browse pages and search shards `changes` touched (all of them
        in a full build; emptied ones removed)."""
        if full:
            for root in sorted(self.state.listed_ranges() | _folders_in(self.out / site.BROWSE_ROOT)):
                self.write_browse_tree(root)
        # In a full build, only markings (a server's start): a range emptied since is under no listed root.
        for key in sorted(changes.ranges):
            self.write_browse_path(key, left=key in changes.left)
        for prefix in sorted(changes.split):  # every sub-range page new: none taken from this folder's copy
            self.write_browse_tree(prefix)
        if not full:
            for key in sorted(changes.pages):
                counts = self.state.prefix_counts(key)
                prefix = listing_prefix(key, counts)
                # The page's own count is among those just read (under the listings lock): not asked again.
                self.write_browse_page(prefix, counts.get(prefix, 0) if len(prefix) >= 2 else None)
        shards = self.state.listed_shards() | _shards_on_disk(self.out) if every_shard else set(changes.shards)
        changed_leaves = leaves_by_shard(changes.leaves)
        self.marked_leaves = changed_leaves  # a full build writes every leaf, but names the marked ones gone
        keys = sorted(shards | set(changed_leaves))
        for start in range(0, len(keys), SHARDS_AT_ONCE):
            self.write_shards(keys[start : start + SHARDS_AT_ONCE], recut=shards, changed=None if every_shard else changed_leaves)
        if changes.front or full:
            recent, counts = self.state.front_page_inputs(site.RECENT_COUNT)
            self.write_files(site.front_page(recent, sum(c for _, c in counts), counts, self.settings))
        return self.files

    def write_browse_path(self, key: str, *, left: bool = False) -> None:
        """The browse pages from a changed package's two-character range down to the range that lists
        it: O(depth) pages. A range that has just grown past PAGE_SIZE gets its sub-ranges written.
        `left`: a package left `key`; the range the path ends at (which lists packages, or went)
        may have shrunk from one split into sub-ranges, whose pages go."""
        prefix = key[:2]
        while True:
            children = self.write_browse_page(prefix)
            if children is None:
                if left:
                    self._drop_sub_ranges(site.browse_folder(prefix))
                return
            for child in children:
                if key.startswith(child) or child in self.browse_pages:  # next on this path, or written already
                    continue
                if not (self.out / site.browse_page_path(child)).is_file():
                    self.write_browse_tree(child)
            if len(prefix) >= len(key):
                return
            prefix = key[: len(prefix) + 1]

    def write_browse_tree(self, prefix: str) -> None:
        """The page of `prefix` and of every range under it (a full build, a range that split)."""
        for child in self.write_browse_page(prefix) or []:
            self.write_browse_tree(child)

    def write_browse_page(self, prefix: str, total: int | None = None) -> list[str] | None:
        """Writes (or, if nothing starts with it any more, removes) the page of `prefix`, once per
        build; returns its sub-ranges when it lists them instead of packages, else None. `total`:
        the prefix's package count when the caller has read it already."""
        if prefix not in self.browse_pages:
            self.browse_pages[prefix] = self._render_browse_page(prefix, total)
        return self.browse_pages[prefix]

    def _render_browse_page(self, prefix: str, total: int | None) -> list[str] | None:
        folder = site.browse_folder(prefix)
        page = self.state.browse_inputs(prefix, site.PAGE_SIZE, total)
        if not page.total:
            self.remove(folder, gone=[site.browse_page_path(prefix)])
            return None
        links = [(landing(child, count, first, last), count) for child, count, first, last in page.children]
        self.write_files(site.browse_page(prefix, page.total, list(page.summaries), links, self.settings))
        wanted = {child[-1] for child, *_ in page.children}
        for stale in sorted(_folders_in(self.out / folder) - wanted):  # sub-range folders that no longer belong
            self.remove(f"{folder}/{stale}")
        return [child for child, *_ in page.children] if page.total > site.PAGE_SIZE else None

    def write_shards(self, keys: list[str], *, recut: set[str], changed: Mapping[str, set[str]] | None) -> None:
        """Some search shards (`recut`: those whose leaves were cut or joined; `changed`: the leaves
        whose records changed, None: all): the first leaves of all of them, and the records of those
        that are one leaf, asked at once (on PostgreSQL, one query each, under the listings lock)."""
        heads = self.state.first_leaves(keys, at_most=2)
        single = self.state.leaves_entries([(key, bounds[0]) for key, bounds in heads.items() if len(bounds) == 1])
        for key in keys:
            bounds = heads.get(key, [])
            entries = single.get((key, bounds[0]), []) if len(bounds) == 1 else []
            self.write_shard(key, bounds, entries, recut=key in recut, changed=None if changed is None else changed[key])

    def write_shard(self, key: str, bounds: list[str], entries: list[bytes], *, recut: bool, changed: set[str] | None) -> None:
        """One search shard (`bounds`: its first two leaves; `entries`: the records of the first when
        it is the only one): its records in `<key>.json` while it is one leaf; else that file lists its
        leaves, each in `<key>/<id>.json`. `recut`: its leaves were cut or joined (the list is written
        again and leaves no longer listed go); `changed`: the leaves whose records changed (None: all).
        Without a cut, only the changed leaves are looked at: O(1) however many leaves the shard has."""
        relative, folder = site.search_shard_path(key), f"{site.SEARCH_SHARD_ROOT}/{key}"
        marked = changed if changed is not None else self.marked_leaves.get(key, set())
        if len(bounds) <= 1:  # one leaf is <key>.json: no leaf file, neither its own nor a changed one's
            leaves = sorted(set(bounds) | marked)
            self.remove(folder, gone=[path for bound in leaves for path in _with_sibling(site.search_leaf_path(key, bound))])
            if not bounds:
                for path in _with_sibling(relative):
                    self.remove(path, gone=[path])
            if bounds:
                self.write_search_json(relative, site.join_search_shard(entries))
            if marked - set(bounds) and (marked | set(bounds)) - {""}:  # a leaf went from a cut shard (a first leaf's bound is "")
                self.drop_unrendered(folder, kept=lambda path: False)  # leaves an earlier render cut may be left
            return
        if recut or changed is None:
            targets = self._recut_shard(key, changed, marked)
        else:
            targets = sorted(self.state.existing_leaves(key, changed))
        for bound in targets:
            self.write_search_json(site.search_leaf_path(key, bound), site.join_search_shard(self.state.leaf_entries(key, bound)))

    def _recut_shard(self, key: str, changed: set[str] | None, marked: set[str]) -> list[str]:
        """Writes the list of a shard's leaves and removes the leaf files it no longer lists; returns
        the leaves to write: the changed ones (None: all) and any whose file is missing. `marked`:
        the leaves whose records changed (in a full build, those markings name)."""
        bounds = self.state.shard_leaves(key)
        self.write_search_json(site.search_shard_path(key), site.search_shard_index(bounds))
        folder = f"{site.SEARCH_SHARD_ROOT}/{key}"
        ids = {site.search_leaf_id(bound): bound for bound in bounds}
        went = marked - set(bounds)  # deleted, or joined into a neighbour
        for bound in sorted(went):
            for path in _with_sibling(site.search_leaf_path(key, bound)):
                self.remove(path, gone=[path])
        on_disk = set()
        for name in sorted(_names_in(self.out / folder)):
            leaf = name.split(".", 1)[0]
            if leaf not in ids:
                self.remove(f"{folder}/{name}")
            elif name.endswith(".json"):
                on_disk.add(leaf)
        targets = [bound for leaf, bound in ids.items() if changed is None or bound in changed or leaf not in on_disk]
        if went:  # the listed leaves' files stay, written yet or not
            self.drop_unrendered(folder, kept=lambda path: path.rpartition("/")[2].split(".", 1)[0] in ids)
        return targets

    def drop_unrendered(self, folder: str, *, kept: Callable[[str], bool]) -> None:
        """Names removed each file the readers' tree holds under `folder` that this render does not
        keep there (`kept(path)`): one LIST, once per folder and build; nothing without `tree` (this
        folder is the readers' tree: its removals are named already). For a range that shrank or
        went, or a shard that lost leaves, whose files an earlier render may have left."""
        if self.tree is None or folder in self.asked:
            return
        self.asked.add(folder)
        named = set(self.files.removed)
        self.files.removed.extend(sorted(path for path in set(self.tree(folder + "/")) - named if not kept(path)))

    def _drop_sub_ranges(self, folder: str) -> None:
        """A browse range that lists packages (or went) keeps only its own page, as rendered here."""
        self.drop_unrendered(folder, kept=lambda path: path.rpartition("/")[0] == folder and (self.out / path).is_file())

    def write_search_json(self, relative: str, data: bytes) -> None:
        # Level 6, not 9: a publish rewrites up to SEARCH_KEY_LIMIT leaves; 9 costs 2-3x for ~2 % smaller.
        self.write_files({relative: data, relative + ".gz": gzip_bytes(data, 6)} if self.settings.gzip else {relative: data})

    def write_files(self, files: Mapping[str, bytes]) -> None:
        for relative, data in files.items():
            if write_if_changed(self.out / relative, data) or self.name_unchanged:
                self.files.written.append(relative)

    def remove(self, relative: str, *, gone: Iterable[str] = ()) -> None:
        """Removes a listing file or folder here and names removed each file it held: a tree bucket
        and a cache in front remove and purge by file, not by folder. `gone`: the files the state
        says this removal takes away, named too when rendering other builds' markings (this folder
        may never have held them: another instance rendered them)."""
        held: list[str] = []
        # Usually absent (a full build asks this of every one-leaf shard's leaf folder, ~850 over the
        # real corpus): one lstat then, not remove_tree's two path resolutions and a folder walk.
        if os.path.lexists(self.out / relative):
            held = _files_under(self.out, relative)
            remove_tree(self.out, relative)
        named = set(held) | (set(gone) if self.name_unchanged else set())
        self.files.removed.extend(sorted(named))


def write_fixed_files(settings: Settings) -> FileChanges:
    """What a full build writes once: the site's assets and not-found page, the ping answer and
    the extras for unconfigurable hosts; and what older trees kept that this layout does not."""
    files = FileChanges()
    for relative, data in {**site.site_assets(settings), "-/ping": b"{}", **STATIC_EXTRAS}.items():
        if write_if_changed(settings.out_dir / relative, data):
            files.written.append(relative)
    for legacy in (LEGACY_SEARCH_FOLDER, *LEGACY_LISTINGS):
        if remove_tree(settings.out_dir, legacy):
            files.removed.append(legacy)
    (settings.state_folder / LEGACY_FULL_SEARCH_FILE).unlink(missing_ok=True)
    return files


def write_whole_documents(settings: Settings, state: ListingMemory, *, name_unchanged: bool = False) -> FileChanges:
    """-/all and -/search.json: one URL each, listing every package, so they cannot be sharded.
    Both grow with the registry (tens of MB at 1M versions): streamed from the state's rows to
    their files and gzip siblings, never held whole. `name_unchanged`: each file is named written
    whatever this folder held (as IndexWriter's)."""
    out = settings.out_dir
    stamp = state.whole_document_stamp()
    documents = {
        out / ALL_DOCUMENT: all_index_chunks(stamp, state.whole_document_fragments("all_fragment")),
        out / SEARCH_DOCUMENT: search_document_chunks(state.whole_document_fragments("search_fragment"), stamp),
    }
    replaced = write_streams_if_changed(documents, 9 if settings.gzip else None)
    if name_unchanged:
        replaced = [file for path in documents for file in (path, path.with_name(path.name + ".gz"))[: 2 if settings.gzip else 1]]
    files = FileChanges()
    files.written.extend(path.relative_to(out).as_posix() for path in replaced)
    return files


def _folders_in(folder: Path) -> set[str]:
    try:
        return {entry.name for entry in os.scandir(folder) if entry.is_dir()}
    except FileNotFoundError:
        return set()


def _with_sibling(relative: str) -> tuple[str, str]:
    return relative, relative + ".gz"


def _files_under(out: Path, relative: str) -> list[str]:
    """The files of the tree at `relative` (itself, or the files of the folder it names)."""
    target = out / relative
    if target.is_file():
        return [relative]
    return sorted(path.relative_to(out).as_posix() for path in target.rglob("*") if path.is_file())


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


@dataclass(frozen=True)
class Indexed:
    """What phase 5 wrote, whether -/all and -/search.json are left stale for the refresher (True),
    rendered (False) or not looked at (None: their mark, if any, stays as it is), and the stale
    pages earlier builds left that it rendered (to be settled once they are visible)."""

    files: FileChanges
    whole_stale: bool | None
    rendered_stale: tuple[StalePage, ...] = ()


def write_indexes(
    context: BuildContext, state: BuildListings, changes: ListingChanges, start: BuildStart, *, packages_changed: bool, defer_whole: bool,
    defer_listings: bool = False, tree: TreeListing | None = None,
) -> Indexed:  # fmt: skip
    """Phase 5: the fixed files of a full build, the listing documents the changes touched, and
    -/all and -/search.json now, or marked stale for the refresher (`defer_whole`). With
    `defer_listings` (a write's build on PostgreSQL), the listing pages the changes touched are
    only marked stale in the state, for the leader; a build without it renders those marks too.
    `tree`: what the readers' tree holds under a folder, where out_dir is not it (IndexWriter)."""
    settings, files = context.settings, FileChanges()
    if context.full:
        files.absorb(write_fixed_files(settings))
    every_shard = context.full or start.shards_stale
    rendered: tuple[StalePage, ...] = ()
    if defer_listings and not every_shard:
        if changes.touched:
            changes.split |= split_ranges(state.prefix_growth(), site.PAGE_SIZE)
            state.mark_listings_stale(changes.stale_pages())
    else:
        if not defer_listings:
            rendered = tuple(state.stale_listings())
            changes.take(rendered)
        if changes.touched or every_shard:
            writer = IndexWriter(settings, state, name_unchanged=bool(rendered), tree=tree)
            files.absorb(writer.write_listings(changes, full=context.full, every_shard=every_shard))
    whole = _whole_documents(context, state, start, packages_changed=packages_changed, defer_whole=defer_whole)
    files.absorb(whole.files)
    return Indexed(files, whole.whole_stale, rendered)


def _whole_documents(context: BuildContext, state: ListingMemory, start: BuildStart, *, packages_changed: bool, defer_whole: bool) -> Indexed:
    if not (packages_changed or context.full or start.whole_stale):
        return Indexed(FileChanges(), whole_stale=None)  # a mark another write set meanwhile is kept
    if defer_whole and not context.full:
        return Indexed(FileChanges(), whole_stale=True)
    # Marked on PostgreSQL: by a write on any instance, or by a leader whose upload failed. This
    # folder's copy may equal the render while the tree bucket holds an older one: upload it anyway.
    name_unchanged = start.whole_stale and context.settings.database_url is not None
    return Indexed(write_whole_documents(context.settings, state, name_unchanged=name_unchanged), whole_stale=False)
