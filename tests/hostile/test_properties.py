"""Property-based fuzzing: the archive reader and the name/version validators, on a bounded budget.

The reader, fed random bytes or mutated valid archives, either reads an archive or raises
InvalidArchive, never anything else, and never touches the file system. A validated name or
version always lands inside the tree, as one or two plain path segments.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import posixpath
import zipfile
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import Any
from unittest import mock
from urllib.parse import quote, unquote

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from registry_gen.archive import ArchiveContents, read_archive
from registry_gen.errors import InvalidArchive, InvalidName, InvalidVersion
from registry_gen.names import escaped_name, package_dir, tarball_path, url_spellings, validate_name
from registry_gen.versions import validate_version
from tests.hostile.corpus import LIMITS, file_info, manifest_bytes, raw_tar, seeded_bytes, zip_bytes

BUDGET = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,  # the same examples on every run: make test stays reproducible
    database=None,  # nothing written into the work tree
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

README = b"# fuzz\n\nSome text.\n"
RAW_TAR = raw_tar(
    [
        file_info("package/package.json", manifest_bytes("fuzz")),
        file_info("package/README.md", README),
        file_info("package/index.js", seeded_bytes(600)),
    ]
)
ROOT_TAR = raw_tar([file_info("package.json", manifest_bytes("fuzz-root")), file_info("index.js", b"1")])
STORED_ZIP = zip_bytes([("package.json", manifest_bytes("fuzz-zip")), ("README.md", README)], method=zipfile.ZIP_STORED)
DEFLATED_ZIP = zip_bytes([("package.json", manifest_bytes("fuzz-zip")), ("index.js", seeded_bytes(600))])
SEEDS = {
    "tgz": gzip.compress(RAW_TAR, mtime=0),
    "root-tgz": gzip.compress(ROOT_TAR, mtime=0),
    "stored-zip": STORED_ZIP,
    "deflated-zip": DEFLATED_ZIP,
}


class FileSystemTouched(Exception):
    pass


@contextlib.contextmanager
def no_file_system() -> Iterator[list[str]]:
    """Any attempt to open, create, link or move a file is recorded and refused."""
    touched: list[str] = []

    def refuse(name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            touched.append(f"{name}{args[:2]!r}")
            raise FileSystemTouched(name)

        return call

    targets = {
        "builtins.open": "open",
        "io.open": "io.open",
        "os.open": "os.open",
        "os.mkdir": "os.mkdir",
        "os.makedirs": "os.makedirs",
        "os.symlink": "os.symlink",
        "os.link": "os.link",
        "os.mknod": "os.mknod",
        "os.mkfifo": "os.mkfifo",
        "os.replace": "os.replace",
        "os.rename": "os.rename",
        "shutil.copyfile": "shutil.copyfile",
    }
    with contextlib.ExitStack() as stack:
        for target, label in targets.items():
            stack.enter_context(mock.patch(target, refuse(label)))
        yield touched


def read_or_refuse(data: bytes) -> ArchiveContents | None:
    """The only outcomes allowed: contents, or InvalidArchive. Anything else fails the test."""
    with no_file_system() as touched:
        try:
            contents = read_archive(io.BytesIO(data), LIMITS)
        except InvalidArchive:
            contents = None
    assert not touched, touched
    return contents


def check_contents(data: bytes, contents: ArchiveContents) -> None:
    """What an accepted archive promises: digests of the served bytes, a re-readable repack."""
    if contents.converted is None:
        assert contents.digests.size == len(data)
    else:
        again = read_or_refuse(contents.converted)
        assert again is not None and again.converted is None
        assert again.manifest == contents.manifest
        assert again.digests == contents.digests


MUTATION = st.one_of(
    st.tuples(st.just("flip"), st.integers(min_value=0), st.integers(min_value=1, max_value=255)),
    st.tuples(st.just("cut"), st.integers(min_value=0), st.just(0)),
    st.tuples(st.just("insert"), st.integers(min_value=0), st.binary(min_size=1, max_size=64)),
    st.tuples(st.just("delete"), st.integers(min_value=0), st.integers(min_value=1, max_value=600)),
    st.tuples(st.just("repeat"), st.integers(min_value=0), st.integers(min_value=1, max_value=1024)),
)


def mutate(data: bytes, mutations: list[tuple[str, int, Any]]) -> bytes:
    for kind, where, arg in mutations:
        if not data:
            break
        at = where % len(data)
        if kind == "flip":
            data = data[:at] + bytes([data[at] ^ arg]) + data[at + 1 :]
        elif kind == "cut":
            data = data[:at]
        elif kind == "insert":
            data = data[:at] + arg + data[at:]
        elif kind == "delete":
            data = data[:at] + data[at + arg :]
        else:
            data = data[:at] + data[at : at + arg] * 2 + data[at + arg :]
    return data


@BUDGET
@given(
    prefix=st.sampled_from([b"", b"\x1f\x8b", b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", b"PK\x03\x04", b"PK\x05\x06"]),
    body=st.binary(max_size=4096),
)
def test_random_bytes_are_read_or_refused_never_crash(prefix: bytes, body: bytes) -> None:
    data = prefix + body
    contents = read_or_refuse(data)
    if contents is not None:
        check_contents(data, contents)


@BUDGET
@given(seed=st.sampled_from(sorted(SEEDS)), mutations=st.lists(MUTATION, min_size=1, max_size=4))
def test_mutated_archives_are_read_or_refused_never_crash(seed: str, mutations: list[tuple[str, int, Any]]) -> None:
    data = mutate(SEEDS[seed], mutations)
    contents = read_or_refuse(data)
    if contents is not None:
        check_contents(data, contents)


@BUDGET
@given(seed=st.sampled_from(["package", "root"]), mutations=st.lists(MUTATION, min_size=1, max_size=4))
def test_mutated_tar_structures_are_read_or_refused_never_crash(seed: str, mutations: list[tuple[str, int, Any]]) -> None:
    # Mutating before compression reaches tar headers and pax records, not just the gzip layer.
    data = gzip.compress(mutate(RAW_TAR if seed == "package" else ROOT_TAR, mutations), mtime=0)
    contents = read_or_refuse(data)
    if contents is not None:
        check_contents(data, contents)


# ---------------------------------------------------------------- names and versions

NPM_NAME = st.from_regex(r"\A(@[a-z0-9~-][a-z0-9._~-]{0,12}/)?[a-z0-9~-][a-z0-9._~-]{0,24}\Z")
PIECES = ["a", "Z", "0", "-", ".", "_", "~", "@", "/", "%", "%2f", "%2F", "%2e", "\\", ":", "?", "#", " ", "\r\n", "\x00",
          "..", "../", "@scope/", "é", "node_modules", "-"]
TRICKY = st.lists(st.sampled_from(PIECES), max_size=12).map("".join)
NAMES = st.one_of(NPM_NAME, TRICKY, st.text(max_size=40))
SEMVER = st.from_regex(
    r"\A(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})(-[0-9A-Za-z.-]{1,16})?(\+[0-9A-Za-z.-]{1,16})?\Z"
)
VERSIONS = st.one_of(SEMVER, TRICKY, st.text(max_size=30), SEMVER.map(lambda v: v + "/../x"))
TREE = "/srv/registry/public"


def _inside_tree(relative: str) -> bool:
    joined = posixpath.normpath(posixpath.join(TREE, relative))
    return joined.startswith(TREE + "/") and joined == posixpath.join(TREE, relative)


@BUDGET
@given(NAMES)
def test_a_valid_name_maps_inside_the_tree(name: str) -> None:
    try:
        validate_name(name)
    except InvalidName:
        return
    relative = package_dir(name)
    parts = PurePosixPath(relative).parts
    assert relative == name and name == name.lower()
    assert 1 <= len(parts) <= 2 and not PurePosixPath(relative).is_absolute()
    assert all(part not in ("", ".", "..") and not part.startswith(".") for part in parts)
    assert (len(parts) == 2) == name.startswith("@")
    assert _inside_tree(relative)
    assert quote(relative, safe="/@") == relative  # nothing a URL or a shell would reinterpret
    assert unquote(escaped_name(name)) == name
    for spelling in url_spellings(name):
        assert unquote(spelling) == "/" + relative  # every spelling a client sends reaches the folder


@BUDGET
@given(NPM_NAME, VERSIONS)
def test_a_valid_version_gives_a_tarball_inside_the_package_folder(name: str, version: str) -> None:
    try:
        validate_name(name)
        validate_version(version)
        relative = tarball_path(name, version)
    except (InvalidName, InvalidVersion):
        return
    path = PurePosixPath(relative)
    assert path.parent == PurePosixPath(package_dir(name)) / "-"
    assert ".." not in path.parts and "/" not in version and "\\" not in version
    assert path.name.endswith(".tgz") and len(path.name.encode()) <= 240
    assert _inside_tree(relative)
    assert quote(relative, safe="/@+") == relative


def test_the_file_system_guard_catches_a_write(tmp_path: Any) -> None:
    # The fuzzers rely on it: a write inside the guard is recorded and refused, not performed.
    target = tmp_path / "x"
    with no_file_system() as touched:
        try:
            open(target, "wb")  # noqa: SIM115 - the point is that it fails
        except FileSystemTouched:
            pass
    assert touched and not os.path.exists(target)
