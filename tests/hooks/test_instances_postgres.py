"""Issue 30, acceptance 2 with three `registry-gen api` instances on one PostgreSQL (content and the
tree on a shared local folder, as tests/registry_api/test_api_instances_postgres.py runs them): a
receiver down during 5 writes gets all 5 once back, in journal order, one instance delivering each
(none twice), the writes never waiting on it; and an instance SIGKILLed while its delivery is in
flight: another instance delivers it again with the same delivery id, so that after deduplication
on that id each event arrives exactly once."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import postgres_state_url
from tests.hooks.receiver import Received, Receiver
from tests.hooks.test_reliable_delivery import until
from tests.registry_api.helpers import add_user, http, publish_body, tarball
from tests.registry_api.test_api_instances_postgres import Api, instances_on, postgres  # noqa: F401 - the module's PostgreSQL
from tests.user_api.pg_server import PostgresServer

pytestmark = pytest.mark.slow
HOOKS = "hooks: {allow_networks: [127.0.0.0/8], retry_base_seconds: 0.2, timeout_seconds: 5, secret_key: '%s'}\n" % ("k" * 40)


@pytest.fixture
def instances(postgres: PostgresServer, tmp_path: Path) -> Iterator[tuple[list[Api], str]]:  # noqa: F811 - the fixture above
    """Three api instances on one schema of the module's PostgreSQL, sharing content/ and public/;
    (the instances, the URL of their database)."""
    url = postgres_state_url(postgres)
    _, apis = instances_on(url, tmp_path, ("a", "b", "c"), HOOKS)
    try:
        for api in apis:
            api.start()
        yield apis, url
    finally:
        for api in apis:
            api.stop()


def _hook(api: Api, token: str, package: str, receiver: Receiver) -> None:
    body = {"type": "package", "name": package, "endpoint": receiver.url, "secret": receiver.secret}
    reply = http("POST", f"{api.base}-/npm/v1/hooks/hook", token=token, body=body)
    assert reply.status == 201, reply.json


def _publish(api: Api, token: str, name: str, version: str) -> None:
    reply = http("PUT", api.base + name, token=token, body=publish_body(name, version, tarball(name, version)), timeout=90)
    assert reply.status == 201, reply.json


def _once_each(received: list[Received]) -> dict[str, Received]:
    """The receiver's deduplication on the delivery id; one delivery id is one event, always."""
    first: dict[str, Received] = {}
    for delivery in received:
        kept = first.setdefault(delivery.delivery, delivery)
        assert kept.body["version"] == delivery.body["version"] and delivery.signed
    return first


def test_three_instances_deliver_five_writes_once_each_after_the_receiver_was_down(instances: tuple[list[Api], str]) -> None:
    apis, _ = instances
    receiver = Receiver("three-instances-secret")  # down: its port refuses connections
    token = add_user(apis[0].base, "alice", "alice-password-1")
    _publish(apis[0], token, "pg-five", "0.0.1")
    _hook(apis[1], token, "pg-five", receiver)
    versions = [f"1.0.{n}" for n in range(5)]
    try:
        for n, version in enumerate(versions):
            _publish(apis[n % 3], token, "pg-five", version)  # acknowledged while every delivery fails
        hooks = http("GET", f"{apis[2].base}-/npm/v1/hooks", token=token).json["objects"]
        until(lambda: http("GET", f"{apis[2].base}-/npm/v1/hooks/hook/{hooks[0]['id']}", token=token).json["last_delivery"])
        assert receiver.received == []  # attempted (and failed) after the writes were acknowledged
        receiver.up()
        once = _once_each(receiver.wait_for(5, deadline=60))
        assert [d.body["version"] for d in once.values()] == versions  # journal order
        assert len(receiver.received) == 5  # one instance delivered each: none twice without a crash
    finally:
        receiver.down()


def test_an_instance_killed_mid_delivery_leaves_each_event_delivered_once_after_dedup(instances: tuple[list[Api], str]) -> None:
    import psycopg

    apis, url = instances
    release = threading.Event()
    receiver = Receiver("killed-instance-secret")

    def hang_the_first(handler: http.server.BaseHTTPRequestHandler) -> None:
        if len(receiver.received) == 1:
            release.wait(60)  # the first attempt stays in flight until its instance is killed
        handler.send_response(200)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    receiver.answer = hang_the_first
    receiver.up()
    token = add_user(apis[0].base, "alice", "alice-password-1")
    _publish(apis[0], token, "pg-killed", "0.0.1")
    _hook(apis[0], token, "pg-killed", receiver)
    try:
        _publish(apis[1], token, "pg-killed", "1.0.0")
        [first] = receiver.wait_for(1)
        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT claimed_by FROM hook_deliveries WHERE id = %s", (first.delivery,)).fetchone()
        assert row is not None and row[0], "the delivery in flight is claimed by its instance"
        [holder] = [api for api in apis if api.process is not None and f":{api.process.pid}:" in row[0]]
        holder.kill()  # SIGKILL while its attempt waits for the answer
        survivors = [api for api in apis if api is not holder]
        for n, version in enumerate(("1.0.1", "1.0.2")):
            _publish(survivors[n % 2], token, "pg-killed", version)
        until(lambda: len(_once_each(receiver.received)) == 3 and len(receiver.received) >= 4, deadline=60)
        once = _once_each(receiver.received)
        assert [d.body["version"] for d in once.values()] == ["1.0.0", "1.0.1", "1.0.2"]
        again = [d for d in receiver.received if d.delivery == first.delivery]
        assert len(again) == 2  # delivered again after the crash, with the same delivery id
    finally:
        release.set()
        receiver.down()


def test_postgres_down_pauses_deliveries_with_one_line_and_they_resume(instances: tuple[list[Api], str], postgres: PostgresServer) -> None:  # noqa: F811
    apis, _ = instances
    receiver = Receiver("outage-secret")
    receiver.up()
    token = add_user(apis[0].base, "alice", "alice-password-1")
    _publish(apis[0], token, "pg-outage", "0.0.1")
    _hook(apis[0], token, "pg-outage", receiver)
    logs = [api.config.parent / "api.log" for api in apis]
    postgres.halt()
    try:  # every instance's deliverer meets the outage, some of them several rounds in a row
        until(lambda: all("hooks: deliveries paused" in log.read_text() for log in logs), deadline=60)
    finally:
        postgres.resume()
    _publish(apis[1], token, "pg-outage", "1.0.0")  # at once: the user store replaces the connections the restart killed
    try:
        [delivered] = receiver.wait_for(1, deadline=60)
        assert delivered.body["version"] == "1.0.0"
        until(lambda: all("hooks: deliveries resumed" in log.read_text() for log in logs), deadline=60)
        for log in logs:
            text = log.read_text()
            assert text.count("hooks: deliveries paused") == 1, text  # one line per outage, not one per round
            assert "a delivery round failed" not in text, text
    finally:
        receiver.down()
