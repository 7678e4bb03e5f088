"""Registry signatures: the signing core, the build's use of it, the keys file, the key command."""

from __future__ import annotations

import base64
import dataclasses
import json
import stat
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from webtest import TestApp

from registry_gen.build import run_build
from registry_gen.cli import main as registry_gen
from registry_gen.errors import ConfigError
from registry_gen.hosting import STATIC_UNDER_API, nginx_site, object_headers, upload_plan
from registry_gen.keyring import load_signer, write_new_key
from registry_gen.settings import SIGNING_KEY_ENV, Settings, load_settings
from registry_gen.signing import KEYS_DOCUMENT, PublicKey, Signer, generate_pem, key_id, rotate_keyring, signed_message
from tests.support import make_tarball

# The public npm registry's signing key and the id it publishes for it (its keys document, as
# npm's documentation shows it): the key id must be computed the way that registry computes it.
PUBLIC_REGISTRY_KEY = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE1Olb3zMAFFxXKHiIkQO5cJ3Yhl5i6UPp+IhuteBJbuHcA5UogKo0EWtlWwW6KSaKoTNEYL7JlCQiVnkhBktUgg=="
PUBLIC_REGISTRY_KEY_ID = "SHA256:jl3bwswu80PjjokCgh0o2w5c2U4LhQAE57gj9cz1kzA"


def _verify(public_key: PublicKey, entry: dict[str, str], message: bytes) -> None:
    key = serialization.load_der_public_key(base64.b64decode(public_key.key))
    assert isinstance(key, ec.EllipticCurvePublicKey)
    key.verify(base64.b64decode(entry["sig"]), message, ec.ECDSA(hashes.SHA256()))


def _signer() -> Signer:
    return Signer.from_pem(generate_pem(), "test")


# ---------------------------------------------------------------- the core


def test_key_id_is_the_public_registrys_fingerprint_form() -> None:
    public = serialization.load_der_public_key(base64.b64decode(PUBLIC_REGISTRY_KEY))
    assert isinstance(public, ec.EllipticCurvePublicKey)
    assert key_id(public) == PUBLIC_REGISTRY_KEY_ID


def test_signature_covers_name_version_and_integrity_and_is_deterministic() -> None:
    signer = _signer()
    entry = signer.signature("@scope/pkg", "1.0.0", "sha512-abc==")
    assert signed_message("@scope/pkg", "1.0.0", "sha512-abc==") == b"@scope/pkg@1.0.0:sha512-abc=="
    _verify(signer.public, entry, b"@scope/pkg@1.0.0:sha512-abc==")
    with pytest.raises(InvalidSignature):
        _verify(signer.public, entry, b"@scope/pkg@1.0.0:sha512-abd==")
    assert signer.signature("@scope/pkg", "1.0.0", "sha512-abc==") == entry  # RFC 6979: same bytes every build
    assert entry["keyid"] == signer.keyid and signer.keyid.startswith("SHA256:")


