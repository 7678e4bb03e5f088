"""The change journal (issue 27, acceptance 3): every kind of write through the real `serve` (with
npm 11) and the CLI appears in the ledger's journal exactly once, in the order the writes were
acknowledged; and a server killed between landing a write and acknowledging it (a SIGKILL at the
test hook REGISTRY_GEN_FAILPOINT) lists it once after its restart, served, if it landed, and not
at all if it did not."""

from __future__ import annotations

import json
import urllib.error
from pathlib import Path

import pytest

from registry_gen.cli import main as registry_gen
from registry_gen.settings import Settings
from registry_gen.state import JournalEntry, open_state
from tests.importers.upstream_server import hostile_upstream
from tests.registry_api.helpers import RegistryProcess, add_user, http, publish_body, tarball, write_package
from tests.support import make_tarball

pytestmark = pytest.mark.slow


def _journal(root: Path) -> list[JournalEntry]:
    with open_state(Settings(content_dir=root / "content", out_dir=root / "public")).journal() as journal:
        return journal.since(0, 1000)


def _kinds(entries: list[JournalEntry]) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(e.kind, e.package, e.versions) for e in entries]


def _npm_writes(server: RegistryProcess, tmp_path: Path) -> None:
    """Every write npm makes, by alice (bob is an owner for a while)."""
    alice = server.npm("alice", add_user(server.base, "alice", "alice-password-1"))
    add_user(server.base, "bob", "bob-password-1")
    source = write_package(tmp_path / "src", "kept", "1.0.0")
    alice.run("publish", cwd=source)
    write_package(source, "kept", "1.1.0")
    alice.run("publish", cwd=source)
    alice.run("dist-tag", "add", "kept@1.0.0", "stable", cwd=tmp_path)
    alice.run("dist-tag", "rm", "kept", "stable", cwd=tmp_path)
    alice.run("deprecate", "kept@1.0.0", "use 1.1.0", cwd=tmp_path)
    alice.run("deprecate", "kept@1.0.0", "", cwd=tmp_path)
    alice.run("owner", "add", "bob", "kept", cwd=tmp_path)
    alice.run("owner", "rm", "bob", "kept", cwd=tmp_path)
    alice.run("unpublish", "kept@1.1.0", cwd=tmp_path)
    alice.run("publish", cwd=write_package(tmp_path / "gone-src", "gone", "1.0.0"))
    alice.run("unpublish", "gone", "--force", cwd=tmp_path)


NPM_WRITES = [
    ("package:publish", "kept", ("1.0.0",)),
    ("package:publish", "kept", ("1.1.0",)),
    ("package:dist-tag", "kept", ("1.0.0",)),
    ("package:dist-tag-rm", "kept", ("1.0.0",)),
    ("package:deprecate", "kept", ("1.0.0",)),
    ("package:undeprecate", "kept", ("1.0.0",)),
    ("package:owner", "kept", ()),
    ("package:owner-rm", "kept", ()),
    ("package:unpublish", "kept", ("1.1.0",)),
    ("package:publish", "gone", ("1.0.0",)),
    ("package:unpublish", "gone", ("1.0.0",)),
]


def _imports(root: Path, config: Path, tmp_path: Path) -> None:
    """import registry (from a registry on loopback), import lockfile, import verdaccio (a
    Verdaccio storage folder written by `registry-gen export verdaccio` from another registry)."""
    with hostile_upstream() as up:
        up.publish("from-registry", "2.0.0")
        up.publish("from-lockfile", "3.0.0")
        assert registry_gen(["import", "registry", "from-registry@2.0.0", "--from", up.base, "--config", str(config)]) == 0
        lock = tmp_path / "project" / "package-lock.json"
        lock.parent.mkdir()
        entry = {"version": "3.0.0", "resolved": up.base + "from-lockfile/-/from-lockfile-3.0.0.tgz",
                 "integrity": up.documents["from-lockfile"]["versions"]["3.0.0"]["dist"]["integrity"]}  # fmt: skip
        lock.write_text(json.dumps({"name": "p", "lockfileVersion": 3, "packages": {"": {"name": "p"}, "node_modules/from-lockfile": entry}}))
        assert registry_gen(["import", "lockfile", str(lock), "--from", up.base, "--config", str(config)]) == 0
    other = tmp_path / "other"
    make_tarball(other / "content", "from-verdaccio", "4.0.0")
    (other / "registry.yaml").write_text(f"content_dir: {other / 'content'}\nout_dir: {other / 'public'}\ndata_dir: {other / 'data'}\n")
    assert registry_gen(["build", "--config", str(other / "registry.yaml")]) == 0
    assert registry_gen(["export", "verdaccio", str(tmp_path / "storage"), "--config", str(other / "registry.yaml")]) == 0
    assert registry_gen(["import", "verdaccio", str(tmp_path / "storage"), "--config", str(config)]) == 0


