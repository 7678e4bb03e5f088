"""`registry-gen verify` finds each kind of damage done to a built tree, and passes a sound one."""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from registry_gen.build import run_build
from registry_gen.cli import main
from registry_gen.settings import Settings
from registry_gen.verify import hash_file, verify_tree
from tests.support import make_tarball, make_zip


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("verify")
    content = root / "content"
    for version in ("1.0.0", "1.1.0", "2.0.0-beta.1"):
        make_tarball(content, "plain", version)
    make_tarball(content, "@scope/pkg", "1.0.0")
    make_tarball(content, "@scope/pkg", "1.0.1")
    make_zip(content, "zipped", "3.0.0")
    settings = Settings(content_dir=content, out_dir=root / "public", base_url="http://127.0.0.1:9/")
    result = run_build(settings)
    assert not result.errors
    return settings.out_dir


@pytest.fixture
def tree(built: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "public"
    shutil.copytree(built, copy)
    return copy


def _edit_json(path: Path, change: Callable[[dict], None]) -> None:
    document = json.loads(path.read_bytes())
    change(document)
    path.write_text(json.dumps(document))


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


DAMAGE: dict[str, tuple[Callable[[Path], None], str, str]] = {
    # name: (damage, path of the problem, rule)
    "deleted tarball": (lambda t: (t / "plain/-/plain-1.0.0.tgz").unlink(), "plain/-/plain-1.0.0.tgz", "tarball-missing"),
    "flipped byte": (lambda t: _flip_byte(t / "@scope/pkg/-/pkg-1.0.1.tgz"), "@scope/pkg/-/pkg-1.0.1.tgz", "tarball-shasum"),
    "flipped byte (integrity)": (lambda t: _flip_byte(t / "@scope/pkg/-/pkg-1.0.1.tgz"), "@scope/pkg/-/pkg-1.0.1.tgz", "tarball-integrity"),
    "dangling latest": (
        lambda t: _edit_json(t / "plain/index.html", lambda d: d["dist-tags"].update(latest="9.9.9")),
        "plain/index.html", "latest-dangling",
    ),
    "latest removed": (
        lambda t: _edit_json(t / "zipped/index.html", lambda d: d["dist-tags"].pop("latest")),
        "zipped/index.html", "latest-missing",
    ),
    "dangling dist-tag": (
        lambda t: _edit_json(t / "plain/index.html", lambda d: d["dist-tags"].update(next="3.0.0")),
        "plain/index.html", "dist-tag-dangling",
    ),
    "deleted packument": (lambda t: (t / "zipped/index.html").unlink(), "zipped/index.html", "packument-missing"),
    "torn packument": (
        lambda t: (t / "zipped/index.html").write_bytes((t / "zipped/index.html").read_bytes()[:50]),
        "zipped/index.html", "packument-json",
    ),
    "packument of another package": (
        lambda t: shutil.copy(t / "plain/index.html", t / "zipped/index.html"), "zipped/index.html", "packument-name",
    ),
    "stale abbreviated twin": (
        lambda t: _edit_json(t / "plain/abbreviated.json", lambda d: d["versions"].pop("1.0.0")),
        "plain/abbreviated.json", "abbreviated-mismatch",
    ),
    "deleted abbreviated twin": (
        lambda t: (t / "@scope/pkg/abbreviated.json").unlink(), "@scope/pkg/abbreviated.json", "abbreviated-missing",
    ),
    "stale dist-tags file": (
        lambda t: (t / "-/package/@scope/pkg/dist-tags").write_text('{"latest":"1.0.0"}'),
        "-/package/@scope/pkg/dist-tags", "dist-tags-mismatch",
    ),
    "deleted dist-tags file": (
        lambda t: (t / "-/package/plain/dist-tags").unlink(), "-/package/plain/dist-tags", "dist-tags-missing",
    ),
    "tarball URL elsewhere": (
        lambda t: _edit_json(
            t / "zipped/index.html",
            lambda d: d["versions"]["3.0.0"]["dist"].update(tarball="http://127.0.0.1:9/other/-/other-3.0.0.tgz"),
        ),
        "zipped/index.html", "tarball-url",
    ),
    "orphan tarball": (
        lambda t: shutil.copy(t / "plain/-/plain-1.0.0.tgz", t / "plain/-/plain-0.0.1.tgz"), "plain/-/plain-0.0.1.tgz", "tarball-orphan",
    ),
    "stale gzip sibling": (
        lambda t: (t / "plain/index.html.gz").write_bytes(gzip.compress(b"{}")), "plain/index.html.gz", "gzip-mismatch",
    ),
    "package missing from -/all": (
        lambda t: _edit_json(t / "-/all/index.html", lambda d: d.pop("zipped")), "-/all/index.html", "index-mismatch",
    ),
    "deleted ping": (lambda t: (t / "-/ping").unlink(), "-/ping", "index-missing"),
    "deleted web page": (
        lambda t: (t / "-/web/package/@scope/pkg/index.html").unlink(), "-/web/package/@scope/pkg/index.html", "web-page-missing",
    ),
}


def test_a_sound_tree_verifies(built: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = verify_tree(built)
    assert report.problems == [] and report.packages == 3 and report.tarballs == 6
    assert main(["verify", str(built)]) == 0
    assert "3 packages, 6 tarballs, 0 problems" in capsys.readouterr().err


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_verify_finds_the_damage(tree: Path, damage: str, capsys: pytest.CaptureFixture[str]) -> None:
    inflict, path, rule = DAMAGE[damage]
    inflict(tree)
    found = {(p.path, p.rule) for p in verify_tree(tree).problems}
    assert (path, rule) in found, found
    assert main(["verify", str(tree)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith(f"{path}: ") and line.endswith(f"[{rule}]") for line in lines), lines


def test_verify_reads_tarballs_in_chunks(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = tree / "plain/-/plain-1.1.0.tgz"
    reads: list[int] = []
    real_open = open

    class Spy:
        def __init__(self, handle):  # type: ignore[no-untyped-def]
            self.handle = handle

        def __enter__(self):  # type: ignore[no-untyped-def]
            return self

        def __exit__(self, *exc):  # type: ignore[no-untyped-def]
            self.handle.close()

        def read(self, size: int = -1) -> bytes:
            reads.append(size)
            return self.handle.read(size)

    monkeypatch.setattr("builtins.open", lambda path, mode="r", *a, **k: Spy(real_open(path, mode, *a, **k)) if str(path) == str(big) else real_open(path, mode, *a, **k))
    sha1, _ = hash_file(big)
    assert sha1 and reads and all(0 < size <= 1024 * 1024 for size in reads)


def test_verify_of_a_missing_folder_fails(tmp_path: Path) -> None:
    assert main(["verify", str(tmp_path / "nowhere")]) == 1
