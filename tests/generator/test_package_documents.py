"""A package's documents (registry_gen.build.write.package_documents): the bytes the tree holds
for the full, abbreviated, dist-tags and per-tag documents and their gzip siblings, computed
apart from writing them (the bench times the two apart), and no compression spent on a document
too short for gzip ever to shrink it."""

from __future__ import annotations

import gzip
import json
import os
from typing import Any

import pytest

from registry_gen.build import run_build
from registry_gen.build import write as write_phase
from registry_gen.hosting import tag_documents
from registry_gen.packument import abbreviate, dumps
from registry_gen.settings import Settings
from registry_gen.state.sqlite_manifests import ManifestCache
from registry_gen.writer import gzip_bytes
from tests.support import make_tarball


def test_a_build_compresses_no_document_gzip_cannot_shrink(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    compressed: list[bytes] = []

    def counting(data: bytes, level: int = 9) -> bytes:
        compressed.append(data)
        return gzip_bytes(data, level)

    monkeypatch.setattr(write_phase, "gzip_bytes", counting)
    make_tarball(settings.content_dir, "tiny", "1.0.0", description="a package of the registry " * 8)
    assert run_build(settings).errors == []
    dist_tags = (settings.out_dir / "-/package/tiny/dist-tags").read_bytes()
    assert len(dist_tags) <= 21  # {"latest":"1.0.0"}
    assert dist_tags not in compressed  # the full, abbreviated and latest documents only
    assert len(compressed) == 3
    assert not (settings.out_dir / "-/package/tiny/dist-tags.gz").exists()


@pytest.mark.parametrize("length", range(1, 48))
def test_the_shortcut_gives_the_sibling_compressing_would(length: int) -> None:
    """Up to GZIP_NEVER_SMALLER bytes no input gzips smaller; above, the rule compresses and keeps
    the sibling only where it is smaller, as before (random bytes, repeated bytes and JSON-like text)."""
    for data in (os.urandom(length), b"a" * length, (b'{"latest":"1.0.0-beta.12345678901234567890"}' * 2)[:length]):
        packed = gzip_bytes(data, write_phase.DOCUMENT_GZIP_LEVEL)
        expected = packed if len(packed) < len(data) else None
        assert write_phase.gzip_sibling(data) == expected


def test_package_documents_are_the_serialised_documents(settings: Settings) -> None:
    make_tarball(settings.content_dir, "@scope/docs", "1.0.0", description="<b>&</b> ☃ " * 40)
    make_tarball(settings.content_dir, "@scope/docs", "2.0.0-rc.1", description="next")
    assert run_build(settings).errors == []
    packument = json.loads((settings.out_dir / "@scope/docs/index.html").read_bytes())
    documents = {d.relative: d for d in write_phase.package_documents(packument, gzip=True)}
    expected = {
        "@scope/docs/index.html": dumps(packument),
        "@scope/docs/abbreviated.json": dumps(abbreviate(packument)),
        "-/package/@scope/docs/dist-tags": dumps(packument["dist-tags"]),
        **{f"@scope/docs/{tag}/index.html": dumps(doc) for tag, doc in tag_documents(packument).items()},
    }
    assert {relative: d.data for relative, d in documents.items()} == expected
    for relative, document in documents.items():
        assert (settings.out_dir / relative).read_bytes() == document.data
        sibling = settings.out_dir / (relative + ".gz")
        if document.packed is None:
            assert not sibling.exists()
        else:
            assert sibling.read_bytes() == document.packed and gzip.decompress(document.packed) == document.data
    assert documents["@scope/docs/index.html"].packed is not None


def test_a_build_reads_each_version_s_cache_entry_no_more_than_it_uses(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """A version's README and file list come from the manifest cache without its manifest's bytes
    (the pages have the manifest in the document), and the latest version's README is read once
    for the document and the pages: a full build fetches a version's manifest for its document
    and for the dependency links, its README once."""
    fetched: dict[str, list[str]] = {"manifest": [], "readme": []}
    for method, seen in fetched.items():
        original = getattr(ManifestCache, method)

        def counting(self: ManifestCache, shasum: str, original: Any = original, seen: list[str] = seen) -> Any:
            seen.append(shasum)
            return original(self, shasum)

        monkeypatch.setattr(ManifestCache, method, counting)
    for name in ("alpha", "beta", "gamma"):
        make_tarball(settings.content_dir, name, "1.0.0", files={"README.md": f"# {name} readme\n", "index.js": ""})
    assert run_build(settings).errors == []
    assert len(fetched["manifest"]) <= 2 * 3  # was 4 a version
    assert len(fetched["readme"]) == 3  # was 2 a version
    page = (settings.out_dir / "-/web/package/beta/v/1.0.0/index.html").read_text(encoding="utf-8")
    assert "beta readme</h1>" in page
    assert json.loads((settings.out_dir / "beta/index.html").read_bytes())["readme"] == "# beta readme\n"
