"""The HTML site at scale: render and write it for a generated registry of 10,000 packages, then
load its front page and search it in headless Chromium. Figures are reported, never asserted.

The packages are generated in memory as package documents (build_packument over synthetic
manifests with a few KB of Markdown README each), so this measures the site stage alone, the
part `run_build` spends in site.package_pages and the front page, name-range pages and search
shards, not archive reading.

Figures:
- full site render+write for N packages, against the raw write of the same bytes (the floor);
- one package changed: its pages, the front page, the name-range pages on its key's path and its
  search shards
  (what each build, watch rebuild or API publish pays), against the raw write of the same bytes;
- the front page's load time in Chromium (navigation start -> load event, median of 5 fresh
  contexts), against an empty HTML page from the same server;
- the first search (typing until the result list shows, the word's shard fetched and parsed on the
  way), against fetching and parsing that shard alone.

Run `python -m bench.bench_site [--quick]` by hand.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from registry_gen import site, site_search
from registry_gen.meta import PackageMeta
from registry_gen.packument import Release, build_packument, summarize
from registry_gen.settings import Settings

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
# Types a query the way a person does (an input event) and times it until the result list fills.
SEARCH_IN_PAGE = """(query) => new Promise((resolve) => {
  const list = document.getElementById('search-list');
  const input = document.getElementById('q');
  const started = performance.now();
  new MutationObserver((changes, observer) => {
    if (list.children.length) { observer.disconnect(); resolve(performance.now() - started); }
  }).observe(list, { childList: true });
  input.value = query;
  input.dispatchEvent(new Event('input', { bubbles: true }));
})"""
WORDS = (
    "parse format stream buffer request response cache token widget config router schema "
    "logger queue worker event promise async render layout theme colour icon button table "
    "chart date time locale string number array object map set error retry timeout socket"
).split()


# ---------------------------------------------------------------- the synthetic registry


def _readme(rng: random.Random, name: str) -> str:
    words = lambda n: " ".join(rng.choice(WORDS) for _ in range(n))  # noqa: E731
    rows = "\n".join(f"| `{rng.choice(WORDS)}` | {words(4)} |" for _ in range(rng.randint(2, 8)))
    paragraphs = "\n\n".join(words(rng.randint(20, 60)) + "." for _ in range(rng.randint(2, 6)))
    return (
        f"# {name}\n\n{words(12)}.\n\n## Install\n\n```sh\nnpm install {name}\n```\n\n## Usage\n\n"
        f"```js\nconst lib = require('{name}');\nlib.{rng.choice(WORDS)}({{ {rng.choice(WORDS)}: true }});\n```\n\n"
        f"{paragraphs}\n\n## Options\n\n| option | meaning |\n| --- | --- |\n{rows}\n\n"
        f"- **{rng.choice(WORDS)}**: {words(8)}\n- **{rng.choice(WORDS)}**: {words(8)}\n\n"
        f"See [the docs](https://example.org/{rng.choice(WORDS)}) for more.\n"
    )


def synthetic_packuments(count: int, base_url: str, seed: int = 11) -> list[dict[str, Any]]:
    """`count` package documents: 1-5 versions, a third scoped, dependencies on each other."""
    rng = random.Random(seed)
    names = [
        (f"@team-{i % 40}/" if i % 3 == 0 else "") + f"{rng.choice(WORDS)}-{rng.choice(WORDS)}.{i:05d}"
        for i in range(count)
    ]
    documents = []
    for index, name in enumerate(names):
        versions = [f"1.{minor}.0" for minor in range(rng.randint(1, 5))]
        dependencies = {rng.choice(names): f"^1.{rng.randint(0, 4)}.0" for _ in range(rng.choice((0, 1, 2, 3, 6)))}
        dependencies.pop(name, None)
        releases = []
        for position, version in enumerate(versions):
            manifest = {
                "name": name,
                "version": version,
                "description": " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14))),
                "keywords": rng.sample(WORDS, rng.randint(0, 5)),
                "license": rng.choice(("MIT", "ISC", "Apache-2.0", "BSD-3-Clause")),
                "repository": {"type": "git", "url": f"git+https://example.org/git/{index}.git"},
                "homepage": f"https://example.org/{index}",
                "dependencies": dependencies,
                "author": {"name": f"author {index % 97}", "email": f"a{index % 97}@example.org"},
            }
            releases.append(
                Release(
                    version=version,
                    manifest=manifest,
                    shasum=f"{index:040x}",
                    integrity="sha512-" + "A" * 86 + "==",
                    size=4_000 + rng.randint(0, 40_000),
                    file_count=rng.randint(3, 60),
                    unpacked_size=12_000 + rng.randint(0, 200_000),
                    time=f"2024-{1 + (index + position) % 12:02d}-{1 + index % 28:02d}T10:{position:02d}:00.000Z",
                )
            )
        documents.append(
            build_packument(
                name, releases, PackageMeta(name=name), base_url=base_url, readme=_readme(rng, name), readme_filename="README.md"
            )
        )
    return documents


# ---------------------------------------------------------------- measuring the site stage


def _write_all(out: Path, files: dict[str, bytes]) -> None:
    for relative, data in files.items():
        target = out / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def _raw_write_seconds(files: dict[str, bytes], folder: Path) -> float:
    """The floor: the same bytes written with plain open/write (no templating, no atomic rename)."""
    started = time.perf_counter()
    _write_all(folder, files)
    return time.perf_counter() - started


def browse_tree(prefix: str, members: list[tuple[str, dict[str, Any]]], settings: Settings, key: str | None = None) -> dict[str, bytes]:
    """The browse page of `prefix` and the pages under it, as the build's walk writes them
    (build._write_browse_tree): `members` are (key, summary) of the names under `prefix`, sorted.
    With `key`, only the pages on that key's path (what a change of that package rewrites)."""
    split = len(members) > site.PAGE_SIZE
    children: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for member_key, summary in members if split else []:
        if member_key != prefix:
            children.setdefault(member_key[: len(prefix) + 1], []).append((member_key, summary))
    own = [s for k, s in members if k == prefix or not split]
    files = site.browse_page(prefix, len(members), own, [(c, len(m)) for c, m in children.items()], settings)
    for child, below in children.items():
        if key is None or key.startswith(child):
            files.update(browse_tree(child, below, settings, key))
    return files


