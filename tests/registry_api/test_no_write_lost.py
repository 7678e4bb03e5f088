"""Issue 28, acceptance 1, "No write lost, anywhere": three `registry-gen api` processes on one
PostgreSQL and one bucket (moto's server mode; the second S3 implementation, SeaweedFS, runs the
same write path in test_api_object_store.py), behind the config `registry-gen host-config nginx
--from-bucket --api-upstream ×3` emits. Three clients write at once through nginx, as npm sends
it: a package each, one package all three publish (some versions contested with other bytes), and
dist-tag, deprecate and owner changes racing on it; one instance is SIGKILLed and restarted and
PostgreSQL is restarted mid-run. Afterwards every acknowledged write is served through nginx with
its bytes, no name@version ever had two tarballs, `registry-gen verify` passes on the bucket's
tree, the change feed lists each acknowledged write exactly once, and npm 11 installs the result."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.client import HTTPException
from pathlib import Path
from typing import Any

import pytest

from registry_gen.storage.contract import archive_key
from tests.conftest import postgres_state_url
from tests.hosts.clients import CLIENTS, ClientRun, install_client
from tests.registry_api.helpers import Reply, add_user, http, publish_body, tarball
from tests.registry_api.test_api_instances_postgres import change_feed, postgres  # noqa: F401 - the module's PostgreSQL fixture
from tests.registry_api.test_api_object_store import BUCKET, PREFIX, Site, bucket_site, poll, started, verify_bucket_tree
from tests.user_api.pg_server import PostgresServer

pytestmark = pytest.mark.slow

ACKED, REFUSED, UNKNOWN = "acknowledged", "refused", "unknown"
SAY_NOTHING = {502, 503, 504}  # the write may or may not have landed: npm retries
CLIENT_COUNT, ROUNDS = 3, 30
SHARED = "shared-pkg"
RETRY_SECONDS, EDIT_ATTEMPTS = 60.0, 40


@dataclass(frozen=True)
class Write:
    """One write a client made, with what it learnt: acknowledged (2xx), refused, or unknown (no
    answer, or a refusal after an attempt that may have landed)."""

    client: int
    kind: str  # publish, dist-tag, deprecate, owner-add, owner-rm
    name: str
    subject: str  # the version; for owner-*, the owner
    outcome: str
    status: int = 0  # of the last answer (0: none)
    integrity: str = ""  # a publish's bytes
    message: str = ""  # a deprecation's


@dataclass
class Run:
    site: Site
    tokens: list[str]
    writes: list[Write] = field(default_factory=list)
    faults: dict[str, int] = field(default_factory=dict)  # fault -> acknowledged writes when it struck
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, write: Write) -> Write:
        with self.lock:
            self.writes.append(write)
        return write

    def acknowledged(self) -> int:
        with self.lock:
            return sum(w.outcome == ACKED for w in self.writes)


def send(method: str, url: str, token: str, body: Any) -> tuple[Reply | None, bool]:
    """One write retried like npm while the answer says nothing (no answer, 502, 503, 504), within a
    deadline: (the last reply, whether an earlier attempt may have landed)."""
    uncertain, end = False, time.monotonic() + RETRY_SECONDS
    while True:
        try:
            reply: Reply | None = http(method, url, token=token, body=body, timeout=60)
        except (OSError, HTTPException):
            reply = None
        if reply is not None and reply.status not in SAY_NOTHING:
            return reply, uncertain
        uncertain = True
        if time.monotonic() > end:
            return reply, True
        time.sleep(0.2)  # a client's back-off before its retry, not a synchronisation


def verdict(reply: Reply | None, uncertain: bool) -> dict[str, Any]:
    """What the client learnt from a write's last answer (`uncertain`: an earlier attempt may have landed)."""
    status = 0 if reply is None else reply.status
    if 200 <= status < 300:
        return {"outcome": ACKED, "status": status}
    return {"outcome": UNKNOWN if uncertain or status in SAY_NOTHING | {0} else REFUSED, "status": status}


