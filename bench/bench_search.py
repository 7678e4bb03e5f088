"""The site search's shards at 100k packages: how big the largest one grows once description words
are indexed (issue 31), and how many shards a publish rewrites.

The packages' descriptions and keywords are the real-world corpus's (tests/realworld, its
package.json files), repeated to 100k packages under names that are the corpus's names plus a
three-letter suffix, so word frequencies are those of real npm descriptions. Only the shard
membership is computed (site_search.search_keys and site.search_entry, what the build stores per package):
no tree is written. Maintainers are left out (tarballs do not carry them). Figures are reported,
never asserted.
"""

from __future__ import annotations

import gzip
import itertools
import json
import math
import string
import tarfile
from collections import Counter
from pathlib import Path
from typing import Any

from registry_gen import site, site_search
from registry_gen.build.indexes import SEARCH_LEAF_MAX

PACKAGES = 100_000


def corpus_manifests() -> list[dict[str, Any]]:
    """The package.json of every corpus package (its last tarball), by name."""
    from tests.realworld.corpus import ensure_corpus

    found: dict[str, dict[str, Any]] = {}
    for path in sorted(ensure_corpus().content.rglob("*.tgz")):
        with tarfile.open(path) as archive:
            member = next((m for m in archive.getmembers() if m.name.endswith("/package.json") and m.name.count("/") == 1), None)
            data = archive.extractfile(member) if member is not None else None
            manifest = json.loads(data.read()) if data is not None else None
        if isinstance(manifest, dict) and isinstance(manifest.get("name"), str):
            found[manifest["name"]] = manifest
    return list(found.values())


def summaries(manifests: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    suffixes = ("".join(letters) for letters in itertools.product(string.ascii_lowercase, repeat=3))
    rows = []
    for manifest, suffix in zip(itertools.cycle(manifests), itertools.islice(suffixes, count)):
        description = manifest.get("description") if isinstance(manifest.get("description"), str) else ""
        keywords = [k for k in manifest.get("keywords") or [] if isinstance(k, str)] if isinstance(manifest.get("keywords"), list) else []
        rows.append({"name": f"{manifest['name']}-{suffix}", "description": description, "keywords": keywords, "maintainers": [], "version": "1.0.0"})
    return rows


def shard_sizes(rows: list[dict[str, Any]], *, descriptions: bool) -> tuple[Counter[str], Counter[str], list[int]]:
    """Records and bytes of every shard, and the shards per package (what a publish rewrites)."""
    records: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    per_package = []
    for row in rows:
        keys = site_search.search_keys(row if descriptions else {**row, "description": ""})
        entry = len(site.search_entry(row)) + 1
        per_package.append(len(keys))
        for key in keys:
            records[key] += 1
            sizes[key] += entry
    return records, sizes, per_package


def largest_shard_bytes(rows: list[dict[str, Any]], key: str) -> tuple[int, int]:
    entries = [site.search_entry(row) for row in rows if key in site_search.search_keys(row)]
    data = site.join_search_shard(entries)
    return len(data), len(gzip.compress(data, 6))


def run(quick: bool) -> list[dict[str, Any]]:
    manifests = corpus_manifests()
    rows = summaries(manifests, PACKAGES)
    records, sizes, per_package = shard_sizes(rows, descriptions=True)
    before, _, before_per_package = shard_sizes(rows, descriptions=False)
    key, count = records.most_common(1)[0]
    old_key, old_count = before.most_common(1)[0]
    described = [(k, n) for k, n in records.most_common() if len(k) == site_search.DESCRIPTION_KEY_LENGTH]
    raw, zipped = largest_shard_bytes(rows, key)
    median = sorted(records.values())[len(records) // 2]
    return [
        {
            "figure": f"Largest search shard, {PACKAGES // 1000}k packages (real-corpus descriptions and keywords)",
            "value": count,
            "unit": "packages",
            "baseline": old_count,
            "ratio": round(count / old_count, 2),
            "goal": f"every file ≤ {SEARCH_LEAF_MAX} records (leaves); the largest shard a small share of the registry",
            "met": count <= PACKAGES // 10,
            "note": (
                f"shard `{key}`: {count:,} packages ({count / PACKAGES:.1%}), {math.ceil(count / SEARCH_LEAF_MAX)}+ leaves of ≤ "
                f"{SEARCH_LEAF_MAX} records, {raw / 2**20:.1f} MiB ({zipped / 2**20:.2f} MiB gzipped) fetched by a query on "
                f"its word; largest description shard `{described[0][0]}` {described[0][1]:,}, then "
                + ", ".join(f"`{k}` {n:,}" for k, n in described[1:5])
                + f"; {len(records):,} shards, median {median} packages; baseline = the largest shard without description "
                f"words (`{old_key}`), as before issue 31; {len(manifests)} corpus packages repeated, stop-words dropped"
            ),
        },
        {
            "figure": f"Search shards one publish rewrites, {PACKAGES // 1000}k packages",
            "value": round(sum(per_package) / len(per_package), 1),
            "unit": "shards (mean)",
            "baseline": round(sum(before_per_package) / len(before_per_package), 1),
            "ratio": round(sum(per_package) / sum(before_per_package), 2),
            "goal": f"≤ {site_search.SEARCH_KEY_LIMIT} whatever the registry's size (one leaf each, two at a split)",
            "met": max(per_package) <= site_search.SEARCH_KEY_LIMIT,
            "note": (
                f"max {max(per_package)}, {sum(n == site_search.SEARCH_KEY_LIMIT for n in per_package) / len(per_package):.1%} of packages "
                f"at the limit; baseline = without description words; at most {SEARCH_LEAF_MAX} records per leaf rewritten, "
                f"largest shard holds {sizes.most_common(1)[0][1] / 2**20:.1f} MiB of records"
            ),
        },
    ]