def index_files(summaries: list[dict[str, Any]], settings: Settings, only: dict[str, Any] | None = None) -> dict[str, bytes]:
    """Front page, name-range pages and search shards, as the build writes them: all of them, or
    with `only` the ones a change of that package rewrites (the range pages on its key's path and
    its shards)."""
    keyed = sorted((site.name_key(s["name"]), s["name"], s) for s in summaries)
    ranges: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    shards: dict[str, list[dict[str, Any]]] = {}
    for key, _, summary in keyed:
        ranges.setdefault(key[:2], []).append((key, summary))
    for summary in sorted(summaries, key=lambda s: s["name"]):
        for key in site_search.search_keys(summary):
            shards.setdefault(key, []).append(summary)
    recent = sorted(summaries, key=lambda s: (s.get("modified") or "", s["name"]), reverse=True)[: site.RECENT_COUNT]
    files = site.front_page(recent, len(summaries), [(k, len(v)) for k, v in ranges.items()], settings)
    changed_key = site.name_key(only["name"]) if only else None
    for root, members in ranges.items():
        if changed_key is None or changed_key.startswith(root):
            files.update(browse_tree(root, members, settings, changed_key))
    for key in site_search.search_keys(only) if only else shards:
        files[site.search_shard_path(key)] = site.search_shard(shards[key])
    return files


def render_site(documents: list[dict[str, Any]], settings: Settings) -> tuple[dict[str, bytes], float]:
    """What the build's site stage produces, and the seconds to render and write it (atomically)."""
    from registry_gen.writer import write_if_changed

    names = {d["name"] for d in documents}
    started = time.perf_counter()
    files: dict[str, bytes] = {}
    for document in documents:
        sizes = {v: 5_000 for v in document["versions"]}
        files.update(site.package_pages(document, settings, registry_names=names, tarball_sizes=sizes))
    files.update(index_files([summarize(d) for d in documents], settings))
    files.update(site.site_assets(settings))
    for relative, data in files.items():
        write_if_changed(settings.out_dir / relative, data)
    return files, time.perf_counter() - started


def incremental_change(documents: list[dict[str, Any]], settings: Settings, position: int) -> tuple[dict[str, bytes], float]:
    """One package is republished: its pages, the front page, the range pages on its key's path and its shards again."""
    from registry_gen.writer import write_if_changed

    changed = json.loads(json.dumps(documents[position]))
    changed["time"]["modified"] = changed["modified"] = f"2030-01-{1 + position % 28:02d}T00:00:00.000Z"
    names = {d["name"] for d in documents}
    summaries = [summarize(d) for d in documents]
    summaries[position] = summarize(changed)
    started = time.perf_counter()
    files = dict(site.package_pages(changed, settings, registry_names=names, tarball_sizes={}))
    files.update(index_files(summaries, settings, only=summaries[position]))
    written = {r: d for r, d in files.items() if write_if_changed(settings.out_dir / r, d)}
    return written, time.perf_counter() - started


# ---------------------------------------------------------------- measuring the browser


@contextmanager
def serve(root: Path) -> Iterator[str]:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def _median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples), 1)