def integrity_of(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def publish(run: Run, k: int, name: str, version: str) -> Write:
    data = tarball(name, version, description=f"{name}@{version} from client {k}")  # each client's own bytes
    reply, uncertain = send("PUT", run.site.reads + name, run.tokens[k], publish_body(name, version, data))
    return run.record(Write(k, "publish", name, version, **verdict(reply, uncertain), integrity=integrity_of(data)))


def tag(run: Run, k: int, version: str) -> Write:
    reply, uncertain = send("PUT", f"{run.site.reads}-/package/{SHARED}/dist-tags/c{k}", run.tokens[k], version)
    return run.record(Write(k, "dist-tag", SHARED, version, **verdict(reply, uncertain)))


def edit(run: Run, k: int, change: Callable[[dict[str, Any]], tuple[str, dict[str, Any]]]) -> tuple[Reply | None, bool]:
    """npm's read-modify-write (deprecate, owner): read the document through nginx, change it, send
    it back naming its `_rev`; a 409 says somebody wrote in between: read again (bounded)."""
    reply: Reply | None = None
    uncertain = False
    for _ in range(EDIT_ATTEMPTS):
        document = http("GET", f"{run.site.reads}{SHARED}?write=true").json
        path, body = change(document)
        reply, maybe = send("PUT", run.site.reads + path, run.tokens[k], body)
        uncertain = uncertain or maybe
        if reply is None or reply.status != 409:
            return reply, uncertain
    return reply, uncertain


def deprecate(run: Run, k: int, version: str, message: str) -> Write:
    def change(document: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        document["versions"][version]["deprecated"] = message
        return SHARED, document  # npm deprecate: the whole document, its _rev inside

    reply, uncertain = edit(run, k, change)
    return run.record(Write(k, "deprecate", SHARED, version, **verdict(reply, uncertain), message=message))


def owners(run: Run, k: int, owner: str, add: bool) -> Write:
    def change(document: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        kept = [m for m in document["maintainers"] if m["name"] != owner]
        people = kept + [{"name": owner, "email": f"{owner}@example.com"}] if add else kept
        return f"{SHARED}/-rev/{document['_rev']}", {"_id": SHARED, "_rev": document["_rev"], "maintainers": people}

    reply, uncertain = edit(run, k, change)
    return run.record(Write(k, "owner-add" if add else "owner-rm", SHARED, owner, **verdict(reply, uncertain)))


def client(run: Run, k: int) -> None:
    """Client k: ROUNDS versions, of its own package and of the shared one in turn; a contested
    version of the shared one every tenth round; its tag, deprecations and an owner of its own on
    the shared one in between."""
    for j in range(ROUNDS):
        if j % 2 == 0:
            publish(run, k, f"own-pkg-{k}", f"1.0.{j}")
            continue
        mine = publish(run, k, SHARED, f"1.{k + 1}.{j}")
        if j % 10 == 5:
            publish(run, k, SHARED, f"2.0.{j}")  # all three at about once, each with its own bytes
        if mine.outcome != ACKED:
            continue
        if j % 6 == 1:
            tag(run, k, mine.subject)
        if j % 8 == 3:
            deprecate(run, k, mine.subject, f"superseded: client {k}, round {j}")
        if j in (9, 17, 25):
            owners(run, k, f"extra-{k}", add=j != 17)


def faults(run: Run, postgres: PostgresServer) -> None:  # noqa: F811
    """Mid-run: one instance SIGKILLed and restarted, then PostgreSQL restarted."""
    total = CLIENT_COUNT * ROUNDS
    assert poll(lambda: run.acknowledged() >= total // 5, 120), "the clients never got going"
    victim = run.site.apis[1]
    victim.kill()
    run.faults["killed"] = run.acknowledged()
    started(victim)
    run.faults["restarted"] = run.acknowledged()
    assert poll(lambda: run.acknowledged() >= total // 2, 120), "the clients stalled after the restart"
    postgres.halt()
    run.faults["postgresql down"] = run.acknowledged()
    postgres.resume()


@pytest.fixture
def run(postgres: PostgresServer, tmp_path: Path) -> Iterator[Run]:  # noqa: F811
    with bucket_site("moto", postgres_state_url(postgres), tmp_path, ("a", "b", "c")) as site:
        tokens = [add_user(site.reads, f"client-{k}", f"client-{k}-password") for k in range(CLIENT_COUNT)]
        for k in range(CLIENT_COUNT):
            add_user(site.reads, f"extra-{k}", f"extra-{k}-password")
        found = Run(site, tokens)
        assert publish(found, 0, SHARED, "0.0.1").outcome == ACKED
        for k in range(1, CLIENT_COUNT):
            assert owners(found, 0, f"client-{k}", add=True).outcome == ACKED
        yield found


def test_no_acknowledged_write_is_lost_across_three_instances_a_kill_and_a_postgresql_restart(
    run: Run, postgres: PostgresServer, tmp_path: Path  # noqa: F811
) -> None:
    began = time.monotonic()
    workers = [threading.Thread(target=client, args=(run, k)) for k in range(CLIENT_COUNT)]
    fault_errors: list[BaseException] = []
    chaos = threading.Thread(target=lambda: guarded(fault_errors, faults, run, postgres))
    for worker in [*workers, chaos]:
        worker.start()
    for worker in [*workers, chaos]:
        worker.join(max(1.0, 600 - (time.monotonic() - began)))
        assert not worker.is_alive(), "a client or the fault thread did not finish in time"
    assert not fault_errors, fault_errors
    written = run.acknowledged()
    clients_done = time.monotonic() - began
    assert set(run.faults) == {"killed", "restarted", "postgresql down"} and run.faults["postgresql down"] < written, run.faults
    feed = change_feed(run.site.reads, limit=50)  # through nginx, paged
    documents = {name: http("GET", run.site.reads + name).json for name in {w.name for w in run.writes}}
    unjournalled = check_publishes(run, documents, feed)
    check_tags_and_deprecations(run, documents[SHARED], feed)
    check_owners(run, documents[SHARED], feed)
    verify_bucket_tree(run.site)
    check_npm_installs(run, documents[SHARED], tmp_path)
    outcomes = Counter((w.kind, w.outcome, w.status) for w in run.writes)  # shown with -s: what the run went through
    print(f"\n{dict(outcomes)}; faults after {run.faults} acknowledged; clients {clients_done:.0f} s, all {time.monotonic() - began:.0f} s")
    if unjournalled:  # every check above held; a narrow race the acceptance allows, reported when it happens
        pytest.xfail(f"served, never acknowledged nor journalled (a SIGKILLed writer's archive PUT finished after its write was resolved aborted): {unjournalled}")


def guarded(errors: list[BaseException], target: Callable[..., None], *args: Any) -> None:
    try:
        target(*args)
    except BaseException as error:  # noqa: BLE001 - handed to the test's thread, which asserts on it
        errors.append(error)


def journalled(feed: list[dict[str, Any]], kind: str, name: str, match: Callable[[dict[str, Any]], bool]) -> int:
    return sum(1 for e in feed if e["kind"] == kind and e["name"] == name and match(e))


def check_publishes(run: Run, documents: dict[str, Any], feed: list[dict[str, Any]]) -> list[str]:
    """Each name@version: served with the bytes of its one acknowledged publish, or of no publish at
    all; its tarball through nginx and in the content bucket the bytes the document states; the feed
    listing it once if served, never if not; no version served that nobody sent. Returns the
    versions served although no write of theirs was acknowledged nor journalled: a known defect
    (a writer SIGKILLed during its archive PUT; the store finishes the PUT after another instance
    resolved the write as aborted), which the issue's acceptance (acknowledged writes) allows."""
    unjournalled = []
    tried: dict[tuple[str, str], list[Write]] = {}
    for write in run.writes:
        if write.kind == "publish":
            tried.setdefault((write.name, write.subject), []).append(write)
    for name, document in documents.items():
        assert set(document["versions"]) <= {v for n, v in tried if n == name}, name
    for (name, version), writes in tried.items():
        acked = {w.integrity for w in writes if w.outcome == ACKED}
        # Not acknowledged may still have landed: nginx hands a PUT whose instance died mid-request
        # to the next one, which refuses it (403) as a republish. Then it is the client's own bytes.
        sent = acked or {w.integrity for w in writes}
        served = documents[name]["versions"].get(version)
        count = journalled(feed, "package:publish", name, lambda e, v=version: e["versions"] == [v])
        if not acked and served is not None and count == 0:
            unjournalled.append(f"{name}@{version}")
        else:
            assert len(acked) <= 1 and count == (served is not None), (name, version, writes, count)
        if served is None:
            assert not acked, f"{name}@{version} acknowledged and lost"
            continue
        assert served["dist"]["integrity"] in sent, (name, version, writes)
        data = http("GET", served["dist"]["tarball"]).body
        assert integrity_of(data) == served["dist"]["integrity"] and hashlib.sha1(data).hexdigest() == served["dist"]["shasum"]
        assert run.site.client.get_object(Bucket=BUCKET, Key=f"{PREFIX}/{archive_key(name, version)}")["Body"].read() == data
    return unjournalled


def expected_last(writes: list[Write], value: Callable[[Write], Any] = lambda w: w.subject) -> set[Any]:
    """What one client's sequence of writes to one field leaves: the value of its last acknowledged
    write, or of an unknown one after it (empty: none was acknowledged)."""
    last = max((i for i, w in enumerate(writes) if w.outcome == ACKED), default=None)
    return set() if last is None else {value(w) for w in writes[last:] if w.outcome in (ACKED, UNKNOWN)}


def check_tags_and_deprecations(run: Run, document: dict[str, Any], feed: list[dict[str, Any]]) -> None:
    """Each client's tag where its last acknowledged write put it, each acknowledged deprecation
    served; each journalled once (an unknown one: once if it landed, never if not)."""
    assert {w.kind for w in run.writes if w.outcome == ACKED} >= {"dist-tag", "deprecate", "owner-add", "owner-rm"}
    for k in range(CLIENT_COUNT):
        tags = [w for w in run.writes if w.kind == "dist-tag" and w.client == k]
        assert not tags or document["dist-tags"].get(f"c{k}") in expected_last(tags), (k, tags, document["dist-tags"])
        for write in tags:
            count = journalled(feed, "package:dist-tag", SHARED, lambda e, w=write: e["detail"]["tag"] == f"c{k}" and e["versions"] == [w.subject])
            assert count == 1 if write.outcome == ACKED else count <= 1, (write, count)
    for write in (w for w in run.writes if w.kind == "deprecate"):
        served = document["versions"][write.subject].get("deprecated")
        count = journalled(feed, "package:deprecate", SHARED, lambda e, w=write: e["detail"]["message"] == w.message and w.subject in e["versions"])
        if write.outcome == ACKED:
            assert served == write.message and count == 1, (write, served, count)
        else:
            assert count == (served == write.message), (write, served, count)


def check_owners(run: Run, document: dict[str, Any], feed: list[dict[str, Any]]) -> None:
    """The owners acknowledged are there, the removal acknowledged is not; each acknowledged change
    journalled (an unknown one at most once more)."""
    names = {m["name"] for m in document["maintainers"]}
    assert {f"client-{k}" for k in range(CLIENT_COUNT)} <= names
    for k in range(CLIENT_COUNT):
        changes = [w for w in run.writes if w.kind.startswith("owner") and w.subject == f"extra-{k}"]
        assert not changes or (f"extra-{k}" in names) in expected_last(changes, lambda w: w.kind == "owner-add"), (k, changes, names)
        for kind, event, key in (("owner-add", "package:owner", "added"), ("owner-rm", "package:owner-rm", "removed")):
            acked = sum(w.outcome == ACKED for w in changes if w.kind == kind)
            unknown = sum(w.outcome == UNKNOWN for w in changes if w.kind == kind)
            count = journalled(feed, event, SHARED, lambda e, k=k, key=key: e["detail"][key] == [f"extra-{k}"])
            assert acked <= count <= acked + unknown, (k, kind, changes, count)


def check_npm_installs(run: Run, document: dict[str, Any], root: Path) -> None:
    """npm 11 through nginx: the shared package by client 0's tag, and another package's latest."""
    spec = CLIENTS["npm11"]
    installer = ClientRun(spec, install_client(spec), root / "installer", run.site.reads)
    project = installer.new_project(root / "project")
    installer.add(project, f"{SHARED}@c0", "own-pkg-1")
    installed = {n: json.loads((project / "node_modules" / n / "package.json").read_text())["version"] for n in (SHARED, "own-pkg-1")}
    assert installed[SHARED] == document["dist-tags"]["c0"]
    assert installed["own-pkg-1"] == http("GET", run.site.reads + "own-pkg-1").json["dist-tags"]["latest"]
