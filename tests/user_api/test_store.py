"""The UserStore contract (used by the /user routes and, later, by npm adduser/login), on both backends."""

from __future__ import annotations

import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

from registry_gen.errors import ConfigError
from registry_gen.settings import Settings
from tests.user_api.conftest import FAST_HASHER, tmp_settings
from user_api.credentials import OWASP_MEMORY_KIB, PasswordHasher
from user_api.errors import InvalidFields, LastAdmin, PreconditionFailed, UsernameTaken, UserNotFound
from user_api.models import ImportedUser, User
from user_api.store import UserStore, open_user_store


class CountingHasher(PasswordHasher):
    """FAST_HASHER parameters, counting verifications (to see the dummy hash being checked)."""

    def __init__(self) -> None:
        super().__init__(time_cost=1, memory_kib=1024, parallelism=1)
        object.__setattr__(self, "verified", [])

    def verify(self, password_hash: str, password: str) -> bool:
        self.verified.append(password_hash)  # type: ignore[attr-defined]
        return super().verify(password_hash, password)


def test_create_and_read_back(store: UserStore) -> None:
    user = store.create_user("alice", "password-1", "alice@EXAMPLE.org", "Alice", "admin")
    assert isinstance(user, User)
    assert (user.username, user.email, user.full_name, user.role, user.status, user.version) == (
        "alice", "alice@example.org", "Alice", "admin", "active", 1)
    assert store.get_by_id(user.id) == user
    assert store.get_by_id(user.id.upper()) == user
    assert store.get_by_username("alice") == user
    assert store.get_by_username("ALICE") == user  # compared case-insensitively
    assert store.get_by_id("not-a-uuid") is None and store.get_by_username("nobody") is None
    assert store.get_by_username("bad\x00name") is None
    with pytest.raises(FrozenInstanceError):
        user.role = "user"  # type: ignore[misc]


def test_create_validates_every_field(store: UserStore) -> None:
    with pytest.raises(InvalidFields) as caught:
        store.create_user(".Dot", "short", "no-at-sign", "\x07bell", "root")
    assert {e.pointer for e in caught.value.errors} == {"#/username", "#/password", "#/email", "#/fullName", "#/role"}
    assert store.count_users() == 0


def test_taken_username(store: UserStore) -> None:
    store.create_user("bob", "password-1")
    with pytest.raises(UsernameTaken):
        store.create_user("bob", "password-2")
    assert store.count_users() == 1


def test_verify_password(store: UserStore) -> None:
    user = store.create_user("carol", "right-password")
    assert store.verify_password("carol", "right-password") == user
    assert store.verify_password("CAROL", "right-password") == user
    assert store.verify_password("carol", "wrong-password") is None
    assert store.verify_password("nobody", "right-password") is None
    assert store.verify_password("carol", None) is None  # type: ignore[arg-type]
    assert store.check_password(user.id, "right-password") is True
    assert store.check_password(user.id, "wrong-password") is False


def test_unknown_user_is_checked_against_a_dummy_hash(store_settings: Settings) -> None:
    hasher = CountingHasher()
    counted = open_user_store(store_settings, hasher=hasher)
    try:
        counted.create_user("dave", "right-password")
        counted.verify_password("nobody", "whatever-password")
        counted.verify_password("bad name!", "whatever-password")
        counted.verify_password("dave", "wrong-password")
        assert hasher.verified[:2] == [hasher.dummy_hash, hasher.dummy_hash]  # type: ignore[attr-defined]
        assert hasher.verified[2] != hasher.dummy_hash  # type: ignore[attr-defined]
    finally:
        counted.close()


def test_disabled_and_deleted_users_cannot_log_in(store: UserStore) -> None:
    store.create_user("admin", "admin-password", role="admin")
    user = store.create_user("erin", "erin-password")
    token, _ = store.create_token(user.id)
    store.update_user(user.id, status="disabled")
    assert store.verify_password("erin", "erin-password") is None
    assert store.authenticate(token) is None
    store.update_user(user.id, status="active")
    assert store.authenticate(token) is None  # re-enabling never revives the old tokens
    token, _ = store.create_token(user.id)
    assert store.delete_user(user.id) is True
    assert store.verify_password("erin", "erin-password") is None
    assert store.authenticate(token) is None and store.list_tokens(user.id) == []
    assert store.get_by_username("erin") is None and store.get_by_id(user.id) is None
    assert store.delete_user(user.id) is False
    with pytest.raises(UsernameTaken):
        store.create_user("erin", "another-password")


