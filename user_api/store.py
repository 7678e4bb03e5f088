"""The user store interface, and the one function that picks its backend from Settings.

SQLite (embedded, `<data_dir>/users.sqlite3`) is the default; `database_url = postgresql://...`
(or $REGISTRY_DATABASE_URL) selects PostgreSQL. Both are `SqlUserStore` over a small dialect,
so they share every rule; only DDL, connections and the search index differ. Either holds the
accounts' groups too (user_api.groups), and on opening moves in the groups file an earlier release
kept in `<data_dir>`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Protocol

from registry_gen.errors import ConfigError
from registry_gen.settings import Settings
from user_api.credentials import PasswordHasher
from user_api.errors import UsernameTaken
from user_api.models import ImportedUser, TokenInfo, User, UserPage
from user_api.sqlstore import KEEP, Keep, SqlUserStore

__all__ = [
    "KEEP",
    "Keep",
    "TokenInfo",
    "User",
    "UserPage",
    "UserStore",
    "UsernameTaken",
    "open_user_store",
]


class UserStore(Protocol):
    """Accounts, their tokens and their groups. Methods raise user_api.errors, never driver exceptions."""

    def get_by_id(self, user_id: str) -> User | None: ...

    def get_by_username(self, name: str) -> User | None: ...

    def create_user(
        self,
        username: str,
        password: str,
        email: str | None = None,
        full_name: str | None = None,
        role: str = "user",
        *,
        status: str = "active",
    ) -> User:
        """Validates every field (InvalidFields) and raises UsernameTaken for a taken name."""
        ...

    def update_user(
        self,
        user_id: str,
        *,
        expected_version: int | None = None,
        username: str | Keep = KEEP,
        email: str | None | Keep = KEEP,
        full_name: str | None | Keep = KEEP,
        role: str | Keep = KEEP,
        status: str | Keep = KEEP,
        password: str | Keep = KEEP,
    ) -> User: ...

    def delete_user(self, user_id: str) -> bool: ...

    def removed_accounts(self) -> dict[str, str]:
        """The deleted accounts (their tombstones, which keep the name and the id): name -> id, oldest first."""
        ...

    def list_users(self, *, offset: int, limit: int) -> UserPage: ...

    def search_users(
        self, keyword: str, *, offset: int, limit: int, include_email: bool, count_limit: int | None = None
    ) -> UserPage:
        """Username exact and prefix matches first, then the other substring matches in sign-up order;
        the same rule for every keyword length. `total` stops at `count_limit`."""
        ...

    def count_users(self) -> int: ...

    def verify_password(self, username: str, password: str) -> User | None: ...

    def check_password(self, user_id: str, password: str) -> bool: ...

    def create_token(
        self,
        user_id: str,
        *,
        readonly: bool = False,
        cidr: Sequence[str] | None = None,
        description: str | None = None,
        expires: datetime | None = None,
    ) -> tuple[str, TokenInfo]: ...

    def authenticate(self, token: str) -> User | None: ...

    def authenticate_token(self, token: str) -> tuple[User, TokenInfo] | None: ...

    def list_tokens(self, user_id: str) -> list[TokenInfo]: ...

    def revoke_token(self, user_id: str, key: str) -> bool: ...

    def revoke_token_value(self, token: str) -> bool: ...

    def import_users(self, records: Iterable[ImportedUser], *, audit_source: str | None = None) -> int: ...

    def groups_of(self, user_id: str) -> frozenset[str]:
        """The account's groups (registry.yaml `packages:` rules name them); none for no account."""
        ...

    def change_groups(self, user_id: str, *, add: Iterable[str] = (), remove: Iterable[str] = ()) -> frozenset[str]:
        """Adds, then removes, groups in one transaction and returns the account's groups; InvalidFields
        for a name against the rule (user_api.groups), UserNotFound. A deleted account loses its groups."""
        ...

    def pending_upgrade_steps(self) -> list[str]:
        """Steps an operator still has to run after an upgrade (noted when an older database was migrated)."""
        ...

    def finish_upgrade_step(self, step: str) -> bool: ...

    def close(self) -> None: ...


def open_user_store(settings: Settings, *, hasher: PasswordHasher | None = None) -> UserStore:
    """The store Settings ask for; `hasher` defaults to argon2id at the OWASP parameters."""
    url = settings.database_url
    dialect: Any
    if url and url.startswith(("postgresql://", "postgres://")):
        from user_api.store_postgres import PostgresDialect

        dialect = PostgresDialect(url, data_dir=settings.data_dir)
    elif url:
        raise ConfigError("database_url must start with postgresql:// (SQLite needs no URL)")
    else:
        from user_api.store_sqlite import SqliteDialect

        dialect = SqliteDialect(settings.data_dir / "users.sqlite3")
    return SqlUserStore(dialect, hasher or PasswordHasher())
