"""Two `registry-gen api` processes on one real PostgreSQL (issue 28), sharing content/ and the tree
on local disk for now, as two hosts would share a volume: racing publishes of one package and of
distinct packages lose no acknowledged write, never leave two tarballs for one name@version, and
the change feed lists each acknowledged write once; a SIGKILL of one instance mid-run leaves the
other writing and the restarted one converging; PostgreSQL restarted once gives writes a prompt
503 during the outage, and they succeed after it."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from registry_gen.layout import PACKAGE_DOCUMENT
from registry_gen.storage.contract import archive_key
from tests.conftest import postgres_state_url
from tests.hosts.servers import free_port, stop_process, wait_for_api, wait_for_port
from tests.registry_api.helpers import add_user, http, publish_body, tarball
from tests.user_api.pg_server import PostgresServer, start_postgres_or_skip

pytestmark = pytest.mark.slow

BASE_URL = "http://registry.test/"  # one public URL: either instance may render a document
ACKNOWLEDGED, REFUSED, UNKNOWN = "acknowledged", "refused", "unknown"


@dataclass
class Api:
    """One `registry-gen api` process: its own registry.yaml and data folder, as on its own host."""

    config: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    env: dict[str, str] = field(default_factory=dict)  # e.g. REGISTRY_GEN_FAILPOINT for this instance only

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self, *, ready: bool = True) -> Api:
        """Starts the process; waits until it is ready (`ready`), or only until it listens."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")} | self.env
        self.process = subprocess.Popen(
            [sys.executable, "-m", "registry_gen", "api", "--config", str(self.config), "--host", "127.0.0.1", "--port", str(self.port)],
            cwd=self.config.parent, env=env, stdout=subprocess.DEVNULL, stderr=(self.config.parent / "api.log").open("ab"),
        )  # fmt: skip
        if ready:
            wait_for_api(self.port, self.process, deadline=60)
        else:
            wait_for_port(self.port, self.process, deadline=60)
        return self

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)


@dataclass
class Registry:
    shared: Path  # content/ and public/, shared by the instances
    apis: list[Api]
    token: str = ""
    outcomes: list[tuple[str, str, str, str]] = field(default_factory=list)  # (outcome, name, version, integrity)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def publish(self, api: Api, name: str, version: str, flavour: str = "") -> str:
        data = tarball(name, version, description=f"{name} {flavour}")
        integrity = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
        try:
            status = http("PUT", api.base + name, token=self.token, body=publish_body(name, version, data), timeout=90).status
            outcome = ACKNOWLEDGED if status == 201 else REFUSED
        except (urllib.error.URLError, ConnectionError, OSError):
            status, outcome = 0, UNKNOWN  # the instance died with the request in flight
        with self.lock:
            self.outcomes.append((outcome, name, version, integrity))
        return f"{outcome}:{status}"

    def document(self, name: str) -> dict[str, Any]:
        return json.loads((self.shared / "public" / name / PACKAGE_DOCUMENT).read_bytes())

    def feed(self, api: Api) -> list[dict[str, Any]]:
        return change_feed(api.base)


def change_feed(base: str, limit: int = 1000) -> list[dict[str, Any]]:
    """Every entry of `GET /-/changes` at `base`, page after page of `limit`."""
    results: list[dict[str, Any]] = []
    since = 0
    for _ in range(1000):  # bounded: far more pages than the writes of a test
        page = http("GET", f"{base}-/changes?since={since}&limit={limit}").json
        results += page["results"]
        if page["last_seq"] == since:
            return results
        since = page["last_seq"]
    raise AssertionError("the feed did not end")


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL of this module's own: a test restarts it."""
    import psycopg

    server = start_postgres_or_skip()
    try:
        with psycopg.connect(server.url(), autocommit=True) as conn:  # the accounts' search, for every schema
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public")
        yield server
    finally:
        server.stop()


def instance_config(folder: Path, shared: Path, database_url: str, base_url: str, extra: str = "") -> Path:
    """The registry.yaml of one instance (its own folder, as its own host), `extra` appended."""
    folder.mkdir(parents=True)
    config = folder / "registry.yaml"
    config.write_text(
        f"content_dir: {shared / 'content'}\nout_dir: {shared / 'public'}\ndata_dir: data\n"
        f"base_url: {base_url}\ndatabase_url: '{database_url}'\nsignup: open\n{extra}"
    )
    return config


def instances_on(url: str, tmp_path: Path, hosts: tuple[str, ...], extra: str = "") -> tuple[Path, list[Api]]:
    """Api instances (not started) on the database `url`, one folder per host, sharing content/ and
    public/ under tmp_path/shared; `extra` is more of each registry.yaml. (the shared folder, the instances)"""
    shared = tmp_path / "shared"
    (shared / "content").mkdir(parents=True)
    return shared, [Api(instance_config(tmp_path / host, shared, url, BASE_URL, extra)) for host in hosts]


@pytest.fixture
def registry(postgres: PostgresServer, tmp_path: Path) -> Iterator[Registry]:
    shared, apis = instances_on(postgres_state_url(postgres), tmp_path, ("a", "b"))
    found = Registry(shared, apis)
    try:
        for api in apis:
            api.start()  # one after the other: each first start builds the (empty) tree
        found.token = add_user(apis[0].base, "alice", "alice-password-1")
        yield found
    finally:
        for api in apis:
            api.stop()


def _run_all(workers: list[threading.Thread], deadline: float = 300) -> None:
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(max(1.0, deadline))
        assert not worker.is_alive(), "a publisher did not finish in time"


