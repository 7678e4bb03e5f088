"""Verdaccio's htpasswd accounts, moved into the user store with their passwords working.

Hashes are kept as they are (bcrypt, crypt, `{SHA}`, `$apr1$`); credentials.PasswordHasher
verifies them and the store re-hashes to argon2id at the first successful login."""

from __future__ import annotations

from pathlib import Path

from registry_gen.errors import RegistryError
from registry_gen.settings import Settings
from user_api.credentials import PasswordHasher, is_legacy_hash
from user_api.errors import UserApiError, UsernameTaken
from user_api.models import ImportedUser
from user_api.store import open_user_store

PLAIN = "{PLAIN}"


def parse_htpasswd(text: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """([(user, hash)], [(line or user, reason)]) of an htpasswd file (`user:hash[:comment]`)."""
    accounts, skipped = [], []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        user, sep, rest = line.partition(":")
        password_hash = rest.split(":")[0]  # Verdaccio appends `:autocreated <date>`; no hash form holds a colon
        if not sep or not user or not password_hash:
            skipped.append((f"line {number}", "not `user:hash`"))
        elif not (is_legacy_hash(password_hash) or password_hash.startswith(PLAIN)):
            skipped.append((user, "password hash in a form this registry cannot verify; set a new password"))
        else:
            accounts.append((user, password_hash))
    return accounts, skipped


def import_htpasswd(settings: Settings, path: Path) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """Creates an account per entry (existing names are left as they are); returns
    ({created username: its account id}, skipped). The importer binds the imported packages'
    maintainer entries to those ids (registry_gen.importers.verdaccio.bind_accounts)."""
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RegistryError(f"{path}: cannot be read as an htpasswd file ({exc})") from exc
    accounts, skipped = parse_htpasswd(text)
    created: dict[str, str] = {}
    store = open_user_store(settings)
    try:
        for user, password_hash in accounts:
            if password_hash.startswith(PLAIN):
                password_hash = PasswordHasher().hash(password_hash[len(PLAIN) :])
            try:
                store.import_users([ImportedUser(user.lower(), password_hash)], audit_source="htpasswd")
            except UsernameTaken:
                skipped.append((user, "an account with this name exists already; kept it"))
                continue
            except UserApiError as exc:
                skipped.append((user, exc.detail))
                continue
            imported = store.get_by_username(user.lower())
            if imported is not None:
                created[imported.username] = imported.id
    finally:
        store.close()
    return created, skipped
