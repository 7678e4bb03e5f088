"""A package's documents (registry_gen.build.write.package_documents): the bytes the tree holds
for the full, abbreviated, dist-tags and per-tag documents and their gzip siblings, computed
apart from writing them (the bench times the two apart), and a sibling only for a document of at
least one TCP segment (GZIP_SIBLING_FROM)."""

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


def test_a_build_compresses_no_document_under_one_segment(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a document of GZIP_SIBLING_FROM bytes or more is compressed and gets a sibling: here the
    full document (it carries the README); the abbreviated, dist-tags and latest ones stay plain."""
    compressed: list[bytes] = []

    def counting(data: bytes, level: int = 9) -> bytes:
        compressed.append(data)
        return gzip_bytes(data, level)

    monkeypatch.setattr(write_phase, "gzip_bytes", counting)
    make_tarball(settings.content_dir, "tiny", "1.0.0", files={"README.md": "a package of the registry " * 80})
    assert run_build(settings).errors == []
    out = settings.out_dir
    full = (out / "tiny/index.html").read_bytes()
    small = ["tiny/abbreviated.json", "tiny/latest/index.html", "-/package/tiny/dist-tags"]
    assert len(full) >= write_phase.GZIP_SIBLING_FROM > max(len((out / relative).read_bytes()) for relative in small)
    assert compressed == [full]
    assert gzip.decompress((out / "tiny/index.html.gz").read_bytes()) == full
    assert not [relative for relative in small if (out / (relative + ".gz")).exists()]


LENGTHS = [1, 21, 22, 200, write_phase.GZIP_SIBLING_FROM - 1, write_phase.GZIP_SIBLING_FROM, write_phase.GZIP_SIBLING_FROM + 1, 5000]


@pytest.mark.parametrize("length", LENGTHS)
def test_a_sibling_only_from_one_segment_and_only_when_smaller(length: int) -> None:
    """Under GZIP_SIBLING_FROM bytes no sibling, however well the document compresses; from there the
    rule compresses and keeps the sibling only where it is smaller (random bytes, repeated bytes and
    JSON-like text)."""
    for data in (os.urandom(length), b"a" * length, (b'{"latest":"1.0.0-beta.12345678901234567890"}' * 200)[:length]):
        packed = gzip_bytes(data, write_phase.DOCUMENT_GZIP_LEVEL)
        expected = packed if len(data) >= write_phase.GZIP_SIBLING_FROM and len(packed) < len(data) else None
        assert write_phase.gzip_sibling(data) == expected


def test_a_document_gets_its_sibling_past_the_threshold_and_loses_it_below(settings: Settings) -> None:
    """A package whose full document grows past GZIP_SIBLING_FROM (a version with a long README)
    gets `index.html.gz`; when that version goes and the document shrinks below, the sibling goes
    too (the package's files it no longer owns are removed), so no stale sibling is served."""
    make_tarball(settings.content_dir, "grows", "1.0.0")
    assert run_build(settings).errors == []
    document, sibling = settings.out_dir / "grows/index.html", settings.out_dir / "grows/index.html.gz"
    assert len(document.read_bytes()) < write_phase.GZIP_SIBLING_FROM and not sibling.exists()

    long_readme = make_tarball(settings.content_dir, "grows", "2.0.0", files={"README.md": "a long readme line\n" * 100})
    grown = run_build(settings)
    assert grown.errors == [] and "grows/index.html.gz" in grown.written
    assert gzip.decompress(sibling.read_bytes()) == document.read_bytes()

    long_readme.unlink()
    shrunk = run_build(settings)
    assert shrunk.errors == [] and "grows/index.html.gz" in shrunk.removed
    assert len(document.read_bytes()) < write_phase.GZIP_SIBLING_FROM and not sibling.exists()


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
    fetched: dict[str, list[str]] = {"manifest": [], "manifests_of": [], "readme": [], "extras": []}
    for method, seen in fetched.items():
        original = getattr(ManifestCache, method)

        def counting(self: ManifestCache, shasum: Any, original: Any = original, seen: list[str] = seen) -> Any:
            shasums = [shasum] if isinstance(shasum, str) else list(shasum)  # manifests_of: many at once
            seen.extend(shasums)
            return original(self, shasums[0] if isinstance(shasum, str) else shasums)

        monkeypatch.setattr(ManifestCache, method, counting)
    for name in ("alpha", "beta", "gamma"):
        make_tarball(settings.content_dir, name, "1.0.0", files={"README.md": f"# {name} readme\n", "index.js": ""})
    assert run_build(settings).errors == []
    assert len(fetched["manifest"] + fetched["manifests_of"]) <= 2 * 3  # was 4 a version
    assert len(fetched["readme"] + fetched["extras"]) == 3  # was 2 a version
    page = (settings.out_dir / "-/web/package/beta/v/1.0.0/index.html").read_text(encoding="utf-8")
    assert "beta readme</h1>" in page
    assert json.loads((settings.out_dir / "beta/index.html").read_bytes())["readme"] == "# beta readme\n"
