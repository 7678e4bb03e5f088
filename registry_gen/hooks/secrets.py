"""Hook secrets at rest: encrypted with Fernet (AES-128-CBC + HMAC-SHA256, from `cryptography`)
under a key every instance shares: `hooks: {secret_key: ...}` in registry.yaml, or
$REGISTRY_HOOKS_KEY. The embedded default (SQLite, no database_url) with neither set generates one
into the data folder (`hooks.key`, 0600) the first time a hook is made, and says so; with a shared
database it refuses to make hooks until the key is set, since each instance would invent its own."""

from __future__ import annotations

import base64
import hashlib
import logging
import os
from pathlib import Path
from typing import Final

from cryptography.fernet import Fernet, InvalidToken

from registry_gen.errors import ConfigError
from registry_gen.hooks.rules import HooksNotConfigured
from registry_gen.settings import Settings

KEY_ENV: Final = "REGISTRY_HOOKS_KEY"
KEY_FILE: Final = "hooks.key"
MIN_KEY: Final = 32
log = logging.getLogger(__name__)


class SecretBox:
    def __init__(self, key_text: str):
        if len(key_text) < MIN_KEY:
            raise ConfigError(f"hooks.secret_key (or ${KEY_ENV}) must be at least {MIN_KEY} characters")
        self._fernet = Fernet(base64.urlsafe_b64encode(hashlib.sha256(key_text.encode("utf-8")).digest()))

    def seal(self, secret: str) -> str:
        return self._fernet.encrypt(secret.encode("utf-8")).decode("ascii")

    def open(self, cipher: str) -> str | None:
        """The secret, or None when it was sealed under another key (the key was changed)."""
        try:
            return self._fernet.decrypt(cipher.encode("ascii")).decode("utf-8")
        except (InvalidToken, ValueError):
            return None


def configured_key(settings: Settings) -> str | None:
    return settings.hooks.secret_key or os.environ.get(KEY_ENV) or None


def secret_box(settings: Settings, *, create: bool) -> SecretBox:
    """The box for `settings`; `create`: on the embedded default, make the key file if missing."""
    key = configured_key(settings)
    if key is not None:
        return SecretBox(key)
    if settings.database_url:
        raise HooksNotConfigured(
            f"hooks need a key to encrypt their secrets that every instance shares: set hooks.secret_key in "
            f"registry.yaml or ${KEY_ENV} (at least {MIN_KEY} characters)"
        )
    path = Path(settings.data_dir) / KEY_FILE
    if not path.exists():
        if not create:
            raise HooksNotConfigured(f"no hook has been made yet (no {path})")
        _write_key(path)
    return SecretBox(path.read_text(encoding="ascii").strip())


def _write_key(path: Path) -> None:
    """Writes a new key beside `path` and links it into place: a reader never sees half a key, and
    of two writers at once the first link wins and both use its key."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    spare = path.with_name(f".{KEY_FILE}.{os.getpid()}.tmp")
    descriptor = os.open(spare, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
    with os.fdopen(descriptor, "w", encoding="ascii") as handle:
        handle.write(Fernet.generate_key().decode("ascii") + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    try:
        os.link(spare, path)
    except FileExistsError:
        return
    finally:
        spare.unlink()
    log.warning("hooks: generated the key that encrypts hook secrets into %s (back it up with the data folder; "
                "set hooks.secret_key to share one between instances)", path)
