"""Crash consistency: SIGKILL `registry-gen serve` while it publishes, and `registry-gen build`
while it builds, at seeded random moments; what was acknowledged must survive, and the tree must
verify once the next start (serve's startup build) or the next build has run.

Bounded: HOSTILE_KILL_TRIALS (default 20) serve kills, HOSTILE_BUILD_KILL_TRIALS (default 4)
build kills, HOSTILE_SEED (default 8). Each test prints one summary line.
"""

from __future__ import annotations

import hashlib
import http.client
import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from filelock import FileLock, Timeout

from registry_gen.build import run_build
from registry_gen.settings import Settings
from registry_gen.verify import verify_tree
from tests.hostile.harness import Server, packument, tarball
from tests.support import make_tarball, make_zip

SEED = int(os.environ.get("HOSTILE_SEED", "8"))
SERVE_TRIALS = int(os.environ.get("HOSTILE_KILL_TRIALS", "20"))
BUILD_TRIALS = int(os.environ.get("HOSTILE_BUILD_KILL_TRIALS", "4"))
PUBLISHERS = 2
BASE_URL = "http://127.0.0.1:9/"


def _losses(server: Server, acknowledged: dict[tuple[str, str], str]) -> list[str]:
    lost = []
    for (name, version), sha1 in sorted(acknowledged.items()):
        document = packument(server.out, name)
        dist = (document or {}).get("versions", {}).get(version, {}).get("dist", {})
        if dist.get("shasum") != sha1:
            lost.append(f"{name}@{version}")
    return lost