def test_password_is_rehashed_when_parameters_rise(store_settings: Settings) -> None:
    weak = open_user_store(store_settings, hasher=FAST_HASHER)
    weak.create_user("frank", "frank-password")
    weak.close()
    stronger = PasswordHasher(time_cost=2, memory_kib=2048, parallelism=1)
    strong = open_user_store(store_settings, hasher=stronger)
    try:
        assert strong.verify_password("frank", "frank-password") is not None
        with strong.dialect.read() as tx:  # type: ignore[attr-defined]
            (stored,) = tx.one("SELECT password_hash FROM users WHERE username = ?", ("frank",))
        assert "m=2048,t=2,p=1" in stored
        assert strong.verify_password("frank", "frank-password") is not None
    finally:
        strong.close()


def test_production_hasher_is_argon2id_at_the_owasp_floor() -> None:
    hashed = PasswordHasher().hash("some password")
    assert hashed.startswith(f"$argon2id$v=19$m={OWASP_MEMORY_KIB},t=2,p=1$")
    assert PasswordHasher().verify(hashed, "some password")
    assert not PasswordHasher().verify(hashed, "other password")
    assert not PasswordHasher().verify("not a hash", "some password")


def test_tokens(store: UserStore) -> None:
    user = store.create_user("gina", "gina-password")
    other = store.create_user("hank", "hank-password")
    token, info = store.create_token(user.id, readonly=True, cidr=["10.0.0.1/8", "::1"], description="ci")
    assert len(token) >= 40 and info.token_prefix == token[:6]
    assert (info.user_id, info.readonly, info.cidr_whitelist, info.description) == (
        user.id, True, ("10.0.0.0/8", "::1/128"), "ci")
    found = store.authenticate_token(token)
    assert found is not None and found[0] == user and found[1].key == info.key
    assert store.authenticate(token) == user
    assert store.authenticate(token + "x") is None and store.authenticate("") is None
    second, second_info = store.create_token(user.id)
    assert second != token
    assert [t.key for t in store.list_tokens(user.id)] == [info.key, second_info.key]
    assert store.revoke_token(other.id, info.key) is False  # not hank's token
    assert store.revoke_token(user.id, info.key) is True
    assert store.authenticate(token) is None
    assert store.revoke_token(user.id, info.key) is False
    assert store.revoke_token_value(second) is True and store.authenticate(second) is None
    assert store.revoke_token_value(second) is False


def test_token_errors(store: UserStore) -> None:
    with pytest.raises(UserNotFound):
        store.create_token("00000000-0000-4000-8000-000000000000")
    user = store.create_user("ivan", "ivan-password")
    with pytest.raises(InvalidFields):
        store.create_token(user.id, cidr=["not a network"])


def test_update_and_versions(store: UserStore) -> None:
    user = store.create_user("judy", "judy-password", "j@x.org", "Judy")
    changed = store.update_user(user.id, expected_version=1, full_name=None, email="J2@X.ORG")
    assert (changed.full_name, changed.email, changed.version) == (None, "J2@x.org", 2)
    assert changed.etag != user.etag and changed.updated_at >= user.updated_at
    with pytest.raises(PreconditionFailed):
        store.update_user(user.id, expected_version=1, full_name="Late")
    with pytest.raises(UserNotFound):
        store.update_user("00000000-0000-4000-8000-000000000000", full_name="Nobody")
    with pytest.raises(InvalidFields):
        store.update_user(user.id, username="Bad Name")
    store.update_user(user.id, password="new-judy-password")
    assert store.verify_password("judy", "new-judy-password") is not None


def test_last_active_admin_is_kept(store: UserStore) -> None:
    root = store.create_user("root", "root-password", role="admin")
    for change in ({"role": "user"}, {"status": "disabled"}):
        with pytest.raises(LastAdmin):
            store.update_user(root.id, **change)  # type: ignore[arg-type]
    with pytest.raises(LastAdmin):
        store.delete_user(root.id)
    second = store.create_user("second", "second-password", role="admin")
    store.update_user(root.id, role="user")
    with pytest.raises(LastAdmin):
        store.update_user(second.id, status="disabled")


def test_counts_follow_creates_deletes_and_status(store: UserStore) -> None:
    store.create_user("root", "root-password", role="admin")
    users = [store.create_user(f"u{n}", "password-1") for n in range(5)]
    store.delete_user(users[0].id)
    store.update_user(users[1].id, status="disabled")  # disabled users are still listed
    assert store.count_users() == 5
    page = store.list_users(offset=0, limit=100)
    assert page.total == 5 and [u.username for u in page.items] == ["root", "u1", "u2", "u3", "u4"]
    assert [u.username for u in store.list_users(offset=3, limit=10).items] == ["u3", "u4"]


def test_search_index_follows_updates_and_deletes(store: UserStore) -> None:
    user = store.create_user("kate", "kate-password", None, "Katherine Johnson")
    assert [u.username for u in store.search_users("johns", offset=0, limit=10, include_email=False).items] == ["kate"]
    store.update_user(user.id, full_name="Katherine Goble")
    assert store.search_users("johns", offset=0, limit=10, include_email=False).total == 0
    assert store.search_users("goble", offset=0, limit=10, include_email=False).total == 1
    store.update_user(user.id, password="other-password")  # no index change, no harm
    assert store.search_users("goble", offset=0, limit=10, include_email=False).total == 1
    store.delete_user(user.id)
    assert store.search_users("goble", offset=0, limit=10, include_email=False).total == 0
    assert store.search_users("ka", offset=0, limit=10, include_email=False).total == 0