def test_every_kind_of_write_is_journalled_once_in_order(tmp_path: Path) -> None:
    root = tmp_path / "registry"
    server = RegistryProcess(root).start()
    try:
        _npm_writes(server, tmp_path)
    finally:
        server.stop()
    assert _kinds(_journal(root)) == NPM_WRITES
    config = root / "registry.yaml"
    config.write_text(f"content_dir: {root / 'content'}\nout_dir: {root / 'public'}\ndata_dir: {root / 'data'}\nsignup: open\n")
    make_tarball(root / "content" / "dropped", "dropped", "1.0.0")  # a package dropped in by hand
    assert registry_gen(["build", "--config", str(config)]) == 0
    entries = _journal(root)
    assert _kinds(entries) == NPM_WRITES  # a build of hand-made changes is not a write of the API
    _imports(root, config, tmp_path)
    assert registry_gen(["user", "remove", "alice", "--yes", "--config", str(config)]) == 0
    entries = _journal(root)
    assert _kinds(entries)[len(NPM_WRITES):] == [
        ("package:import", "from-registry", ("2.0.0",)),
        ("package:import", "from-lockfile", ("3.0.0",)),
        ("package:import", "from-verdaccio", ("4.0.0",)),
        ("package:change", "gone", ()),  # its meta outlives its versions (it records the unpublish), with alice's email
        ("package:change", "kept", ()),
    ]
    assert [e.seq for e in entries] == sorted(e.seq for e in entries) and len({e.seq for e in entries}) == len(entries)
    assert entries[0].actor == "alice" and entries[0].actor_id and entries[-1].actor == "registry-gen user remove"
    assert entries[-1].detail == {"maintainer email erased": "alice"}
    assert "example.com" not in json.dumps([e.detail for e in entries])  # no email in any detail
    assert entries[2].detail == {"tag": "stable", "before": None} and entries[4].detail == {"message": "use 1.1.0"}
    assert entries[6].detail["owners"] == {"before": ["alice"], "after": ["alice", "bob"]}


def test_an_owner_claim_is_journalled_once(tmp_path: Path) -> None:
    root = tmp_path / "registry"
    config = root / "registry.yaml"
    make_tarball(root / "content" / "claimed", "claimed", "1.0.0")
    (root / "content" / "claimed" / "registry-meta.json").write_text(json.dumps({"name": "claimed", "maintainers": [{"name": "carol"}]}))
    config.write_text(f"content_dir: {root / 'content'}\nout_dir: {root / 'public'}\ndata_dir: {root / 'data'}\nsignup: open\n")
    server = RegistryProcess(root).start()
    try:
        add_user(server.base, "carol", "carol-password-1")
    finally:
        server.stop()
    assert registry_gen(["owner", "claim", "claimed", "carol", "--config", str(config)]) == 0
    assert registry_gen(["owner", "claim", "claimed", "carol", "--config", str(config)]) == 0  # already: no write
    entries = _journal(root)
    assert _kinds(entries) == [("package:change", "claimed", ())] and entries[0].detail == {"owner claimed": "carol"}
    assert entries[0].actor == "registry-gen owner claim"


@pytest.mark.parametrize("point", ["after-write", "after-intent"])
def test_a_server_killed_before_acknowledging_a_write_lists_it_once_if_it_landed(tmp_path: Path, point: str) -> None:
    root = tmp_path / "registry"
    server = RegistryProcess(root, env={"REGISTRY_GEN_FAILPOINT": f"{point}:kill"}).start()
    token = add_user(server.base, "alice", "alice-password-1")
    data = tarball("crashed", "1.0.0")
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        http("PUT", server.base + "crashed", token=token, body=publish_body("crashed", "1.0.0", data))
    assert server.process is not None and server.process.wait(timeout=60) == -9  # killed at the hook, not answered
    assert _journal(root) == []  # pending: not part of the journal anyone reads
    restarted = RegistryProcess(root).start()  # its start build resolves the pending write from content/
    try:
        landed = point == "after-write"
        entries = _journal(root)
        assert _kinds(entries) == ([("package:publish", "crashed", ("1.0.0",))] if landed else [])
        served = http("GET", restarted.base + "crashed/-/crashed-1.0.0.tgz")
        assert (served.status, served.body if landed else b"") == ((200, data) if landed else (404, b""))
        if landed:  # the next write comes after it, once
            later = http("PUT", restarted.base + "crashed", token=token, body=publish_body("crashed", "1.0.1", tarball("crashed", "1.0.1")))
            assert later.status == 201
            assert _kinds(_journal(root)) == [("package:publish", "crashed", ("1.0.0",)), ("package:publish", "crashed", ("1.0.1",))]
    finally:
        restarted.stop()


def test_a_write_right_after_another_servers_writer_died_resolves_the_dead_one_first(tmp_path: Path) -> None:
    """The embedded default, two servers on one folder (one file lock): B has written (its first
    write's recovery is behind it); A dies with 1.1.0 stored, not built; B's next write of the same
    package resolves A's pending write before it reads the package, so 1.1.0 is journalled with its
    own event, before B's, and served (resolved after B's meta, it would read as not landed)."""
    root = tmp_path / "registry"
    a = RegistryProcess(root, env={"REGISTRY_GEN_FAILPOINT": "after-store:kill"}).start()
    b = RegistryProcess(root).start()
    try:
        token = add_user(b.base, "alice", "alice-password-1")

        def publish(server: RegistryProcess, version: str) -> int:
            return http("PUT", server.base + "raced", token=token, body=publish_body("raced", version, tarball("raced", version))).status

        assert publish(b, "1.0.0") == 201
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            publish(a, "1.1.0")
        assert a.process is not None and a.process.wait(timeout=60) == -9  # killed with 1.1.0 in content/, pending
        assert publish(b, "1.2.0") == 201
        assert _kinds(_journal(root)) == [("package:publish", "raced", (v,)) for v in ("1.0.0", "1.1.0", "1.2.0")]
        served = json.loads(http("GET", b.base + "raced").body)
        assert sorted(served["versions"]) == ["1.0.0", "1.1.0", "1.2.0"]
    finally:
        b.stop()
        a.stop()