def test_only_p256_keys_sign() -> None:
    other = ec.generate_private_key(ec.SECP384R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    with pytest.raises(ConfigError, match="P-256"):
        Signer.from_pem(other, "k.pem")
    with pytest.raises(ConfigError, match="k.pem: not an unencrypted PEM private key"):
        Signer.from_pem(b"not a key", "k.pem")


def test_rotation_keeps_old_keys_with_an_expiry() -> None:
    a, b = _signer().public, _signer().public
    first = rotate_keyring([], a, "2026-01-01T00:00:00.000Z")
    assert first == [a]
    assert rotate_keyring(first, a, "2026-02-01T00:00:00.000Z") == [a]  # same key: nothing changes
    rotated = rotate_keyring(first, b, "2026-03-01T00:00:00.000Z")
    assert rotated == [b, dataclasses.replace(a, expires="2026-03-01T00:00:00.000Z")]
    # A later build keeps the first expiry; signing turned off expires the current key too.
    assert rotate_keyring(rotated, None, "2026-04-01T00:00:00.000Z") == [
        dataclasses.replace(b, expires="2026-04-01T00:00:00.000Z"),
        dataclasses.replace(a, expires="2026-03-01T00:00:00.000Z"),
    ]
    assert rotate_keyring(rotated, a, "2026-05-01T00:00:00.000Z")[0] == a  # back in use: no expiry
    assert rotated[0].to_json() == {"expires": None, "keyid": b.keyid, "keytype": "ecdsa-sha2-nistp256",
                                    "scheme": "ecdsa-sha2-nistp256", "key": b.key}  # fmt: skip


# ---------------------------------------------------------------- configuration and the key command


def test_key_from_file_or_environment(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_signer(settings) is None
    key = write_new_key(tmp_path / "keys" / "signing.pem", settings)
    assert stat.S_IMODE((tmp_path / "keys" / "signing.pem").stat().st_mode) == 0o600
    assert load_signer(dataclasses.replace(settings, signing_key=tmp_path / "keys" / "signing.pem")).keyid == key.keyid  # type: ignore[union-attr]
    (tmp_path / "registry.yaml").write_text("signing_key: keys/signing.pem\n")
    assert load_settings(tmp_path / "registry.yaml").signing_key == tmp_path / "keys" / "signing.pem"
    pem = generate_pem().decode()
    monkeypatch.setenv(SIGNING_KEY_ENV, pem)
    from_env = load_settings(tmp_path / "registry.yaml")
    assert pem not in repr(from_env)
    assert load_signer(from_env).keyid == Signer.from_pem(pem.encode(), "env").keyid  # type: ignore[union-attr]


def test_key_never_inside_content_or_tree_and_never_replaced(settings: Settings, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="inside content_dir"):
        write_new_key(settings.content_dir / "key.pem", settings)
    with pytest.raises(ConfigError, match="inside out_dir"):
        load_signer(dataclasses.replace(settings, signing_key=settings.out_dir / "key.pem"))
    write_new_key(tmp_path / "key.pem", settings)
    before = (tmp_path / "key.pem").read_bytes()
    with pytest.raises(ConfigError, match="exists"):
        write_new_key(tmp_path / "key.pem", settings)
    assert (tmp_path / "key.pem").read_bytes() == before
    with pytest.raises(ConfigError, match="cannot read it"):
        load_signer(dataclasses.replace(settings, signing_key=tmp_path / "missing.pem"))


def test_keys_generate_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "registry.yaml").write_text("signing_key: secret/key.pem\n")
    config = str(tmp_path / "registry.yaml")
    assert registry_gen(["keys", "generate", "-c", config]) == 0
    assert "key id SHA256:" in capsys.readouterr().out
    assert registry_gen(["keys", "generate", "-c", config]) == 1  # never replaces the key
    assert "exists" in capsys.readouterr().err
    assert registry_gen(["keys", "show", "-c", config]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["keys"][0]["keyid"] == load_signer(load_settings(config)).keyid  # type: ignore[union-attr]


# ---------------------------------------------------------------- the build


def _signed_settings(settings: Settings, tmp_path: Path, name: str = "key.pem") -> Settings:
    write_new_key(tmp_path / name, settings)
    return dataclasses.replace(settings, signing_key=tmp_path / name)


def _dist(settings: Settings, name: str, version: str, document: str = "index.html") -> dict:
    return json.loads((settings.out_dir / name / document).read_text())["versions"][version]["dist"]


def test_build_signs_full_and_abbreviated_documents(settings: Settings, tmp_path: Path) -> None:
    make_tarball(settings.content_dir, "@acme/lib", "1.0.0")
    # An imported manifest may carry the upstream registry's dist and signatures: they never pass.
    make_tarball(settings.content_dir, "plain", "2.0.0", dist={"signatures": [{"keyid": "SHA256:upstream", "sig": "x"}]})
    signed = _signed_settings(settings, tmp_path)
    assert run_build(signed).errors == []
    keys = json.loads((signed.out_dir / KEYS_DOCUMENT).read_text())["keys"]
    assert [k["keyid"] for k in keys] == [load_signer(signed).keyid]  # type: ignore[union-attr]
    public = PublicKey.from_json(keys[0])
    for name, version in (("@acme/lib", "1.0.0"), ("plain", "2.0.0")):
        full, abbreviated = _dist(signed, name, version), _dist(signed, name, version, "abbreviated.json")
        assert full["signatures"] == abbreviated["signatures"] and len(full["signatures"]) == 1
        _verify(public, full["signatures"][0], f"{name}@{version}:{full['integrity']}".encode())


def test_signed_build_is_byte_reproducible(settings: Settings, tmp_path: Path) -> None:
    make_tarball(settings.content_dir, "repro", "1.0.0")
    signed = _signed_settings(settings, tmp_path)
    run_build(signed)
    first = (signed.out_dir / "repro" / "index.html").read_bytes()
    again = dataclasses.replace(signed, out_dir=tmp_path / "again")
    run_build(again)
    assert (again.out_dir / "repro" / "index.html").read_bytes() == first


def test_turning_signing_on_signs_every_existing_document(settings: Settings, tmp_path: Path) -> None:
    make_tarball(settings.content_dir, "older", "1.0.0")
    run_build(settings)
    assert "signatures" not in _dist(settings, "older", "1.0.0")
    assert not (settings.out_dir / KEYS_DOCUMENT).exists()
    signed = _signed_settings(settings, tmp_path)
    run_build(signed)
    assert _dist(signed, "older", "1.0.0")["signatures"][0]["keyid"] == load_signer(signed).keyid  # type: ignore[union-attr]


def test_rotation_new_key_signs_new_builds_old_key_listed_until_full_rebuild(settings: Settings, tmp_path: Path) -> None:
    make_tarball(settings.content_dir, "old-pkg", "1.0.0")
    first = _signed_settings(settings, tmp_path, "a.pem")
    run_build(first)
    old_id = load_signer(first).keyid  # type: ignore[union-attr]
    second = _signed_settings(settings, tmp_path, "b.pem")
    new_id = load_signer(second).keyid  # type: ignore[union-attr]
    make_tarball(settings.content_dir, "new-pkg", "1.0.0")
    result = run_build(second)
    assert result.rebuilt_packages == ["new-pkg"]  # a new key alone rewrites nothing
    assert _dist(second, "old-pkg", "1.0.0")["signatures"][0]["keyid"] == old_id
    assert _dist(second, "new-pkg", "1.0.0")["signatures"][0]["keyid"] == new_id
    keys = json.loads((second.out_dir / KEYS_DOCUMENT).read_text())["keys"]
    assert [(k["keyid"], k["expires"] is None) for k in keys] == [(new_id, True), (old_id, False)]
    published = json.loads((second.out_dir / "old-pkg" / "index.html").read_text())["time"]["1.0.0"]
    assert published < keys[1]["expires"]  # npm accepts the old signature: published before expiry
    run_build(second, full=True)
    assert _dist(second, "old-pkg", "1.0.0")["signatures"][0]["keyid"] == new_id


def test_a_bad_key_stops_the_build_before_it_writes(settings: Settings, tmp_path: Path) -> None:
    make_tarball(settings.content_dir, "pkg", "1.0.0")
    (tmp_path / "bad.pem").write_text("garbage")
    with pytest.raises(ConfigError, match="bad.pem"):
        run_build(dataclasses.replace(settings, signing_key=tmp_path / "bad.pem"))
    assert not (settings.out_dir / "pkg").exists()


# ---------------------------------------------------------------- hosts


def test_hosts_serve_the_keys_file_as_json(settings: Settings, tmp_path: Path) -> None:
    assert object_headers(KEYS_DOCUMENT).content_type == "application/json"  # type: ignore[union-attr]
    assert KEYS_DOCUMENT in [u.key for u in upload_plan([KEYS_DOCUMENT])]
    site = nginx_site(tmp_path, "127.0.0.1:8080", "127.0.0.1:4874")
    assert "location = /-/npm/v1/keys {" in site  # an exact match wins over the API's ^~ /-/npm/ prefix
    server = pytest.importorskip("user_api.server")
    assert set(STATIC_UNDER_API) == set(server.STATIC_UNDER_DYNAMIC)


def test_serve_answers_the_keys_file_from_the_tree(settings: Settings, tmp_path: Path) -> None:
    server = pytest.importorskip("user_api.server")
    from user_api.store import open_user_store

    make_tarball(settings.content_dir, "pkg", "1.0.0")
    signed = _signed_settings(settings, tmp_path)
    run_build(signed)
    store = open_user_store(signed)
    try:
        reply = TestApp(server.create_server_app(signed, store)).get("/-/npm/v1/keys")
    finally:
        store.close()
    assert reply.content_type == "application/json"
    assert reply.json["keys"][0]["keyid"] == load_signer(signed).keyid  # type: ignore[union-attr]


def test_a_publish_through_the_api_is_signed(settings: Settings, tmp_path: Path) -> None:
    """The write API rebuilds the package it stored: the new version carries the signature."""
    server = pytest.importorskip("user_api.server")
    from tests.registry_api.helpers import publish_body, tarball
    from user_api.store import open_user_store

    signed = _signed_settings(settings, tmp_path)
    run_build(signed)
    store = open_user_store(signed)
    try:
        user = store.create_user("signer", "signer-password-1")
        token = store.create_token(user.id)[0]
        app = TestApp(server.create_server_app(signed, store))
        body = publish_body("@team/signed", "1.0.0", tarball("@team/signed", "1.0.0"))
        app.put_json("/@team%2fsigned", body, headers={"Authorization": f"Bearer {token}"}, status=201)
        dist = app.get("/@team%2fsigned").json["versions"]["1.0.0"]["dist"]
    finally:
        store.close()
    public = PublicKey.from_json(json.loads((signed.out_dir / KEYS_DOCUMENT).read_text())["keys"][0])
    _verify(public, dist["signatures"][0], f"@team/signed@1.0.0:{dist['integrity']}".encode())
