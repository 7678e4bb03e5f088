"""Registry signatures that `npm audit signatures` verifies (pure functions over a key).

What npm checks (npm CLI `audit signatures` and pacote's registry fetcher):

* the registry's public keys come from `GET /-/npm/v1/keys` as
  `{"keys": [{"expires", "keyid", "keytype", "scheme", "key"}]}`, `key` being the base64 DER
  SubjectPublicKeyInfo (npm wraps it in PEM armour itself);
* each version's `dist.signatures` is `[{"keyid", "sig"}]`, `sig` the base64 DER ECDSA P-256
  signature (SHA-256) over the bytes `<name>@<version>:<dist.integrity>`;
* a signature whose key has an `expires` date only verifies for a version published (its
  `time[<version>]` in the full document) before that date.

The key id is the OpenSSH-style fingerprint of the public key, `SHA256:<unpadded base64>`, which
is how the public registry names its keys. Signatures are deterministic (RFC 6979), so a build
of the same inputs with the same key writes the same bytes.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from registry_gen.errors import ConfigError

if TYPE_CHECKING:  # cryptography loads when a key is used: a build without signing never pays for it
    from cryptography.hazmat.primitives.asymmetric import ec

KEYS_DOCUMENT = "-/npm/v1/keys"  # where npm looks for the keys, relative to the registry URL
KEY_TYPE = "ecdsa-sha2-nistp256"


@cache
def signing_algorithm() -> Any:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.ECDSA(hashes.SHA256(), deterministic_signing=True)


@dataclass(frozen=True)
class PublicKey:
    """One entry of the keys document."""

    keyid: str
    key: str  # base64 DER SubjectPublicKeyInfo
    expires: str | None = None  # ISO 8601; versions published from then on no longer verify with it

    def to_json(self) -> dict[str, Any]:
        return {"expires": self.expires, "keyid": self.keyid, "keytype": KEY_TYPE, "scheme": KEY_TYPE, "key": self.key}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PublicKey:
        return cls(keyid=str(data["keyid"]), key=str(data["key"]), expires=data.get("expires"))


def signed_message(name: str, version: str, integrity: str) -> bytes:
    """The bytes npm verifies: `<name>@<version>:<integrity>` (the version's `_id`, a colon, its integrity)."""
    return f"{name}@{version}:{integrity}".encode()


class Signer:
    """The registry's private key, and what it signs."""

    def __init__(self, private_key: ec.EllipticCurvePrivateKey):
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        if not isinstance(private_key.curve, ec.SECP256R1):
            raise ConfigError(f"the signing key must be an ECDSA P-256 key, not {private_key.curve.name}")
        self._key = private_key
        public = private_key.public_key()
        spki = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        self.public = PublicKey(keyid=key_id(public), key=base64.b64encode(spki).decode("ascii"))

    @property
    def keyid(self) -> str:
        return self.public.keyid

    @classmethod
    def from_pem(cls, data: bytes, source: str) -> Signer:
        """A signer from a PEM private key; `source` names where it came from, for the error."""
        from cryptography.exceptions import UnsupportedAlgorithm
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
            raise ConfigError(f"{source}: not an unencrypted PEM private key ({exc}); make one with `registry-gen keys generate`") from exc
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ConfigError(f"{source}: the signing key must be an ECDSA P-256 key; make one with `registry-gen keys generate`")
        try:
            return cls(key)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from exc

    def signature(self, name: str, version: str, integrity: str) -> dict[str, str]:
        """One `dist.signatures` entry."""
        sig = self._key.sign(signed_message(name, version, integrity), signing_algorithm())
        return {"keyid": self.keyid, "sig": base64.b64encode(sig).decode("ascii")}


def key_id(public: ec.EllipticCurvePublicKey) -> str:
    """`SHA256:` and the unpadded base64 SHA-256 of the key's OpenSSH wire form (`ssh-keygen -l`)."""
    from cryptography.hazmat.primitives import serialization

    openssh = public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    blob = base64.b64decode(openssh.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode("ascii").rstrip("=")


def generate_pem() -> bytes:
    """A new P-256 private key, PKCS#8 PEM, unencrypted (the build reads it unattended)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def rotate_keyring(recorded: Iterable[PublicKey], current: PublicKey | None, now: str) -> list[PublicKey]:
    """The keys to publish after a build signing with `current` (None: signing is off).

    Every key that ever signed a document in the tree stays listed, so documents signed before
    a rotation keep verifying; a key that stopped signing gets `expires` = `now` (versions
    published later cannot carry its signature). The current key comes first, without expiry.
    """
    keys: list[PublicKey] = []
    for key in recorded:
        if current is not None and key.keyid == current.keyid:
            continue
        keys.append(key if key.expires else PublicKey(key.keyid, key.key, now))
    return ([current] if current is not None else []) + keys


def keys_document(keys: Iterable[PublicKey]) -> dict[str, Any]:
    return {"keys": [key.to_json() for key in keys]}
