"""Every hostile archive of the corpus is refused with its rule, by the reader and by a real build."""

from __future__ import annotations

import dataclasses
import io
import os
import tracemalloc
from pathlib import Path

import pytest

from registry_gen.archive import compute_digests, read_archive
from registry_gen.build import run_build
from registry_gen.cli import main
from registry_gen.errors import InvalidArchive, InvalidManifest
from registry_gen.manifest import validate_manifest
from registry_gen.settings import Settings
from registry_gen.verify import verify_tree
from tests.hostile.corpus import CASES, LIMITS, MiB, Case, links_inside_tgz, multi_member_zeros, package_zip
from tests.support import make_tarball

ARCHIVE_CASES = [c for c in CASES if c.stage == "archive"]
MANIFEST_CASES = [c for c in CASES if c.stage == "manifest"]
# The rules the issue lists, each of which some case must exercise.
REQUIRED_RULES = {
    "member-path", "member-type", "duplicate-member", "max-manifest-size", "compression-ratio",
    "max-unpacked-size", "max-members", "max-archive-size", "member-header", "corrupt-archive",
    "trailing-data", "archive-format", "no-package-json", "manifest-encoding", "manifest-json",
    "zip-compression", "zip-encrypted", "name-valid", "version-semver", "version-length",
}


def test_corpus_covers_every_rule() -> None:
    assert REQUIRED_RULES <= {c.rule for c in CASES}
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", ARCHIVE_CASES, ids=lambda c: c.id)
def test_reader_refuses_the_archive_with_its_rule(case: Case) -> None:
    with pytest.raises(InvalidArchive) as caught:
        read_archive(io.BytesIO(case.make()), case.limits)
    assert caught.value.rule == case.rule, str(caught.value)


def test_links_staying_below_their_folder_are_hosted_byte_for_byte_and_never_read() -> None:
    """The links are neither files of the version (npm and pnpm skip them) nor ever followed: the
    README.md that is a link is no README, the readme.txt beside it is."""
    data = links_inside_tgz()
    contents = read_archive(io.BytesIO(data), LIMITS)
    assert contents.converted is None and contents.digests == compute_digests(data)
    assert (contents.readme, contents.readme_filename) == ("the real readme\n", "readme.txt")
    assert [path for path, _ in contents.files] == ["lib/c.js", "package.json", "readme.txt"] and contents.file_count == 3


@pytest.mark.parametrize("case", MANIFEST_CASES, ids=lambda c: c.id)
def test_names_and_versions_with_path_tricks_are_refused(case: Case) -> None:
    contents = read_archive(io.BytesIO(case.make()), case.limits)  # the archive itself is sound
    with pytest.raises(InvalidManifest) as caught:
        validate_manifest(contents.manifest)
    assert case.rule in {p.rule for p in caught.value.problems}, str(caught.value)


class CountingReader(io.RawIOBase):
    """How far into the archive the reader got before it stopped."""

    def __init__(self, data: bytes):
        self._inner = io.BytesIO(data)
        self.furthest = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._inner.seek(offset, whence)

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        count = self._inner.readinto(buffer)
        self.furthest = max(self.furthest, self._inner.tell())
        return count


@pytest.mark.parametrize(
    ("limits", "rule"),
    [
        (LIMITS, "compression-ratio"),
        (dataclasses.replace(LIMITS, max_compression_ratio=10**6, max_unpacked_bytes=4 * MiB), "max-unpacked-size"),
    ],
)
def test_a_gzip_bomb_is_stopped_while_streaming_not_after(limits, rule: str) -> None:  # type: ignore[no-untyped-def]
    bomb = multi_member_zeros("stream", slices=32)  # 512 MiB of zeros in about half a megabyte
    source = CountingReader(bomb)
    tracemalloc.start()
    try:
        with pytest.raises(InvalidArchive) as caught:
            read_archive(source, limits)  # type: ignore[arg-type]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert caught.value.rule == rule
    assert source.furthest < len(bomb) // 4, f"read {source.furthest} of {len(bomb)} bytes before refusing"
    assert peak < 32 * MiB, f"peak {peak} bytes"


def test_a_zip_bomb_is_stopped_before_it_is_inflated() -> None:
    bomb = package_zip("zbomb", ("zeros.bin", b"\x00" * 256 * MiB))
    tracemalloc.start()
    try:
        with pytest.raises(InvalidArchive) as caught:
            read_archive(io.BytesIO(bomb), LIMITS)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # zipfile states each member's compressed size up front, so either cap may trip first.
    assert caught.value.rule in ("compression-ratio", "max-unpacked-size")
    assert peak < 32 * MiB, f"peak {peak} bytes"


def _snapshot(root: Path, skip: Path) -> dict[str, tuple[int, int]]:
    found = {}
    for folder, folders, files in os.walk(root):
        folders[:] = [f for f in folders if Path(folder, f) != skip]
        for name in files + [f for f in folders if Path(folder, f).is_symlink()]:
            path = Path(folder, name)
            stat = path.lstat()
            found[path.relative_to(root).as_posix()] = (stat.st_size, stat.st_mtime_ns)
    return found


def test_build_refuses_each_hostile_archive_by_name_and_rule_and_builds_the_rest(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    content, out = tmp_path / "content", tmp_path / "public"
    cases = [c for c in CASES if c.limits is LIMITS]
    for case in cases:
        (content / case.filename).parent.mkdir(parents=True, exist_ok=True)
        (content / case.filename).write_bytes(case.make())
    make_tarball(content, "good-pkg", "1.0.0")
    make_tarball(content, "@scope/good", "1.0.0")
    config = tmp_path / "registry.yaml"
    config.write_text(
        "limits:\n" + "".join(f"  {f.name}: {getattr(LIMITS, f.name)}\n" for f in dataclasses.fields(LIMITS))
    )
    before = _snapshot(tmp_path, out)

    code = main(["build", str(content), "--out", str(out), "--config", str(config), "--base-url", "http://127.0.0.1:9/"])

    errors = capsys.readouterr().err
    assert code == 1  # every refusal makes the exit code say so; the good packages are published
    for case in cases:
        lines = [line for line in errors.splitlines() if f"{case.filename}:" in line]
        assert lines and f"[{case.rule}]" in lines[0], f"{case.filename}: {lines}"
    assert (out / "good-pkg" / "index.html").is_file() and (out / "@scope/good/index.html").is_file()
    after = _snapshot(tmp_path, out)
    # Beside OUT_DIR by design: the build lock and the build state (OUT_DIR.state/), nothing else.
    assert {path for path in set(after) - set(before) if not path.startswith("public.state/")} == {".public.lock"}
    assert {k: v for k, v in after.items() if k in before} == before  # content/ untouched
    for path in out.rglob("*"):
        assert not path.is_symlink() and path.resolve().is_relative_to(out.resolve()), path
    report = verify_tree(out)
    assert report.problems == [] and report.packages == 2


def test_a_strict_build_fails_on_the_corpus_but_still_writes_the_good_packages(tmp_path: Path) -> None:
    content = tmp_path / "content"
    case = next(c for c in CASES if c.id == "tar-symlink")
    content.mkdir()
    (content / case.filename).write_bytes(case.make())
    make_tarball(content, "good-pkg", "1.0.0")
    settings = Settings(content_dir=content, out_dir=tmp_path / "public", base_url="http://127.0.0.1:9/", strict=True, limits=LIMITS)
    result = run_build(settings)
    assert [(e.path, "[member-type]" in e.reason) for e in result.errors] == [(case.filename, True)]
    assert (settings.out_dir / "good-pkg" / "index.html").is_file()