def _check_converged(registry: Registry) -> None:
    """Every acknowledged publish served with its bytes, one tarball per name@version, and the
    feed of each instance listing each landed publish once, refused ones never."""
    feeds = [registry.feed(api) for api in registry.apis]
    assert feeds[0] == feeds[1]
    published = Counter((e["name"], e["versions"][0]) for e in feeds[0] if e["kind"] == "package:publish")
    seqs = [entry["seq"] for entry in feeds[0]]
    assert seqs == sorted(set(seqs))
    for outcome, name, version, integrity in registry.outcomes:
        document = registry.document(name)
        served = document["versions"].get(version)
        if outcome == REFUSED:
            assert served is None or served["dist"]["integrity"] != integrity, f"a refused {name}@{version} is served"
            continue
        if outcome == UNKNOWN and served is None:
            assert published[(name, version)] == 0, f"{name}@{version} is journalled but not served"
            continue
        assert served is not None and served["dist"]["integrity"] == integrity, f"{name}@{version} lost"
        assert published[(name, version)] == 1, f"{name}@{version} journalled {published[(name, version)]} times"
        _assert_one_tarball(registry, name, version, served)


def _assert_one_tarball(registry: Registry, name: str, version: str, served: dict[str, Any]) -> None:
    stored = (registry.shared / "content" / archive_key(name, version)).read_bytes()
    in_tree = (registry.shared / "public" / served["dist"]["tarball"].removeprefix(BASE_URL)).read_bytes()
    digest = "sha512-" + base64.b64encode(hashlib.sha512(stored).digest()).decode()
    assert stored == in_tree and digest == served["dist"]["integrity"]


def test_racing_publishes_from_two_instances_lose_nothing(registry: Registry) -> None:
    a, b = registry.apis
    rounds = 6

    def publisher(k: int) -> None:
        api = (a, b)[k % 2]
        for j in range(rounds):
            registry.publish(api, "shared-pkg", f"1.{k}.{j}")  # one package from every worker
            registry.publish(api, f"own-pkg-{k}", f"1.0.{j}")  # a package of its own

    start = threading.Barrier(2)

    def duplicate(api: Api, flavour: str) -> None:
        for j in range(rounds):  # the same name@version with other bytes, at once from both
            start.wait(timeout=60)
            registry.publish(api, "dup-pkg", f"2.0.{j}", flavour)

    _run_all([threading.Thread(target=publisher, args=(k,)) for k in range(4)]
             + [threading.Thread(target=duplicate, args=(api, api.base)) for api in (a, b)])  # fmt: skip
    outcomes = Counter(outcome for outcome, *_ in registry.outcomes)
    assert outcomes[ACKNOWLEDGED] == 4 * rounds * 2 + rounds and outcomes[UNKNOWN] == 0, outcomes
    assert len(registry.document("shared-pkg")["versions"]) == 4 * rounds
    _check_converged(registry)


def test_a_killed_instance_leaves_the_other_writing_and_converges_after_restart(registry: Registry) -> None:
    a, b = registry.apis
    rounds = 12
    b_results: list[str] = []
    a_done = threading.Event()

    def on_a() -> None:
        for j in range(rounds):
            if registry.publish(a, "kill-pkg", f"1.0.{j}").startswith(UNKNOWN):
                break
        a_done.set()

    def on_b() -> None:
        for j in range(rounds):
            b_results.append(registry.publish(b, "kill-pkg", f"2.0.{j}"))
            b_results.append(registry.publish(b, "kill-other", f"1.0.{j}"))

    def killer() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and sum(o[0] == ACKNOWLEDGED and o[2].startswith("1.0.") and o[1] == "kill-pkg"
                                                  for o in list(registry.outcomes)) < 3:  # fmt: skip
            time.sleep(0.01)  # polling a condition with a deadline
        a.kill()  # mid-run: A's next publish is in flight or about to be

    _run_all([threading.Thread(target=f) for f in (on_a, on_b, killer)])
    assert a_done.is_set() and a.process is not None and a.process.returncode == -signal.SIGKILL
    assert b_results == [f"{ACKNOWLEDGED}:201"] * (2 * rounds)  # B never noticed
    a.start()  # the same host comes back
    assert registry.publish(a, "kill-pkg", "3.0.0") == f"{ACKNOWLEDGED}:201"
    assert registry.publish(b, "kill-pkg", "3.0.1") == f"{ACKNOWLEDGED}:201"
    _check_converged(registry)


def test_writes_get_a_prompt_503_while_postgresql_is_down_then_succeed(registry: Registry, postgres: PostgresServer) -> None:
    a, b = registry.apis
    assert registry.publish(a, "outage-pkg", "1.0.0") == f"{ACKNOWLEDGED}:201"
    postgres.halt()
    try:
        for api, version in ((a, "1.0.1"), (b, "1.0.2")):
            started = time.monotonic()
            reply = http("PUT", api.base + "outage-pkg", token=registry.token,
                         body=publish_body("outage-pkg", version, tarball("outage-pkg", version)), timeout=60)  # fmt: skip
            assert reply.status == 503 and time.monotonic() - started < 10, (reply.status, reply.body)
            assert "retry-after" in reply.headers and reply.json["error"]
    finally:
        postgres.resume()
    deadline = time.monotonic() + 60
    answers = []
    for api, version in ((a, "1.0.3"), (b, "1.0.4")):
        while (answer := registry.publish(api, "outage-pkg", version)) != f"{ACKNOWLEDGED}:201" and time.monotonic() < deadline:
            answers.append(answer)  # a pool's dead connection may cost one 503, never a hang
            registry.outcomes.pop()
            time.sleep(0.2)
        assert answer == f"{ACKNOWLEDGED}:201", answers
    assert sorted(registry.document("outage-pkg")["versions"]) == ["1.0.0", "1.0.3", "1.0.4"]
    _check_converged(registry)
