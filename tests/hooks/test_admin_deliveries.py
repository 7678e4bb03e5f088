"""Issue 30: the admins' delivery log and redeliver over HTTP (`GET /-/user-api/hooks/<hook>/deliveries`,
`POST .../deliveries/<delivery>/redeliver`), against a real `serve` and a receiver that verifies each
signature; to anyone but an administrator the hook's log is not there (404)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.hooks.receiver import Receiver
from tests.hooks.test_reliable_delivery import add_hook, publish, serving, until
from tests.registry_api.helpers import add_user, http

pytestmark = pytest.mark.slow
ADMIN = ("boss", "boss-password-1")


def _admin_token(root: Path, base: str) -> str:
    subprocess.run([sys.executable, "-m", "registry_gen", "user", "add", ADMIN[0], "--admin", "--password-stdin"], cwd=root,
                   input=ADMIN[1] + "\n", capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    reply = http("POST", base + "-/user-api/tokens", body={"username": ADMIN[0], "password": ADMIN[1]})
    assert reply.status == 201, reply.json
    return str(reply.json["token"])


def test_an_admin_reads_a_hooks_delivery_log_and_redelivers_over_http(tmp_path: Path) -> None:
    receiver = Receiver("admin-log-secret").up()
    server = serving(tmp_path / "registry")
    try:
        alice = add_user(server.base, "alice", "alice-password-1")
        admin = _admin_token(server.root, server.base)
        hook = add_hook(server, alice, "logged", receiver)
        for version in ("1.0.0", "1.0.1", "1.0.2"):
            publish(server, alice, "logged", version)
        received = receiver.wait_for(3)
        log_url = f"{server.base}-/user-api/hooks/{hook['id']}/deliveries"
        until(lambda: all(d["status"] == "delivered" for d in http("GET", log_url, token=admin).json["deliveries"]))
        page = http("GET", log_url + "?limit=2", token=admin).json
        rest = http("GET", f"{log_url}?limit=2&offset={page['next']}", token=admin).json
        deliveries = page["deliveries"] + rest["deliveries"]
        assert page["next"] == 2 and rest["next"] is None
        assert [d["seq"] for d in deliveries] == sorted((d["seq"] for d in deliveries), reverse=True)  # newest first
        assert {d["id"] for d in deliveries} == {r.delivery for r in received}
        assert all((d["attempts"], d["response_code"], d["event"]) == (1, 200, "package:publish") for d in deliveries)
        assert all(d["latency_ms"] is not None and d["last_attempt"] for d in deliveries)

        oldest = deliveries[-1]["id"]
        redeliver = f"{log_url}/{oldest}/redeliver"
        # To the hook's own owner (not an admin), to a stranger, and for an unknown hook: not there.
        assert http("GET", log_url, token=alice).status == 404
        assert http("POST", redeliver, token=alice).status == 404
        assert http("GET", log_url).status == 401
        assert http("GET", f"{server.base}-/user-api/hooks/{uuid.uuid4()}/deliveries", token=admin).status == 404
        other = f"{server.base}-/user-api/hooks/{uuid.uuid4()}/deliveries/{oldest}/redeliver"
        assert http("POST", other, token=admin).status == 404  # a delivery is redelivered through its own hook only
        refused = http("GET", log_url + "?limit=0", token=admin)
        assert refused.status == 400 and refused.json["errors"][0]["parameter"] == "limit"
        assert len(receiver.received) == 3  # nothing refused was delivered again

        queued = http("POST", redeliver, token=admin)
        assert queued.status == 202 and queued.json["id"] == oldest
        until(lambda: len(receiver.received) == 4)
        again = receiver.received[-1]
        assert again.delivery == oldest and again.signed and again.body["version"] == "1.0.0"
        until(lambda: http("GET", log_url + "?limit=50", token=admin).json["deliveries"][-1]["status"] == "delivered")
    finally:
        server.stop()
        receiver.down()