def browser_figures(root: Path, url: str, rounds: int) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    (root / "-/web/empty.html").write_text("<!doctype html><title>empty</title>")
    load_ms = "() => { const n = performance.getEntriesByType('navigation')[0]; return n.loadEventEnd - n.startTime; }"
    figures: dict[str, list[float]] = {"front": [], "empty": [], "search": [], "fetch_shard": []}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for _ in range(rounds):
                for key, page_path in (("empty", "-/web/empty.html"), ("front", "-/web/index.html")):
                    context = browser.new_context()
                    page = context.new_page()
                    page.goto(url + page_path, wait_until="load")
                    figures[key].append(page.evaluate(load_ms))
                    context.close()
                context = browser.new_context()
                page = context.new_page()
                page.goto(url + "-/web/index.html", wait_until="load")
                figures["fetch_shard"].append(
                    page.evaluate(
                        "async () => { const t = performance.now(); const r = await fetch('search/wi.json');"
                        " await r.json(); return performance.now() - t; }"
                    )
                )
                context.close()
                context = browser.new_context()
                page = context.new_page()
                page.goto(url + "-/web/index.html", wait_until="load")
                figures["search"].append(page.evaluate(SEARCH_IN_PAGE, "widget"))
                context.close()
        finally:
            browser.close()
    return {key: _median_ms(values) for key, values in figures.items()}


# ---------------------------------------------------------------- the figures


def _figure(figure: str, value: float, unit: str, baseline: float | None, goal: str, note: str) -> dict[str, Any]:
    ratio = round(value / baseline, 2) if baseline else None
    return {"figure": figure, "value": round(value, 3), "unit": unit, "baseline": baseline, "ratio": ratio, "goal": goal, "note": note}


def run(quick: bool) -> list[dict[str, Any]]:
    count = 1_000 if quick else 10_000
    rounds = 3 if quick else 5
    work = Path(tempfile.mkdtemp(prefix="bench-site-"))
    (work / "public").mkdir()
    try:
        with serve(work / "public") as url:
            settings = Settings(content_dir=work / "content", out_dir=work / "public", base_url=url)
            started = time.perf_counter()
            documents = synthetic_packuments(count, url)
            generate_s = time.perf_counter() - started
            site.template_fingerprint(settings)  # as every build does first
            files, full_s = render_site(documents, settings)
            full_raw_s = _raw_write_seconds(files, work / "raw-full")
            written, change_s = incremental_change(documents, settings, count // 2)
            change_raw_s = _raw_write_seconds(written, work / "raw-change")
            pages = sum(1 for r in files if r.endswith("index.html"))
            shard_bytes = len(files[site.search_shard_path("wi")])
            largest_shard = max(len(d) for r, d in files.items() if r.startswith(site.SEARCH_SHARD_ROOT))
            front_bytes = len(files[site.FRONT_PAGE])
            browser = browser_figures(work / "public", url, rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    mib = sum(len(d) for d in files.values()) / 2**20
    return [
        _figure(
            f"site render+write, {count} packages",
            full_s,
            "s",
            round(full_raw_s, 3),
            "well under the archive-reading time of a full build",
            f"{pages} pages, {mib:.1f} MiB; baseline = plain write of the same bytes; "
            f"generating the documents took {generate_s:.1f}s (not counted)",
        ),
        _figure(
            f"site per package page, {count} packages",
            full_s / count * 1000,
            "ms",
            round(full_raw_s / count * 1000, 3),
            "< 10 ms",
            "render (Markdown + sanitise + jinja) and atomic write, per package",
        ),
        _figure(
            f"one package changed, {count} packages",
            change_s,
            "s",
            round(change_raw_s, 3),
            "< 1 s, the same at any registry size (paid by every build, watch rebuild and API publish)",
            f"{len(written)} files rewritten: its pages, the front page, the name-range pages on its key's path, its search shards; "
            "baseline = plain write of those bytes",
        ),
        _figure(
            f"front page load in Chromium, {count} packages",
            browser["front"],
            "ms",
            browser["empty"],
            "< 1000 ms",
            f"navigation start to load event, median of {rounds} fresh contexts; front page {front_bytes / 1024:.0f} KiB "
            "+ CSS + JS; baseline = an empty HTML page from the same server",
        ),
        _figure(
            f"first search in Chromium, {count} packages",
            browser["search"],
            "ms",
            browser["fetch_shard"],
            "< 500 ms",
            f"typing until results show (80 ms input debounce included); the word's shard {shard_bytes / 1024:.0f} KiB "
            f"(largest {largest_shard / 1024:.0f} KiB); baseline = fetch + JSON.parse of that shard alone",
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 packages instead of 10,000")
    args = parser.parse_args(argv)
    for row in run(args.quick):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
