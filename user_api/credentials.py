"""Password hashing (argon2id) and bearer tokens (random, stored as a SHA-256 digest)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass, field
from functools import cached_property

import warnings

import argon2
import bcrypt

with warnings.catch_warnings():
    # passlib probes the stdlib `crypt` module (deprecated in 3.11, gone in 3.13); it has its own code.
    warnings.simplefilter("ignore", DeprecationWarning)
    from passlib.hash import apr_md5_crypt, des_crypt, md5_crypt, sha256_crypt, sha512_crypt
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

# OWASP Password Storage Cheat Sheet floor for argon2id: m=19 MiB, t=2, p=1 (~50 ms here, §4.2).
OWASP_TIME_COST = 2
OWASP_MEMORY_KIB = 19456
OWASP_PARALLELISM = 1

TOKEN_PREFIX_LENGTH = 6
# Hashes imported from htpasswd files (Verdaccio writes bcrypt; older files hold crypt or SHA-1):
# verified as they are, replaced by argon2id at the first successful login (needs_rehash).
_BCRYPT = re.compile(r"^\$2[aby]\$\d\d\$[./A-Za-z0-9]{53}$")
_DES_CRYPT = re.compile(r"^[./A-Za-z0-9]{13}$")
_CRYPT_SCHEMES = {"$apr1$": apr_md5_crypt, "$1$": md5_crypt, "$5$": sha256_crypt, "$6$": sha512_crypt}
BCRYPT_MAX_BYTES = 72  # what bcrypt ever read of a password (node's bcryptjs truncates the same way)


def is_legacy_hash(password_hash: str) -> bool:
    return bool(
        _BCRYPT.match(password_hash) or _DES_CRYPT.match(password_hash) or password_hash.startswith("{SHA}")
        or password_hash.startswith(tuple(_CRYPT_SCHEMES))
    )  # fmt: skip


def verify_legacy(password_hash: str, password: str) -> bool:
    secret = password.encode("utf-8")
    if _BCRYPT.match(password_hash):
        return bcrypt.checkpw(secret[:BCRYPT_MAX_BYTES], password_hash.encode("ascii"))
    if password_hash.startswith("{SHA}"):
        digest = base64.b64encode(hashlib.sha1(secret).digest()).decode("ascii")  # noqa: S324 - verifying an old hash
        return hmac.compare_digest(digest, password_hash[5:])
    for prefix, scheme in _CRYPT_SCHEMES.items():
        if password_hash.startswith(prefix):
            return bool(scheme.verify(password, password_hash))
    if _DES_CRYPT.match(password_hash):
        return bool(des_crypt.verify(password, password_hash))
    return False


@dataclass(frozen=True)
class PasswordHasher:
    """argon2id with explicit parameters; hashes carry them (PHC strings), so they can rise later."""

    time_cost: int = OWASP_TIME_COST
    memory_kib: int = OWASP_MEMORY_KIB
    parallelism: int = OWASP_PARALLELISM
    _impl: argon2.PasswordHasher = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        impl = argon2.PasswordHasher(
            time_cost=self.time_cost,
            memory_cost=self.memory_kib,
            parallelism=self.parallelism,
            type=argon2.Type.ID,
        )
        object.__setattr__(self, "_impl", impl)

    def hash(self, password: str) -> str:
        return self._impl.hash(password)

    def verify(self, password_hash: str, password: str) -> bool:
        if not password_hash.startswith("$argon2"):
            try:
                return verify_legacy(password_hash, password)
            except ValueError:  # a malformed imported hash verifies nothing
                return False
        try:
            return self._impl.verify(password_hash, password)
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            return False

    def needs_rehash(self, password_hash: str) -> bool:
        try:
            return self._impl.check_needs_rehash(password_hash)
        except InvalidHashError:
            return True

    @cached_property
    def dummy_hash(self) -> str:
        """Verified against when the user is unknown, so timing does not tell which names exist."""
        return self._impl.hash(secrets.token_urlsafe(16))


def new_token() -> str:
    """256 bits from the OS CSPRNG, URL-safe: fits `Authorization: Bearer` and npm's .npmrc."""
    return secrets.token_urlsafe(32)


def token_digest(token: str) -> str:
    """What the store keeps. A plain SHA-256 suffices: tokens are random, not guessable words."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def token_prefix(token: str) -> str:
    return token[:TOKEN_PREFIX_LENGTH]


def same_digest(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())