def test_search_counts_and_pages(store: UserStore) -> None:
    for name in ["anna", "annabel", "hannah", "joanna", "bob"]:
        store.create_user(name, "password-1", None, f"{name.title()} Smith")
    result = store.search_users("anna", offset=0, limit=2, include_email=False)
    assert result.total == 4 and [u.username for u in result.items] == ["anna", "annabel"]
    rest = store.search_users("anna", offset=2, limit=10, include_email=False)
    assert [u.username for u in rest.items] == ["hannah", "joanna"]
    assert store.search_users("smith", offset=4, limit=10, include_email=False).total == 5
    assert len(store.search_users("smith", offset=4, limit=10, include_email=False).items) == 1


def test_search_total_can_be_capped_without_breaking_pages(store: UserStore) -> None:
    for name in ["anna", "annabel", "annette", "hannah", "joanna", "rosanna"]:
        store.create_user(name, "password-1")
    exact = store.search_users("ann", offset=0, limit=2, include_email=False)
    capped = store.search_users("ann", offset=0, limit=2, include_email=False, count_limit=4)
    assert (exact.total, capped.total) == (6, 4)
    assert capped.items == exact.items
    # Pages past the cap are still placed right: the prefix part is counted to the page's end.
    deep = store.search_users("ann", offset=2, limit=3, include_email=False, count_limit=2)
    assert [u.username for u in deep.items] == ["annette", "hannah", "joanna"]
    assert store.search_users("an", offset=0, limit=10, include_email=False, count_limit=2).total == 2


def test_import_users_in_bulk(store: UserStore) -> None:
    store.create_user("existing", "password-1", None, "Existing One")
    password_hash = FAST_HASHER.hash("bulk-password")
    imported = store.import_users(
        ImportedUser(f"bulk{n:04d}", password_hash, f"b{n}@x.org", f"Bulk Person {n}") for n in range(500)
    )
    assert imported == 500 and store.count_users() == 501
    assert store.search_users("person 42", offset=0, limit=100, include_email=False).total == 11  # 42, 420..429
    assert store.search_users("existing one", offset=0, limit=10, include_email=False).total == 1
    assert store.verify_password("bulk0007", "bulk-password") is not None
    # The triggers are back: later writes keep the index and the count right.
    store.create_user("after", "password-1", None, "After Import")
    assert store.search_users("after imp", offset=0, limit=10, include_email=False).total == 1
    assert store.count_users() == 502


def _account_entries(store: UserStore) -> list[tuple[str, str, dict[str, object]]]:
    from registry_gen.audit import AuditFilter
    from user_api.store_audit import read_entries

    with store.dialect.read() as tx:  # type: ignore[attr-defined]
        return [(entry.event, entry.subject, dict(entry.detail)) for entry in read_entries(tx, AuditFilter())]


def test_an_import_of_accounts_puts_each_in_the_audit_log_in_its_transaction(store: UserStore) -> None:
    password_hash = FAST_HASHER.hash("bulk-password")
    store.import_users([ImportedUser("imp-a", password_hash), ImportedUser("imp-b", password_hash)], audit_source="htpasswd")
    imported = {"role": "user", "status": "active", "imported": "htpasswd"}
    assert _account_entries(store) == [("user:create", "imp-a", imported), ("user:create", "imp-b", imported)]
    with pytest.raises(UsernameTaken):  # rolled back whole: no entry without its account
        store.import_users([ImportedUser("imp-c", password_hash), ImportedUser("imp-a", password_hash)], audit_source="htpasswd")
    assert [subject for _, subject, _ in _account_entries(store)] == ["imp-a", "imp-b"]
    store.import_users([ImportedUser("bench-user", password_hash)])  # a benchmark's fill records nothing
    assert len(_account_entries(store)) == 2


def test_import_is_all_or_nothing(store: UserStore) -> None:
    store.create_user("taken", "password-1")
    password_hash = FAST_HASHER.hash("bulk-password")
    with pytest.raises(UsernameTaken):
        store.import_users([ImportedUser("fresh", password_hash), ImportedUser("taken", password_hash)])
    assert store.get_by_username("fresh") is None and store.count_users() == 1
    with pytest.raises(InvalidFields):
        store.import_users([ImportedUser("fine", "plain-text-not-a-hash")])
    store.create_user("later", "password-1")  # triggers survived the rollback
    assert store.search_users("later", offset=0, limit=10, include_email=False).total == 1


