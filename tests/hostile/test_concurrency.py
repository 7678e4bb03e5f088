"""Concurrency against a real `registry-gen serve`: parallel publishes, CLI builds and watch mode
racing API publishes, If-Match on PUT /user, and readers that must never see a torn file."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from registry_gen.verify import verify_tree
from tests.hostile.harness import Server, packument, request, tarball
from tests.support import make_tarball

WATCH_DEADLINE = 60.0


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with Server(tmp_path / "registry", threads=8) as running:
        yield running


class TornReadWatch:
    """Threads that read packuments (over HTTP and straight from disk) until told to stop."""

    def __init__(self, server: Server, names: list[str]):
        self.server = server
        self.names = names
        self.stop = threading.Event()
        self.reads = 0
        self.torn: list[str] = []
        self.threads = [threading.Thread(target=self._http), threading.Thread(target=self._disk)]

    def __enter__(self) -> TornReadWatch:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)

    def _check(self, where: str, data: bytes) -> None:
        try:
            document = json.loads(data)
            assert isinstance(document, dict)
        except (ValueError, AssertionError):
            self.torn.append(f"{where}: {data[:120]!r}")
        self.reads += 1

    def _http(self) -> None:
        while not self.stop.is_set():
            for name in self.names:
                reply = request("GET", f"{self.server.base}{name.replace('/', '%2f')}")
                if reply.status == 200:
                    self._check(f"GET /{name}", reply.body)

    def _disk(self) -> None:
        while not self.stop.is_set():
            for name in self.names:
                for filename in ("index.html", "abbreviated.json"):
                    try:
                        data = (self.server.out / name / filename).read_bytes()
                    except FileNotFoundError:
                        continue
                    self._check(f"{name}/{filename}", data)


def _publish_all(server: Server, jobs: list[tuple[str, str, str]]) -> dict[tuple[str, str], int]:
    """Publishes every (token, name, version) at once, one thread each; returns the statuses."""
    statuses: dict[tuple[str, str], int] = {}
    start = threading.Barrier(len(jobs))

    def one(token: str, name: str, version: str) -> None:
        start.wait(timeout=60)
        statuses[(name, version)] = server.publish(name, version, token).status

    threads = [threading.Thread(target=one, args=job) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    return statuses


def test_parallel_publishes_all_land_and_readers_never_see_a_torn_file(server: Server) -> None:
    alice, bob = server.add_user("alice"), server.add_user("bob")
    names = ["race-shared", "@race/scoped", "race-alice", "race-bob"]
    for token, name in ((alice, "race-shared"), (alice, "@race/scoped"), (alice, "race-alice"), (bob, "race-bob")):
        assert server.publish(name, "0.0.1", token).status == 201
    jobs = [(alice, "race-shared", f"1.0.{i}") for i in range(4)]
    jobs += [(alice, "@race/scoped", f"1.0.{i}") for i in range(3)]
    jobs += [(alice, "race-alice", "2.0.0"), (bob, "race-bob", "2.0.0"), (bob, "race-bob", "2.0.1")]
    with TornReadWatch(server, names) as watch:
        statuses = _publish_all(server, jobs)
    assert statuses == {(name, version): 201 for _, name, version in jobs}
    for _, name, version in jobs:
        document = packument(server.out, name)
        assert document is not None and version in document["versions"], f"{name}@{version} missing"
    assert verify_tree(server.out).problems == []
    assert watch.reads > 0 and watch.torn == [], watch.torn[:5]


def _build(server: Server) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "registry_gen", "build", "content", "--out", "public", "--base-url", server.base]
    return subprocess.Popen(command, cwd=server.root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _start_watch(server: Server) -> tuple[subprocess.Popen[str], Path]:
    log = server.root / "watch.log"
    with open(log, "w") as handle:
        watch = subprocess.Popen(
            [sys.executable, "-m", "registry_gen", "watch", "content", "--out", "public", "--base-url", server.base, "--settle", "0.1"],
            cwd=server.root, stdout=handle, stderr=subprocess.STDOUT, text=True,
            env={k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")} | {"PYTHONUNBUFFERED": "1"},
        )
    deadline = time.monotonic() + WATCH_DEADLINE
    while "build 1 " not in log.read_text():
        assert watch.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)  # polling its log, bounded by the deadline
    return watch, log


def test_cli_builds_and_watch_mode_race_api_publishes(server: Server) -> None:
    token = server.add_user("carol")
    watch, watch_log = _start_watch(server)
    try:
        for n in range(8):  # archives dropped by hand, so every builder has work
            make_tarball(server.content / "by-hand", f"hand-{n}", "1.0.0")
        with TornReadWatch(server, ["api-race", "hand-0"]) as readers:
            builds = [_build(server) for _ in range(3)]
            statuses = _publish_all(server, [(token, "api-race", f"1.0.{i}") for i in range(4)])
            make_tarball(server.content / "by-hand", "hand-late", "1.0.0")
            builds += [_build(server) for _ in range(2)]
            outputs = [build.communicate(timeout=300)[0] for build in builds]
        assert [b.returncode for b in builds] == [0] * len(builds), outputs
        assert set(statuses.values()) == {201}, statuses
        final = _build(server)
        assert final.wait(timeout=300) == 0
        assert watch.poll() is None, watch_log.read_text()  # watch mode survived the races
    finally:
        watch.terminate()
        watch.wait(timeout=30)
    assert verify_tree(server.out).problems == []
    document = packument(server.out, "api-race")
    assert document is not None and sorted(document["versions"]) == [f"1.0.{i}" for i in range(4)]
    for name in [f"hand-{n}" for n in range(8)] + ["hand-late"]:
        assert packument(server.out, name) is not None, name
    assert readers.reads > 0 and readers.torn == [], readers.torn[:5]
    assert "failed" not in watch_log.read_text()


def test_if_match_lets_exactly_one_of_two_racing_updates_win(server: Server) -> None:
    created = request("POST", f"{server.base}user", body={"username": "dora", "password": "dora-password-1", "email": "dora@example.com"})
    assert created.status == 201, created.body
    login = request("POST", f"{server.base}-/user-api/tokens", body={"username": "dora", "password": "dora-password-1"})
    assert login.status == 201, login.body
    token, user_id = login.json["token"], created.json["id"]
    for round_number in range(5):
        current = request("GET", f"{server.base}user/{user_id}", token=token)
        etag = current.header("ETag")
        assert current.status == 200 and etag
        start = threading.Barrier(2)
        statuses: dict[str, int] = {}

        def update(writer: str) -> None:
            body = {"id": user_id, "username": "dora", "email": "dora@example.com", "fullName": f"{writer} {round_number}"}
            start.wait(timeout=30)
            statuses[writer] = request("PUT", f"{server.base}user", body=body, token=token, headers={"If-Match": etag}).status

        threads = [threading.Thread(target=update, args=(w,)) for w in ("left", "right")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert sorted(statuses.values()) == [200, 412], statuses
        winner = next(w for w, status in statuses.items() if status == 200)
        after = request("GET", f"{server.base}user/{user_id}", token=token)
        assert after.json["fullName"] == f"{winner} {round_number}"  # the loser changed nothing
        assert after.header("ETag") != etag


def test_tarballs_served_during_publishes_are_whole(server: Server) -> None:
    """A reader fetching tarballs while other versions publish gets complete, matching bytes."""
    token = server.add_user("erin")
    data = tarball("whole", "1.0.0")
    assert server.publish("whole", "1.0.0", token, data).status == 201
    expected = hashlib.sha1(data).hexdigest()
    seen: list[str] = []
    fresh: set[str] = set()
    saw_fresh = threading.Event()
    stop = threading.Event()

    def fetch() -> None:
        # Follow the document as a client does: every tarball it lists (the ones being published
        # included) must be served whole, with the shasum the document gives.
        while not stop.is_set():
            document = request("GET", f"{server.base}whole")
            if document.status != 200:
                seen.append(f"document {document.status}")
                continue
            for version, entry in document.json["versions"].items():
                reply = request("GET", entry["dist"]["tarball"])
                actual = hashlib.sha1(reply.body).hexdigest() if reply.status == 200 else str(reply.status)
                seen.append("ok" if actual == entry["dist"]["shasum"] else f"{version}: {actual}")
                if version != "1.0.0":
                    fresh.add(version)
                    saw_fresh.set()

    reader = threading.Thread(target=fetch)
    reader.start()
    try:
        for n in range(1, 5):
            assert server.publish("whole", f"1.0.{n}", token).status == 201
        saw_fresh.wait(timeout=60)  # the reader goes on until it has fetched a newly published tarball
    finally:
        stop.set()
        reader.join(timeout=60)
    assert seen and set(seen) == {"ok"}
    assert request("GET", f"{server.base}whole/-/whole-1.0.0.tgz").body == data
    assert hashlib.sha1(data).hexdigest() == expected
    assert fresh, "the reader never saw a version published while it read"