def test_acknowledged_publishes_survive_sigkill_of_serve(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(SEED)
    server = Server(tmp_path / "registry", threads=4)
    acknowledged: dict[tuple[str, str], str] = {}
    refused: list[str] = []
    losses: list[str] = []
    problems: list[object] = []
    attempts = itertools.count()
    cut_short = 0
    server.start()
    token = server.add_user("crash-tester")
    try:
        for trial in range(SERVE_TRIALS):
            if trial:
                server.start()  # its startup build is the recovery
            problems = verify_tree(server.out).problems
            assert not problems, f"after kill {trial}: " + "\n".join(map(str, problems))
            losses += _losses(server, acknowledged)
            assert not losses, f"after kill {trial}: lost {losses}"
            stop = threading.Event()
            died: list[int] = []

            def publish_until_killed(worker: int) -> None:
                while not stop.is_set():
                    n = next(attempts)
                    # A new package each trial (its first publish creates the owner record) and a long-lived one.
                    name = f"crash-t{trial}-w{worker}" if n % 2 else ("@crash/shared" if worker else "crash-shared")
                    version = f"1.0.{n}"
                    data = tarball(name, version)
                    try:
                        reply = server.publish(name, version, token, data, timeout=30)
                    except (OSError, http.client.HTTPException):
                        died.append(n)  # the server died while this request was in flight
                        return
                    if reply.status == 201:
                        acknowledged[(name, version)] = hashlib.sha1(data).hexdigest()
                    else:
                        refused.append(f"{name}@{version}: {reply.status} {reply.body[:200]!r}")

            workers = [threading.Thread(target=publish_until_killed, args=(w,)) for w in range(PUBLISHERS)]
            for worker in workers:
                worker.start()
            stop.wait(rng.uniform(0.05, 1.5))  # the random moment of the kill (chaos, not synchronisation)
            server.kill()
            stop.set()
            for worker in workers:
                worker.join(timeout=60)
            cut_short += len(died)
            assert not refused, "publishes refused between kills:\n" + "\n".join(refused)
        server.start()
        problems = list(verify_tree(server.out).problems)
        losses += _losses(server, acknowledged)
    finally:
        server.stop()
        with capsys.disabled():  # shown in `make test` output even though pytest captures prints
            print(
                f"\nserve kill test: {SERVE_TRIALS} trials, {len(acknowledged)} acknowledged publishes, "
                f"{cut_short} requests cut short by the kill, {len(losses)} losses"
            )
    assert not problems, "\n".join(map(str, problems))
    assert not losses, f"acknowledged but lost: {losses}"
    assert len(acknowledged) >= SERVE_TRIALS  # the kills did not stop every publish before it started


# ---------------------------------------------------------------- registry-gen build


def _write_content(content: Path, rng: random.Random, generation: int) -> None:
    """Many archives (enough for the parallel reader), some scoped, one zip; each generation
    adds some and removes some, so a rebuild has work of every kind."""
    for n in range(generation * 10, generation * 10 + 30):
        name = f"@bulk/pkg-{n % 7}" if n % 5 == 0 else f"bulk-{n % 23}"
        make_tarball(content, name, f"1.{generation}.{n}", files={"index.js": f"module.exports = {n};\n", "data.txt": "x" * rng.randrange(1, 20000)})
    make_zip(content, f"bulk-zip-{generation}", "1.0.0")
    archives = sorted(p for p in content.iterdir() if p.is_file())
    for victim in rng.sample(archives, k=min(5, len(archives) // 6)):
        victim.unlink()


def _is_writer_temp(path: Path) -> bool:
    """`.<name>.<random>.tmp`: what registry_gen.writer leaves when killed between write and rename."""
    return path.name.startswith(".") and path.name.endswith(".tmp")


def _tree(out: Path) -> dict[str, bytes]:
    """Every file a host would serve (the build's own state folder and a killed writer's temp files aside)."""
    return {
        p.relative_to(out).as_posix(): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and not p.relative_to(out).as_posix().startswith(".registry-gen/") and not _is_writer_temp(p)
    }


def _wait_until_building(build: subprocess.Popen[bytes], out: Path) -> bool:
    """True once `build` holds the build lock (it is past start-up), False if it ended first."""
    lock = FileLock(str(out.parent / f".{out.name}.lock"))
    deadline = time.monotonic() + 120
    while build.poll() is None and time.monotonic() < deadline:
        try:
            lock.acquire(timeout=0)
        except Timeout:
            return True  # somebody else (the build) holds it
        lock.release()
        time.sleep(0.005)  # polling, bounded by the deadline
    return False


def _build_command(content: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "registry_gen", "build", str(content), "--out", str(out), "--base-url", BASE_URL]


def test_a_build_killed_midway_is_repaired_by_the_next_build(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(SEED)
    content, out = tmp_path / "content", tmp_path / "public"
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    killed_mid_build = 0
    for trial in range(BUILD_TRIALS):
        _write_content(content, rng, trial)
        clean = tmp_path / f"clean-{trial}"
        started = time.monotonic()
        run_build(Settings(content_dir=content, out_dir=clean, base_url=BASE_URL))
        duration = time.monotonic() - started
        build = subprocess.Popen(_build_command(content, out), cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if _wait_until_building(build, out):
            try:
                build.wait(timeout=rng.uniform(0, 0.5 * duration))  # the random moment, while it holds the lock
            except subprocess.TimeoutExpired:
                build.kill()  # SIGKILL
                killed_mid_build += 1
        build.wait(timeout=300)
        rerun = subprocess.run(_build_command(content, out), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert rerun.returncode == 0, rerun.stderr
        problems = verify_tree(out).problems
        assert not problems, f"trial {trial}: " + "\n".join(map(str, problems))
        expected, actual = _tree(clean), _tree(out)
        assert sorted(actual) == sorted(expected), (
            f"trial {trial}: extra {sorted(set(actual) - set(expected))}, missing {sorted(set(expected) - set(actual))}"
        )
        differing = [path for path in expected if expected[path] != actual[path]]
        assert not differing, f"trial {trial}: files differ from a clean build: {differing}"
        shutil.rmtree(clean)
    leftovers = [p for p in out.rglob("*") if _is_writer_temp(p)]  # harmless (hidden, never served by serve), not swept
    with capsys.disabled():
        print(
            f"\nbuild kill test: {BUILD_TRIALS} trials, {killed_mid_build} builds killed mid-way, 0 differences, "
            f"{len(leftovers)} temp files left by killed writes"
        )
    assert killed_mid_build >= 1


# ---------------------------------------------------------------- one crash point, exactly


def test_a_kill_between_owner_record_and_archive_keeps_the_publisher_and_the_number(tmp_path: Path) -> None:
    """The writer stores registry-meta.json (owner, time) before the archive. A SIGKILL between the
    two leaves a meta naming a version that has no archive: the publisher got no success reply, so
    they still own the name and may publish that same number again."""
    import webtest

    from registry_gen.meta import PackageMeta, dump_meta
    from registry_gen.publish import maintainer_entry, now_iso
    from registry_gen.storage import meta_key
    from tests.hostile.harness import publish_body
    from user_api.credentials import PasswordHasher
    from user_api.server import create_server_app
    from user_api.store import open_user_store

    settings = Settings(content_dir=tmp_path / "content", out_dir=tmp_path / "public", data_dir=tmp_path / "data", base_url=BASE_URL)
    store = open_user_store(settings, hasher=PasswordHasher(time_cost=1, memory_kib=1024, parallelism=1))
    try:
        user = store.create_user("first-publisher", "a-long-test-password-1", None, None, "user")
        stranger = store.create_user("stranger", "a-long-test-password-2", None, None, "user")
        token, _ = store.create_token(user.id)
        stranger_token, _ = store.create_token(stranger.id)
        # Exactly what a kill right after the durable meta write of a first publish leaves: the
        # publisher bound by account id, stamped a moment ago.
        stamp = now_iso()
        meta = PackageMeta(
            name="crash-first",
            dist_tags={"latest": "1.0.0"},
            maintainers=[maintainer_entry("first-publisher", None, user.id)],
            time={"1.0.0": stamp},
            created=stamp,
            modified=stamp,
            revision=1,
        )
        meta_path = settings.content_dir / meta_key("crash-first")
        meta_path.parent.mkdir(parents=True)
        meta_path.write_bytes(dump_meta(meta))
        run_build(settings)  # serve's startup build
        assert not (settings.out_dir / "crash-first" / "-" / "crash-first-1.0.0.tgz").exists()
        client = webtest.TestApp(create_server_app(settings, store), lint=False)

        def publish(version: str, bearer: str) -> webtest.TestResponse:
            body = json.dumps(publish_body("crash-first", version, tarball("crash-first", version))).encode()
            headers = {"Authorization": f"Bearer {bearer}", "Content-Type": "application/json"}
            return client.put("/crash-first", body, headers=headers, expect_errors=True)

        assert publish("1.0.0", stranger_token).status_int == 403  # the name is still held
        retried = publish("1.0.0", token)
        assert retried.status_int == 201, (retried.status, retried.body)
        assert publish("1.0.1", token).status_int == 201
        document = json.loads((settings.out_dir / "crash-first" / "index.html").read_bytes())
        assert set(document["versions"]) == {"1.0.0", "1.0.1"}
        assert [m["name"] for m in document["maintainers"]] == ["first-publisher"]
        assert verify_tree(settings.out_dir).problems == []
    finally:
        store.close()
