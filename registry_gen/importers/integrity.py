"""Subresource-integrity checks of downloaded tarballs (pure): every recognised algorithm in an SRI
string must match; a legacy hex SHA-1 `shasum` is checked too; no digest at all is a refusal."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

ALGORITHMS = ("sha512", "sha384", "sha256", "sha1")


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


def integrity_problem(data: bytes, integrity: str | None, shasum: str | None) -> str | None:
    """None when `data` matches every digest given; else a sentence saying what failed."""
    checks = parse_sri(integrity) if integrity else []
    if integrity and not checks:
        return f"integrity {integrity[:40]!r} holds no sha1/sha256/sha384/sha512 digest"
    if shasum:
        try:
            checks.append(("sha1", bytes.fromhex(shasum)))
        except ValueError:
            return f"shasum {shasum!r} is not hexadecimal"
    if not checks:
        return "no integrity or shasum to check the tarball against"
    for algorithm, expected in checks:
        if not hmac.compare_digest(hashlib.new(algorithm, data).digest(), expected):
            return f"tarball bytes do not match its {algorithm} digest"
    return None


def sri_sha512(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode("ascii")
