"""The registry's signing key and its published public keys: the I/O around registry_gen.signing.

The private key comes from the configuration (`signing_key`: a PEM file) or from the
environment ($REGISTRY_GEN_SIGNING_KEY: the PEM text), never from content/ or the tree. The
public keys every build has signed with are kept in the state's ledger, so a rotation keeps the
old key listed (with `expires`) for as long as the tree is built from that state.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol

from registry_gen.errors import ConfigError
from registry_gen.settings import SIGNING_KEY_ENV, Settings
from registry_gen.signing import KEYS_DOCUMENT, PublicKey, Signer, generate_pem, keys_document, rotate_keyring
from registry_gen.writer import remove_tree, write_if_changed

class KeyringState(Protocol):
    """Where the keyring is kept (registry_gen.state: the ledger, never dropped): the JSON list of
    every public key the tree was signed with."""

    def signing_keys(self) -> str: ...
    def record_signing_keys(self, public_keys: str) -> None: ...


def _inside(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


def check_key_location(path: Path, settings: Settings) -> None:
    """A private key inside content/ or the tree would be published (or hashed into the build)."""
    for folder, label in ((settings.content_dir, "content_dir"), (settings.out_dir, "out_dir")):
        if _inside(path, folder):
            raise ConfigError(f"signing_key {path} is inside {label} ({folder}), where it could be published; keep it outside both")


def load_signer(settings: Settings) -> Signer | None:
    """The configured signer, or None when signing is off. Raises ConfigError naming the source."""
    if settings.signing_key_pem:
        return Signer.from_pem(settings.signing_key_pem.encode("utf-8"), f"${SIGNING_KEY_ENV}")
    if settings.signing_key is None:
        return None
    path = Path(settings.signing_key)
    check_key_location(path, settings)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"signing_key {path}: cannot read it ({exc.strerror}); create one with `registry-gen keys generate`"
        ) from exc
    return Signer.from_pem(data, f"signing_key {path}")


def write_new_key(path: Path, settings: Settings) -> Signer:
    """A new key at `path` (mode 0600), refusing to replace a file: an old key is never lost."""
    check_key_location(path, settings)
    pem = generate_pem()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as exc:
        raise ConfigError(f"{path} exists; keys generate never replaces a key: choose another --out (see docs/operating/keys.md, rotation)") from exc
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)
        handle.flush()
        os.fsync(handle.fileno())
    return Signer.from_pem(pem, str(path))


def recorded_keys(state: KeyringState) -> list[PublicKey]:
    raw = state.signing_keys()
    return [PublicKey.from_json(item) for item in json.loads(raw)] if raw else []


def publish_keys(
    settings: Settings, state: KeyringState, signer: Signer | None, written: list[str], recorded: list[PublicKey] | None = None
) -> list[PublicKey]:
    """Records the current key in the state and writes `-/npm/v1/keys` (removed when no key was
    ever used). `recorded`: the state's keys when the caller read them already (None: read here)."""
    moment = datetime.now(timezone.utc)
    now = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    keys = rotate_keyring(recorded_keys(state) if recorded is None else recorded, signer.public if signer else None, now)
    state.record_signing_keys(json.dumps([key.to_json() for key in keys]))
    target = settings.out_dir / KEYS_DOCUMENT
    if not keys:
        remove_tree(settings.out_dir, KEYS_DOCUMENT)
        return keys
    body = json.dumps(keys_document(keys), separators=(",", ":")).encode("utf-8")
    if write_if_changed(target, body):
        written.append(KEYS_DOCUMENT)
    return keys
