"""Issue 30: account changes in the audit log. Through a real `serve` and the CLI: an account
created (npm adduser, `registry-gen user add`), its role and password changed, tokens created and
revoked, its groups changed, a hook added and removed, an account removed; `registry-gen audit-log`
lists each with its actor and where it came from, never an email, a password or a token, and no
route of the API changes or removes an entry."""

from __future__ import annotations

import getpass
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.audit.pages import admin_pages
from tests.registry_api.helpers import RegistryProcess, add_user, http

pytestmark = pytest.mark.slow
ADMIN = ("boss", "boss-password-1")
SECRETS = ("alice-password-1", "alice-password-2", "bob-password-1", "an-audited-hook-secret", "example.com", ADMIN[1])


def _cli(root: Path, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run([sys.executable, "-m", "registry_gen", *args], cwd=root, input=stdin, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def _audit(root: Path, *filters: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in _cli(root, "audit-log", "--format", "jsonl", *filters).splitlines()]


def _account_changes(server: RegistryProcess, admin: str) -> tuple[str, str]:
    """What the test does through the API; (alice's id, the key of the token she revoked)."""
    base = server.base
    alice = add_user(base, "alice", "alice-password-1")  # npm adduser: the account and its first token
    bob = add_user(base, "bob", "bob-password-1")
    alice_id = http("GET", base + "user/search?keyword=alice", token=admin).json["content"][0]["id"]
    patch = {"Content-Type": "application/merge-patch+json"}
    assert http("PATCH", f"{base}user/{alice_id}", token=admin, body={"role": "admin"}, headers=patch).status == 200
    changed = http("PATCH", f"{base}user/{alice_id}", token=admin, headers=patch, body={"role": "user"})
    assert changed.status == 200
    own = {"password": "alice-password-2", "currentPassword": "alice-password-1"}
    assert http("PATCH", f"{base}user/{alice_id}", token=alice, body=own, headers=patch).status == 200  # ends her sessions
    alice = str(http("POST", base + "-/user-api/tokens", body={"username": "alice", "password": "alice-password-2"}).json["token"])
    spare = http("POST", base + "-/npm/v1/tokens", token=alice, body={"password": "alice-password-2", "readonly": True})
    assert spare.status == 201, spare.body
    assert http("DELETE", f"{base}-/npm/v1/tokens/token/{spare.json['key']}", token=alice).status == 200
    hook = http("POST", base + "-/npm/v1/hooks/hook", token=alice,
                body={"type": "scope", "name": "@team", "endpoint": "http://127.0.0.1:9/hook?k=v", "secret": SECRETS[3]})  # fmt: skip
    assert hook.status == 201, hook.body
    assert http("DELETE", f"{base}-/npm/v1/hooks/hook/{hook.json['id']}", token=alice).status == 200
    bob_id = http("GET", base + "user/search?keyword=bob", token=admin).json["content"][0]["id"]
    assert http("DELETE", f"{base}user/{bob_id}", token=admin).status == 204
    assert bob
    return alice_id, str(spare.json["key"])


def test_account_changes_are_in_the_audit_log_with_who_made_them(tmp_path: Path) -> None:
    root = tmp_path / "registry"
    root.mkdir()
    (root / "registry.yaml").write_text("signup: open\nhooks: {allow_networks: [127.0.0.0/8]}\n")
    _cli(root, "user", "add", ADMIN[0], "--admin", "--password-stdin", stdin=ADMIN[1] + "\n")
    server = RegistryProcess(root).start()
    try:
        admin = str(http("POST", server.base + "-/user-api/tokens", body={"username": ADMIN[0], "password": ADMIN[1]}).json["token"])
        alice_id, revoked_key = _account_changes(server, admin)
        _cli(root, "groups", "alice", "--add", "team")
        paged = admin_pages(server.base, admin, "-/user-api/audit/accounts", "account=alice", limit=3)
        by_boss = admin_pages(server.base, admin, "-/user-api/audit/accounts", "actor=boss", limit=100)
        stranger = add_user(server.base, "carol", "carol-password-1")
        assert http("GET", server.base + "-/user-api/audit/accounts", token=stranger).status == 403
        assert http("GET", server.base + "-/user-api/audit/accounts").status == 401
        assert http("GET", server.base + "-/user-api/audit/accounts?package=alice", token=admin).status == 400
        assert http("DELETE", server.base + "-/user-api/audit/accounts", token=admin).status in (404, 405)
    finally:
        server.stop()

    [created_boss] = _audit(root, "--account", "boss", "--actor", "registry-gen user")
    assert created_boss["event"] == "user:create" and created_boss["detail"] == {"role": "admin", "status": "active"}
    assert created_boss["who"] == {"command": "registry-gen user add", "os_user": getpass.getuser()}
    alice = _audit(root, "--account", "alice")
    events = [(e["event"], e["actor"]) for e in alice]
    assert events == [
        ("user:create", "alice"), ("token:create", "alice"),  # npm adduser: she signs herself up
        ("user:role", "boss"), ("user:role", "boss"), ("user:password", "alice"),
        ("token:create", "alice"), ("token:create", "alice"), ("token:revoke", "alice"),
        ("hook:add", "alice"), ("hook:remove", "alice"), ("user:groups", "registry-gen groups"),
    ], events
    assert alice[2]["detail"] == {"before": "user", "after": "admin"} and alice[3]["detail"] == {"before": "admin", "after": "user"}
    assert alice[7]["detail"]["token_key"].replace("-", "") == revoked_key.replace("-", "")  # npm shows keys without dashes
    assert alice[6]["detail"] == {**alice[7]["detail"], "readonly": True}
    assert alice[8]["detail"]["watches"] == "@team" and alice[8]["detail"]["host"] == "127.0.0.1"
    assert alice[10]["detail"] == {"before": [], "after": ["team"]}
    for entry in alice[:10]:
        assert entry["who"]["address"] == "127.0.0.1" and entry["account"] == "alice"
    assert alice[2]["actor_id"] != alice_id and alice[4]["actor_id"] == alice_id
    assert alice[2]["who"]["token_key"] and alice[8]["who"]["token_key"]  # the key, never the token
    assert paged == alice  # the admin route pages the same entries as the CLI lists
    assert {e["actor"] for e in by_boss} == {"boss"}
    assert [(e["event"], e["account"]) for e in by_boss if e["account"] != "boss"] == [
        ("user:role", "alice"), ("user:role", "alice"), ("user:remove", "bob")]
    [removed] = _audit(root, "--account", "bob", "--actor", "boss")
    assert removed["event"] == "user:remove"
    everything = _cli(root, "audit-log", "--format", "jsonl")
    assert not any(secret in everything for secret in SECRETS)  # no password, secret or email
    assert "k=v" not in everything  # a hook's endpoint may carry a secret in its query: only its host is kept
    assert _audit(root, "--package", "alice") == []  # an account change is no package's write
    text = _cli(root, "audit-log", "--account", "alice").splitlines()
    assert len(text) == len(alice) and "boss  user:role  account=alice" in text[2]
