"""The audit log (issue 30, acceptance 4): every write the tests make through a real `serve` with
npm 11 (publish, dist-tag, deprecate, owners, unpublish) and through the CLI (an import) is listed
by `registry-gen audit-log` with its actor and where it came from (the token's key, never the
token; the address; npm's user agent; the command and OS user of a CLI write); the admin route
pages through the same entries; no route of the API changes or removes one."""

from __future__ import annotations

import getpass
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.importers.upstream_server import hostile_upstream
from tests.audit.pages import admin_pages
from tests.registry_api.helpers import RegistryProcess, add_user, http, write_package

pytestmark = pytest.mark.slow

ADMIN = ("boss", "boss-password-1")
DEMO_WRITES = [
    ("package:publish", ("1.0.0",)),
    ("package:publish", ("1.1.0",)),
    ("package:dist-tag", ("1.0.0",)),
    ("package:deprecate", ("1.0.0",)),
    ("package:owner", ()),
    ("package:owner-rm", ()),
    ("package:unpublish", ("1.1.0",)),
]


def _cli(root: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "registry_gen", *args], cwd=root, input=stdin, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done


def _audit_jsonl(root: Path, *filters: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in _cli(root, "audit-log", "--format", "jsonl", *filters).stdout.splitlines()]


def _npm_writes(server: RegistryProcess, tmp_path: Path, token: str) -> None:
    alice = server.npm("alice", token)
    source = write_package(tmp_path / "src", "demo-pkg", "1.0.0")
    alice.run("publish", cwd=source)
    alice.run("publish", cwd=write_package(source, "demo-pkg", "1.1.0"))
    alice.run("dist-tag", "add", "demo-pkg@1.0.0", "stable", cwd=tmp_path)
    alice.run("deprecate", "demo-pkg@1.0.0", "use 1.1.0", cwd=tmp_path)
    alice.run("owner", "add", "bob", "demo-pkg", cwd=tmp_path)
    alice.run("owner", "rm", "bob", "demo-pkg", cwd=tmp_path)
    alice.run("unpublish", "demo-pkg@1.1.0", cwd=tmp_path)


def test_every_write_is_listed_with_who_made_it_and_nothing_can_change_it(tmp_path: Path) -> None:
    root = tmp_path / "registry"
    root.mkdir()
    _cli(root, "user", "add", ADMIN[0], "--admin", "--password-stdin", stdin=ADMIN[1] + "\n")
    server = RegistryProcess(root).start()
    try:
        alice_token = add_user(server.base, "alice", "alice-password-1")
        add_user(server.base, "bob", "bob-password-1")
        _npm_writes(server, tmp_path, alice_token)
        with hostile_upstream() as up:
            up.publish("imported-pkg", "2.0.0")
            _cli(root, "import", "registry", "imported-pkg@2.0.0", "--from", up.base, "--config", str(root / "registry.yaml"))
        alice_key = http("GET", server.base + "-/npm/v1/tokens", token=alice_token).json["objects"][0]["key"]
        admin = str(http("POST", server.base + "-/user-api/tokens", body={"username": ADMIN[0], "password": ADMIN[1]}).json["token"])

        listed = _audit_jsonl(root, "--package", "demo-pkg")
        assert [(e["event"], tuple(e["versions"])) for e in listed] == DEMO_WRITES
        assert {e["actor"] for e in listed} == {"alice"} and all(e["actor_id"] for e in listed)
        for entry in listed:
            who = entry["who"]
            assert who["token_key"].replace("-", "") == alice_key.replace("-", "") and alice_token not in json.dumps(entry)
            assert who["address"] == "127.0.0.1" and who["user_agent"].startswith("npm/")
        assert listed[2]["detail"] == {"tag": "stable", "before": None}
        assert listed[4]["detail"]["owners"] == {"before": ["alice"], "after": ["alice", "bob"]}
        assert "example.com" not in json.dumps(listed)  # no email in the audit log

        imported = _audit_jsonl(root, "--actor", "registry-gen import")
        assert [(e["event"], e["package"], e["versions"]) for e in imported] == [("package:import", "imported-pkg", ["2.0.0"])]
        assert imported[0]["who"] == {"command": "registry-gen import registry", "os_user": getpass.getuser()}
        everything = _audit_jsonl(root)
        writes = [e for e in everything if "seq" in e]  # the rest are account changes (test_account_audit.py)
        assert [e["package"] for e in writes] == ["demo-pkg"] * len(DEMO_WRITES) + ["imported-pkg"]
        assert {(e["event"], e["account"]) for e in everything if "seq" not in e} >= {("user:create", "alice"), ("user:create", "bob")}
        assert _audit_jsonl(root, "--since", str(writes[3]["seq"])) == writes[4:]  # a number is the journal's
        text = _cli(root, "audit-log", "--package", "demo-pkg").stdout.splitlines()
        assert len(text) == len(DEMO_WRITES) and "alice  package:owner-rm  demo-pkg" in text[5]

        assert admin_pages(server.base, admin, "-/user-api/audit", "package=demo-pkg", limit=3) == listed
        assert admin_pages(server.base, admin, "-/user-api/audit", "actor=alice", limit=100) == listed
        assert http("GET", server.base + "-/user-api/audit", token=alice_token).status == 403
        assert http("GET", server.base + "-/user-api/audit").status == 401
        assert http("GET", server.base + "-/user-api/audit?limit=0", token=admin).status == 400
        for method in ("PUT", "POST", "PATCH", "DELETE"):
            for path in ("-/user-api/audit", f"-/user-api/audit/{listed[0]['seq']}", f"-/user-api/audit?since={listed[0]['seq']}"):
                status = http(method, server.base + path, token=admin, body={"entries": []}).status
                assert status in (404, 405), (method, path, status)
        assert _audit_jsonl(root) == everything
    finally:
        server.stop()
