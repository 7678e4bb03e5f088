"""Subresource-integrity checks of downloaded tarballs (pure): every recognised algorithm in an SRI
string must match; a legacy hex SHA-1 `shasum` is checked too; no digest at all is a refusal.

Files are hashed in chunks (`file_digests`), so a tarball is never held whole to be checked."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Callable, Iterable
from pathlib import Path

ALGORITHMS = ("sha512", "sha384", "sha256", "sha1")
CHUNK = 1024 * 1024


def parse_sri(text: str) -> list[tuple[str, bytes]]:
    """[(algorithm, digest)] for each recognised `alg-base64` token; options (`?...`) are ignored."""
    found = []
    for token in text.split():
        algorithm, sep, value = token.partition("-")
        if not sep or algorithm not in ALGORITHMS:
            continue
        try:
            found.append((algorithm, base64.b64decode(value.split("?")[0], validate=True)))
        except (binascii.Error, ValueError):
            continue
    return found


def _expected(integrity: str | None, shasum: str | None) -> list[tuple[str, bytes]] | str:
    """The digests to check, or a sentence saying why there are none to check."""
    checks = parse_sri(integrity) if integrity else []
    if integrity and not checks:
        return f"integrity {integrity[:40]!r} holds no sha1/sha256/sha384/sha512 digest"
    if shasum:
        try:
            checks.append(("sha1", bytes.fromhex(shasum)))
        except ValueError:
            return f"shasum {shasum!r} is not hexadecimal"
    return checks or "no integrity or shasum to check the tarball against"


def _compare(checks: list[tuple[str, bytes]] | str, digest: Callable[[Iterable[str]], dict[str, bytes]]) -> str | None:
    if isinstance(checks, str):
        return checks
    found = digest({algorithm for algorithm, _ in checks})
    for algorithm, expected in checks:
        if not hmac.compare_digest(found[algorithm], expected):
            return f"tarball bytes do not match its {algorithm} digest"
    return None


def integrity_problem(data: bytes, integrity: str | None, shasum: str | None) -> str | None:
    """None when `data` matches every digest given; else a sentence saying what failed."""
    return _compare(_expected(integrity, shasum), lambda algorithms: {a: hashlib.new(a, data).digest() for a in algorithms})


def file_digests(path: Path, algorithms: Iterable[str]) -> dict[str, bytes]:
    """The digests of a file, read once in chunks."""
    hashes = {algorithm: hashlib.new(algorithm) for algorithm in set(algorithms)}
    with open(path, "rb") as source:
        while chunk := source.read(CHUNK):
            for running in hashes.values():
                running.update(chunk)
    return {algorithm: running.digest() for algorithm, running in hashes.items()}


def file_integrity_problem(path: Path, integrity: str | None, shasum: str | None) -> tuple[str | None, str]:
    """(the problem or None, the file's sha512 SRI) in one read of the file."""
    checks = _expected(integrity, shasum)
    found: dict[str, bytes] = {}

    def digest(algorithms: Iterable[str]) -> dict[str, bytes]:
        found.update(file_digests(path, {*algorithms, "sha512"}))
        return found

    problem = _compare(checks, digest)
    if not found:
        digest(())
    return problem, _sri("sha512", found["sha512"])


def file_sri(path: Path) -> str:
    """The sha512 SRI of a file, read in chunks."""
    return _sri("sha512", file_digests(path, ["sha512"])["sha512"])


def _sri(algorithm: str, digest: bytes) -> str:
    return f"{algorithm}-" + base64.b64encode(digest).decode("ascii")


def sri_sha512(data: bytes) -> str:
    return _sri("sha512", hashlib.sha512(data).digest())