def test_concurrent_writers_on_many_threads(store: UserStore) -> None:
    def create(n: int) -> str:
        return store.create_user(f"t{n:03d}", "password-1").id

    with ThreadPoolExecutor(max_workers=8) as pool:
        ids = list(pool.map(create, range(40)))
    assert len(set(ids)) == 40 and store.count_users() == 40


def test_sqlite_file_lives_in_data_dir_with_wal(tmp_path: Path) -> None:
    opened = open_user_store(tmp_settings(tmp_path, data_dir=tmp_path / "nested" / "data"), hasher=FAST_HASHER)
    try:
        opened.create_user("lena", "password-1")
        path = tmp_path / "nested" / "data" / "users.sqlite3"
        assert path.exists()
        with sqlite3.connect(path) as raw:
            assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        seen: set[int] = set()

        def connection_id() -> None:
            seen.add(id(opened.dialect._connection()))  # type: ignore[attr-defined]

        threads = [threading.Thread(target=connection_id) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(seen) == 3  # one connection per thread
    finally:
        opened.close()


def test_reopening_keeps_the_data(tmp_path: Path) -> None:
    settings = tmp_settings(tmp_path, data_dir=tmp_path)
    first = open_user_store(settings, hasher=FAST_HASHER)
    first.create_user("mike", "password-1", None, "Mike Persistent")
    first.close()
    second = open_user_store(settings, hasher=FAST_HASHER)
    try:
        assert second.get_by_username("mike") is not None
        assert second.search_users("persist", offset=0, limit=10, include_email=False).total == 1
    finally:
        second.close()


def test_unknown_database_url_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        open_user_store(tmp_settings(tmp_path, data_dir=tmp_path, database_url="mysql://x"))


def test_unreachable_postgres_is_a_config_error_without_the_url(tmp_path: Path) -> None:
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"postgresql://user:very-secret-pw@127.0.0.1:{port}/db?connect_timeout=2"
    with pytest.raises(ConfigError) as caught:
        open_user_store(tmp_settings(tmp_path, data_dir=tmp_path, database_url=url))
    assert "very-secret-pw" not in str(caught.value)


def test_a_new_password_is_never_held_under_the_hash_column(tmp_path: Path) -> None:
    """While a password change is prepared, the plaintext never sits where the hash goes (a log of the
    pending columns, or a later code path writing them unhashed, would carry it)."""
    import sys

    seen: list[dict[str, object]] = []

    class Inspecting(PasswordHasher):
        def hash(self, password: str) -> str:
            caller = sys._getframe(1).f_locals
            seen.append({k: v for k, v in dict(caller.get("changes") or {}).items()})
            return super().hash(password)

    hasher = Inspecting(time_cost=1, memory_kib=1024, parallelism=1)
    store = open_user_store(tmp_settings(tmp_path), hasher=hasher)
    try:
        user = store.create_user("kim", "kim-password-1", None)
        seen.clear()
        store.update_user(user.id, password="kim-password-2")
        assert seen, "the update did not hash the new password"
        assert all(pending.get("password_hash") != "kim-password-2" for pending in seen)
        assert store.verify_password("kim", "kim-password-2") is not None
    finally:
        store.close()


def test_a_token_with_an_expiry_stops_working_then(store: UserStore) -> None:
    from datetime import timedelta

    from user_api.models import utcnow

    owner = store.create_user("tess", "password-1")
    lasting, info = store.create_token(owner.id, expires=utcnow() + timedelta(days=1))
    assert info.expires is not None and store.authenticate(lasting) == owner
    stale, _ = store.create_token(owner.id, expires=utcnow() - timedelta(seconds=1))
    forever, _ = store.create_token(owner.id)
    assert store.authenticate(stale) is None and store.authenticate(forever) == owner
    listed = store.list_tokens(owner.id)
    assert len(listed) == 2 and {t.expires is None for t in listed} == {True, False}  # the expired one is not listed


def _downgrade(store: UserStore, undo: str, version: int) -> None:
    """What a database of an older schema looks like: `undo` removes what `version` + 1 added."""
    with store.dialect.write() as tx:  # type: ignore[attr-defined]
        tx.run(undo)
        if store.dialect.name == "sqlite":  # type: ignore[attr-defined]
            tx.run(f"PRAGMA user_version = {version}")
        else:
            tx.run("DELETE FROM user_api_schema")
            tx.run(f"INSERT INTO user_api_schema (version) VALUES ({version})")


def _downgrade_to_schema_1(store: UserStore) -> None:
    """Before token expiry."""
    _downgrade(store, "ALTER TABLE user_tokens DROP COLUMN expires_at", 1)


def test_a_schema_1_database_is_migrated_and_keeps_its_tokens(store_settings: Settings) -> None:
    from datetime import timedelta

    from user_api.models import utcnow

    first = open_user_store(store_settings, hasher=FAST_HASHER)
    owner = first.create_user("uma", "password-1")
    kept, _ = first.create_token(owner.id)
    _downgrade_to_schema_1(first)
    first.close()
    again = open_user_store(store_settings, hasher=FAST_HASHER)
    try:
        assert again.authenticate(kept) == owner
        stale, _ = again.create_token(owner.id, expires=utcnow() - timedelta(seconds=1))
        assert again.authenticate(stale) is None
    finally:
        again.close()


def test_only_a_schema_1_database_with_accounts_notes_the_binding_step(store_settings: Settings) -> None:
    """docs/operating/upgrades.md: accounts of a release before maintainers were bound leave a step to run
    (`owner bind-recorded`); a new database, or an old one without accounts, has nothing to do."""
    from user_api.sqlstore import BIND_RECORDED_MAINTAINERS

    first = open_user_store(store_settings, hasher=FAST_HASHER)
    assert first.pending_upgrade_steps() == []
    _downgrade_to_schema_1(first)
    first.close()
    empty = open_user_store(store_settings, hasher=FAST_HASHER)
    assert empty.pending_upgrade_steps() == []
    empty.create_user("olduser", "password-1")
    _downgrade_to_schema_1(empty)
    empty.close()
    again = open_user_store(store_settings, hasher=FAST_HASHER)
    try:
        assert again.pending_upgrade_steps() == [BIND_RECORDED_MAINTAINERS]
        assert again.finish_upgrade_step(BIND_RECORDED_MAINTAINERS) is True
        assert again.pending_upgrade_steps() == [] and again.finish_upgrade_step(BIND_RECORDED_MAINTAINERS) is False
    finally:
        again.close()


# ---- 1-2 character keywords: the gram index (user_grams) ---------------------------------------


def _names(page: Any) -> list[str]:
    return [u.username for u in page.items]


def _gram_table(store: UserStore) -> set[tuple[str, int, int]]:
    with store.dialect.read() as tx:  # type: ignore[attr-defined]
        return {(g, int(f), int(pk)) for g, f, pk in tx.all("SELECT gram, field, user_pk FROM user_grams")}


def _gram_counts(store: UserStore) -> dict[tuple[str, int], int]:
    """The count table, rows of 0 (every holder of a gram gone) left out."""
    with store.dialect.read() as tx:  # type: ignore[attr-defined]
        return {(g, int(f)): int(n) for g, f, n in tx.all("SELECT gram, field, n FROM user_gram_counts") if n}


def _counts_recomputed(store: UserStore) -> dict[tuple[str, int], int]:
    """What the count table must hold: every gram the store counts (up to its counted_gram
    characters: longer than the rows on PostgreSQL), per field, of every live user."""
    from collections import Counter

    longest = store.dialect.counted_gram  # type: ignore[attr-defined]
    return dict(Counter((gram, field) for gram, field, _ in _grams_recomputed(store, longest)))


def _grams_recomputed(store: UserStore, longest: int | None = None) -> set[tuple[str, int, int]]:
    """What the index must hold: the grams of every live user, recomputed from the users table."""
    from user_api.grams import gram_rows

    with store.dialect.read() as tx:  # type: ignore[attr-defined]
        users = tx.all("SELECT pk, username, full_name, email FROM users WHERE status <> 'deleted'")
    return set(gram_rows(users, longest or store.dialect.indexed_gram))  # type: ignore[attr-defined]


def test_rare_short_keywords_are_found_in_order_among_many(store: UserStore) -> None:
    from user_api.models import ImportedUser

    filler = FAST_HASHER.hash("password-1")
    store.import_users(ImportedUser(f"user{n}", filler, None, f"Common Name {n}") for n in range(300))
    late = store.create_user("zeta", "password-1", None, "Quentin Xu")
    early_prefix = store.create_user("qxa", "password-1")
    assert _names(store.search_users("q", offset=0, limit=10, include_email=False)) == ["qxa", "zeta"]
    assert _names(store.search_users("Xu", offset=0, limit=10, include_email=False)) == ["zeta"]
    assert store.search_users("qx", offset=0, limit=10, include_email=False).items == (early_prefix,)
    assert store.search_users("zz", offset=0, limit=10, include_email=True).total == 0
    page = store.search_users("e", offset=0, limit=3, include_email=False, count_limit=50)
    assert page.total == 50 and _names(page) == ["user0", "user1", "user2"]  # "Common Name": sign-up order
    assert late in store.search_users("e", offset=0, limit=400, include_email=False).items


def test_short_keywords_match_email_for_admins_only(store: UserStore) -> None:
    bob = store.create_user("bob", "password-1", "bob@qv.example", "Bob Stone")
    store.create_user("ann", "password-1", "ann@river.example", "Ann Qvist")
    assert _names(store.search_users("qv", offset=0, limit=10, include_email=True)) == ["bob", "ann"]
    assert _names(store.search_users("qv", offset=0, limit=10, include_email=False)) == ["ann"]
    assert _names(store.search_users("@", offset=0, limit=10, include_email=True)) == ["bob", "ann"]
    assert store.search_users("@", offset=0, limit=10, include_email=False).total == 0
    # A gram in both the name and the email is one match, not two.
    both = store.search_users("bo", offset=0, limit=10, include_email=True)
    assert both.total == 1 and both.items == (bob,)


def test_short_keywords_fold_case_the_same_on_both_stores(store: UserStore) -> None:
    store.create_user("zoe", "password-1", None, "Zoë Ångström")
    for keyword in ("Å", "å", "ÅN", "ån", "Ë", "ë"):
        assert _names(store.search_users(keyword, offset=0, limit=10, include_email=False)) == ["zoe"], keyword
    # 3-5 characters: FTS5 on SQLite, the counted grams on PostgreSQL; the same fold on both.
    for keyword in ("ÅNG", "ångs", "STRÖM", "oë å", "ZOË"):
        page = store.search_users(keyword, offset=0, limit=10, include_email=False)
        assert (page.total, _names(page)) == (1, ["zoe"]), keyword


def test_the_gram_index_follows_creates_updates_deletes_and_imports(store: UserStore) -> None:
    from user_api.models import ImportedUser

    kate = store.create_user("kate", "password-1", "kate@nasa.example", "Katherine Johnson")
    other = store.create_user("root", "password-1", role="admin")
    assert _gram_table(store) == _grams_recomputed(store)
    store.update_user(kate.id, full_name="Katherine Goble", email="kg@qz.example")
    assert _names(store.search_users("qz", offset=0, limit=10, include_email=True)) == ["kate"]
    assert store.search_users("js", offset=0, limit=10, include_email=True).total == 0  # "Johnson" is gone
    assert store.search_users("hn", offset=0, limit=10, include_email=False).total == 0
    assert _gram_table(store) == _grams_recomputed(store)
    store.update_user(kate.id, email=None, full_name=None, username="kg")
    assert store.search_users("qz", offset=0, limit=10, include_email=True).total == 0
    assert _names(store.search_users("g", offset=0, limit=10, include_email=False)) == ["kg"]
    assert _gram_counts(store) == _counts_recomputed(store)
    store.update_user(kate.id, status="disabled")  # disabled users are still found, as by long keywords
    assert _names(store.search_users("kg", offset=0, limit=10, include_email=False)) == ["kg"]
    assert _gram_table(store) == _grams_recomputed(store)
    store.delete_user(kate.id)
    assert store.search_users("k", offset=0, limit=10, include_email=True).total == 0
    store.import_users([ImportedUser("imported", FAST_HASHER.hash("password-1"), "im@wq.example", "Ima Port")])
    assert _names(store.search_users("wq", offset=0, limit=10, include_email=True)) == ["imported"]
    assert _gram_table(store) == _grams_recomputed(store)
    assert _gram_counts(store) == _counts_recomputed(store)
    assert len({pk for _, _, pk in _gram_table(store)}) == 2 and other.username == "root"  # the tombstone holds none


def _downgrade_to_schema_2(store: UserStore) -> None:
    """Before the gram index."""
    _downgrade(store, "DROP TABLE user_grams", 2)


def test_a_schema_2_database_gets_its_gram_index_on_opening(store_settings: Settings) -> None:
    first = open_user_store(store_settings, hasher=FAST_HASHER)
    first.create_user("bob", "password-1", "bob@qv.example", "Bob Stone")
    gone = first.create_user("ann", "password-1", None, "Ann Qvist")
    first.delete_user(gone.id)
    _downgrade_to_schema_2(first)
    first.close()
    again = open_user_store(store_settings, hasher=FAST_HASHER)
    try:
        assert _names(again.search_users("qv", offset=0, limit=10, include_email=True)) == ["bob"]
        assert again.search_users("qv", offset=0, limit=10, include_email=False).total == 0
        assert _gram_table(again) and _gram_table(again) == _grams_recomputed(again)
        assert _gram_counts(again) == _counts_recomputed(again)
    finally:
        again.close()


def _downgrade_to_schema_3(store: UserStore) -> None:
    """Before the gram counts (and, on PostgreSQL, with the plain column trigram indexes)."""
    _downgrade(store, "DROP TABLE user_gram_counts", 3)
    if store.dialect.name == "postgresql":  # type: ignore[attr-defined]
        with store.dialect.write() as tx:  # type: ignore[attr-defined]
            tx.run("DROP INDEX users_username_words_trgm")
            tx.run("CREATE INDEX users_username_trgm ON users USING gin (username gin_trgm_ops)")


def _trigram_indexes(store: UserStore) -> set[str]:
    with store.dialect.read() as tx:  # type: ignore[attr-defined]
        rows = tx.all("SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'users'"
                       " AND indexdef LIKE ?", ("%gin_trgm_ops%",))
    return {row[0] for row in rows}


def test_a_schema_3_database_gets_its_gram_counts_on_opening(store_settings: Settings) -> None:
    first = open_user_store(store_settings, hasher=FAST_HASHER)
    for name in ("qa", "qb", "bq"):
        first.create_user(name, "password-1", f"{name}@zx.example", "Quinn")
    gone = first.create_user("qgone", "password-1", None, "Gone Q")
    first.delete_user(gone.id)
    _downgrade_to_schema_3(first)
    first.close()
    again = open_user_store(store_settings, hasher=FAST_HASHER)
    try:
        assert _gram_counts(again) and _gram_counts(again) == _counts_recomputed(again)
        if again.dialect.name == "postgresql":  # type: ignore[attr-defined]
            assert _trigram_indexes(again) == {f"users_{f}_words_trgm" for f in ("username", "full_name", "email")}
        page = again.search_users("q", offset=0, limit=2, include_email=False)
        assert page.total == 3 and _names(page) == ["qa", "qb"]  # prefix matches first, counted from the table
        assert again.search_users("q", offset=0, limit=10, include_email=False, count_limit=1).total == 1
        assert again.search_users("zx", offset=0, limit=10, include_email=True).total == 3
        again.create_user("zq", "password-1")
        assert again.search_users("q", offset=0, limit=10, include_email=False).total == 4
        assert _gram_counts(again) == _counts_recomputed(again)
    finally:
        again.close()


def test_keywords_across_word_breaks_match_exactly(store: UserStore) -> None:
    """PostgreSQL's trigram indexes read text with its word breaks made 'q' (store_postgres.word_text):
    keywords spanning a space, '.', '-', '_' or holding a 'q' find exactly what a substring test finds."""
    people = {
        "kas-nor": ("Kas Nor", "kas.nor@example.org"),
        "kasqnor": ("Kasqnor Q", "kasqnor@example.org"),
        "ann_72": ("Ann Seventy", "ann72@example.org"),
        "annq72": ("Ann Q", "a.n.n@example.org"),
        "rosa": ("Rosa O'Neil", None),
    }
    for name, (full_name, email) in people.items():
        store.create_user(name, "password-1", email, full_name)

    def found(keyword: str, include_email: bool = True) -> list[str]:
        return _names(store.search_users(keyword, offset=0, limit=10, include_email=include_email))

    assert found("s n") == ["kas-nor"]
    assert found("s-n") == ["kas-nor"] and found("s.n") == ["kas-nor"]
    assert found("sqn") == ["kasqnor"]
    assert found("N_7") == ["ann_72"] and found("nq7") == ["annq72"]
    assert found("n.n") == ["annq72"] and found("n.n", include_email=False) == []
    assert found("o'n") == ["rosa"] and found("O'NEIL") == ["rosa"]
    assert found("nor") == ["kas-nor", "kasqnor"]  # no break, no 'q': the word test alone decides


def test_long_keyword_pages_are_the_same_dense_or_sparse(store: UserStore) -> None:
    """PostgreSQL picks the page's plan from the count (walk the primary key when matches are
    dense, read them all and sort when sparse): both give the sign-up order and the same pages."""
    filler = FAST_HASHER.hash("password-1")
    store.import_users(ImportedUser(f"user{n}", filler, None, f"Common Name {n}") for n in range(300))
    dense = store.search_users("mmon", offset=0, limit=3, include_email=False)
    assert dense.total == 300 and _names(dense) == ["user0", "user1", "user2"]
    deep = store.search_users("mmon", offset=297, limit=10, include_email=False)
    assert _names(deep) == ["user297", "user298", "user299"]
    sparse = store.search_users("name 29", offset=1, limit=5, include_email=False)
    assert sparse.total == 11 and _names(sparse) == ["user290", "user291", "user292", "user293", "user294"]


# ---- 3-5 character keywords: counted on PostgreSQL (schema 5), FTS5 on SQLite ------------------


def _expected_search(users: list[User], keyword: str, *, include_email: bool) -> list[str]:
    """The ranking as the endpoint promises it, from the users themselves: usernames starting
    with the keyword by username, then every other user holding it (case folded) in sign-up order."""
    from user_api.grams import fold

    needle = fold(keyword)

    def holds(user: User) -> bool:
        texts = [user.username, user.full_name] + ([user.email] if include_email else [])
        return any(text and needle in fold(text) for text in texts)

    starts = sorted(u.username for u in users if u.username.startswith(keyword.lower()))
    return starts + [u.username for u in users if holds(u) and u.username not in starts]


def _mixed_users(store: UserStore) -> list[User]:
    """~200 users where 3-5 character keywords are dense, sparse, in emails only, or prefixes."""
    first = ["Anna", "Marta", "Tomas", "Linnea", "Oskar", "Mira", "Tonje", "Ola"]
    last = ["Lind", "Stone", "Tonnes", "Marsh", "Berg", "Holm", "Nyland"]
    users = []
    for n in range(200):
        given, family = first[(n if n % 4 else n // 4) % len(first)], last[(n * 3) % len(last)]
        name = f"{given.lower()}{family.lower()[:3]}{n}" if n % 4 else f"ton{n}"
        domain = "tonic.example" if n % 9 == 0 else "mail.example"
        users.append(store.create_user(name, "password-1", f"{given.lower()}.{n}@{domain}", f"{given} {family}"))
    return users


def test_three_to_five_character_keywords_rank_and_count_alike_on_both_stores(store: UserStore) -> None:
    users = _mixed_users(store)
    for keyword in ("ton", "Ton", "tonn", "a lin", "onic", "nic.e", "mart", "ras", "lind", "zzz", "ina s"):
        for include_email in (True, False):
            expected = _expected_search(users, keyword, include_email=include_email)
            page = store.search_users(keyword, offset=0, limit=500, include_email=include_email)
            assert (page.total, _names(page)) == (len(expected), expected), (keyword, include_email)
            for offset in (0, 7, len(expected) - 3):
                window = store.search_users(keyword, offset=max(0, offset), limit=5, include_email=include_email,
                                            count_limit=20)
                assert _names(window) == expected[max(0, offset):max(0, offset) + 5], (keyword, offset)
                assert window.total == min(20, len(expected))


def test_long_keyword_pages_are_the_same_walked_or_by_pattern(pg_store: UserStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL reads a 4-5 character page along its 3-grams' rows, or by the pattern
    (store_postgres.walk_plan chooses from the counts): both plans give the same pages. (SQLite
    reads every 3+ character page from FTS5: one plan.)"""
    from user_api import store_postgres

    store = pg_store

    users = _mixed_users(store)
    # Near misses of 'tonj': both its 3-grams apart, and one of them alone.
    users += [store.create_user("nearmiss", "password-1", None, "Onjo Tonsberg"),
              store.create_user("onlyone", "password-1", None, "Onjali")]
    chosen = []
    real_plan = store_postgres.walk_plan
    monkeypatch.setattr(store_postgres, "walk_plan", lambda *a: chosen.append(real_plan(*a)) or chosen[-1])
    # Every page by the pattern; every page walked, the other 3-grams probed per key; read over the window.
    for free_rows, descent_rows in ((-10**9, 3), (10**9, 0), (10**9, 10**6)):
        monkeypatch.setattr(store_postgres, "WALK_FREE_ROWS", free_rows)
        monkeypatch.setattr(store_postgres, "WALK_DESCENT_ROWS", descent_rows)
        for keyword in ("tonj", "tonn", "tonje", "a lin", "onic", "nic.e", "ina s", "lind", "marta"):
            expected = _expected_search(users, keyword, include_email=True)
            starts = sum(u.username.startswith(keyword) for u in users)  # the page after them is walked
            for offset in {0, 3, 11, starts, max(0, starts - 2), max(0, len(expected) - 2), len(expected)}:
                page = store.search_users(keyword, offset=offset, limit=4, include_email=True)
                assert _names(page) == expected[offset:offset + 4], (free_rows, descent_rows, keyword, offset)
    walked = [plan for plan in chosen if plan and plan[1] > 0]
    assert None in chosen and {plan[2] for plan in walked} == {True, False}  # every plan ran


def _downgrade_to_schema_4(store: UserStore) -> None:
    """Before PostgreSQL's 3-character rows and 3-5 character counts."""
    _downgrade(store, "DELETE FROM user_grams WHERE length(gram) > 2", 4)
    with store.dialect.write() as tx:  # type: ignore[attr-defined]
        tx.run("DELETE FROM user_gram_counts WHERE length(gram) > 2")


def test_a_schema_4_database_gets_its_longer_grams_on_opening(pg_store_settings: Settings) -> None:
    """PostgreSQL only: SQLite indexes and counts 1-2 character grams only, its schema stays 4."""
    store_settings = pg_store_settings
    first = open_user_store(store_settings, hasher=FAST_HASHER)
    users = [first.create_user(name, "password-1", f"{name}@tonic.example", f"{name.title()} Tonnes")
             for name in ("tonje", "antonia", "oskar")]
    first.delete_user(users[2].id)
    _downgrade_to_schema_4(first)
    first.close()
    again = open_user_store(store_settings, hasher=FAST_HASHER)
    try:
        assert _gram_table(again) == _grams_recomputed(again)
        assert _gram_counts(again) == _counts_recomputed(again)
        assert max(len(gram) for gram, _ in _gram_counts(again)) == 5
        assert _names(again.search_users("ton", offset=0, limit=10, include_email=False)) == ["tonje", "antonia"]
        assert again.search_users("tonne", offset=0, limit=10, include_email=False).total == 2
        assert again.search_users("onic", offset=0, limit=10, include_email=False).total == 0
        assert again.search_users("onic", offset=0, limit=10, include_email=True).total == 2
    finally:
        again.close()
