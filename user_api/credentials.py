"""Password hashing (argon2id) and bearer tokens (random, stored as a SHA-256 digest)."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from functools import cached_property

import argon2
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

# OWASP Password Storage Cheat Sheet floor for argon2id: m=19 MiB, t=2, p=1 (~50 ms here, §4.2).
OWASP_TIME_COST = 2
OWASP_MEMORY_KIB = 19456
OWASP_PARALLELISM = 1

TOKEN_PREFIX_LENGTH = 6


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
