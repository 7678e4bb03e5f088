"""Issue 30, acceptance 2 (one instance): a receiver down during 5 writes gets all 5 once it is
back, in journal order, the writes never waiting on it; and a server SIGKILLed while a delivery is
in flight delivers it again after its restart, with the same delivery id."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.hooks.receiver import Receiver
from tests.registry_api.helpers import RegistryProcess, add_user, http, publish_body, tarball

pytestmark = pytest.mark.slow


def serving(root: Path, timeout: float = 2) -> RegistryProcess:
    root.mkdir(parents=True, exist_ok=True)
    (root / "registry.yaml").write_text(
        f"signup: open\nhooks: {{allow_networks: [127.0.0.0/8], retry_base_seconds: 0.2, timeout_seconds: {timeout}}}\n")
    return RegistryProcess(root).start()


def add_hook(server: RegistryProcess, token: str, package: str, receiver: Receiver) -> dict:
    reply = http("POST", f"{server.base}-/npm/v1/hooks/hook", token=token,
                 body={"type": "package", "name": package, "endpoint": receiver.url, "secret": receiver.secret})  # fmt: skip
    assert reply.status == 201, reply.json
    return reply.json


def publish(server: RegistryProcess, token: str, name: str, version: str) -> None:
    reply = http("PUT", f"{server.base}{name}", token=token, body=publish_body(name, version, tarball(name, version)))
    assert reply.status in (200, 201), reply.json


def cli(root: Path, *args: str, check: bool = True) -> str:
    done = subprocess.run([sys.executable, "-m", "registry_gen", *args], cwd=root, capture_output=True, text=True, timeout=120)
    assert not check or done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def until(condition, deadline: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + deadline
    while not condition():
        assert time.monotonic() < end, "condition not met in time"
        time.sleep(0.05)


def test_a_receiver_down_during_five_writes_gets_all_five_in_order_once_back(tmp_path: Path) -> None:
    receiver = Receiver("five-writes-secret")  # not up: its port refuses connections
    server = serving(tmp_path / "registry")
    try:
        token = add_user(server.base, "alice", "alice-password-1")
        hook = add_hook(server, token, "five", receiver)
        versions = [f"1.0.{n}" for n in range(5)]
        for version in versions:
            publish(server, token, "five", version)  # replies while every delivery fails
        # the deliverer did try while the receiver was down (an attempt is logged on the hook)
        until(lambda: http("GET", f"{server.base}-/npm/v1/hooks/hook/{hook['id']}", token=token).json["last_delivery"])
        assert receiver.received == []
        receiver.up()
        received = receiver.wait_for(5)
        first_of_each = {}
        for delivery in received:
            first_of_each.setdefault(delivery.delivery, delivery)  # the receiver's dedupe
        assert len(first_of_each) == 5 and all(d.signed for d in received)
        assert [d.body["version"] for d in first_of_each.values()] == versions  # journal order
        assert {d.event for d in received} == {"package:publish"}
        # the admin's delivery log and redeliver (registry-gen hooks, on the registry's machine)
        log = cli(server.root, "hooks", "deliveries")
        assert log.count("  delivered  ") == 5, log
        first = next(iter(first_of_each))
        assert f"queued {first} again" in cli(server.root, "hooks", "redeliver", first)
        until(lambda: len(receiver.received) > len(received))
        assert receiver.received[-1].delivery == first and receiver.received[-1].signed
        assert "error:" in cli(server.root, "hooks", "redeliver", "no-such-delivery", check=False)
    finally:
        server.stop()
        receiver.down()


def test_a_server_killed_mid_delivery_delivers_again_with_the_same_id(tmp_path: Path) -> None:
    release = threading.Event()
    receiver = Receiver("killed-mid-delivery")

    def hang_the_first(handler: http.server.BaseHTTPRequestHandler) -> None:
        if len(receiver.received) == 1:
            release.wait(60)  # holds the first attempt open until the test is done with it
        handler.send_response(200)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    receiver.answer = hang_the_first
    receiver.up()
    root = tmp_path / "registry"
    server = serving(root, timeout=5)
    try:
        token = add_user(server.base, "alice", "alice-password-1")
        add_hook(server, token, "killed", receiver)
        publish(server, token, "killed", "1.0.0")
        [first] = receiver.wait_for(1)
        assert server.process is not None
        server.process.kill()  # SIGKILL while the attempt waits for its answer
        server.process.wait()
        server = RegistryProcess(root).start()
        until(lambda: len(receiver.received) >= 2, deadline=40)
        assert [d.delivery for d in receiver.received] == [first.delivery, first.delivery]
        assert receiver.received[1].signed and receiver.received[1].body["version"] == "1.0.0"
    finally:
        release.set()
        server.stop()
        receiver.down()
