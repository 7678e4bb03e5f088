"""Issue 28, acceptance 2: consistency and scale of the several-machines deployment, in numbers.

Everything runs as real processes on 127.0.0.1: PostgreSQL from Debian (the tests' throwaway
server), moto's S3 server as the bucket, `registry-gen api` instances on both, nginx from
`registry-gen host-config nginx --from-bucket` (reads from the tree bucket, writes to the
instances) and Debian's Varnish with xkey in front of it, purged by the instances (`purge:`).

- consistency: after each `201`, the document read from the origin (nginx, i.e. the bucket) at
  once lists the new version (the fraction that does), and the time from the `201` until the
  cache in front serves it (which held the old document, a HIT, just before the write);
- publishes per second with 1 instance and with 3 (same PostgreSQL and bucket, the same clients,
  bounded in count and time; the 1-instance floor is measured before and after the 3), and the
  CPU time each publish costs in every process (from /proc), to say how it scales with cores;
- a publish's server share (bench_publish.server_share: the PUT until a GET lists it) on a
  registry of 1,000 (quick) or 10,000 versions, embedded (`serve`) and on PostgreSQL + bucket
  (the same registry moved there by `registry-gen migrate`), the bucket on moto and again on
  SeaweedFS (started as tests/storage/s3servers.py starts it), so the report shows what one S3
  emulator adds to the figure (moto scans every key of its bucket per LIST; a real S3 does not).

Nothing asserts timing. Run it alone with `python -m bench --only scaleout [--quick] [--merge]`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.bench_publish import VERDACCIO_SERVER_MS, add_user, package_files, publish_body, registry_server, server_share
from registry_gen.archive import build_npm_tarball

BUCKET = "registry"
FRESH_WITHIN_S = 1.0  # issue 28: the cache in front serves the new version within 1 s of the 201
CLIENTS = 6  # concurrent publishers in the throughput runs
PROCESS_KINDS = ("api", "postgres", "s3", "nginx", "varnish")


@dataclass(frozen=True)
class Sizes:
    rounds: int  # consistency and server-share samples
    publishes: int  # per throughput run (bounded by `seconds` too)
    seconds: float
    versions: int  # the registry size of the server share


QUICK = Sizes(rounds=10, publishes=36, seconds=60, versions=1_000)
FULL = Sizes(rounds=30, publishes=120, seconds=180, versions=10_000)


# ---------------------------------------------------------------- HTTP


def _request(method: str, url: str, body: bytes | None = None, token: str | None = None) -> tuple[int, dict[str, str], bytes]:
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:  # noqa: S310 - 127.0.0.1
            return reply.status, {k.lower(): v for k, v in reply.headers.items()}, reply.read()
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read()


def _versions(base: str, name: str) -> tuple[set[str], str]:
    """The versions the full document at `base` lists, and its X-Cache (HIT/MISS; '' at the origin)."""
    status, headers, body = _request("GET", base + name)
    return (set(json.loads(body)["versions"]) if status == 200 else set()), headers.get("x-cache", "")


def _body(name: str, version: str) -> bytes:
    data = build_npm_tarball(package_files(name, version))
    return json.dumps(publish_body(name, version, data)).encode()


# ---------------------------------------------------------------- CPU time from /proc


def _stat(pid: int) -> tuple[int, list[str]] | None:
    """(parent pid, the fields after the command name) of a live process, or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), fields


def tree_cpu(root: int) -> float:
    """CPU seconds of `root` and its live descendants, plus the children they reaped (PostgreSQL's
    backends, nginx's workers)."""
    parents = {pid: found[0] for pid in map(int, filter(str.isdigit, os.listdir("/proc"))) if (found := _stat(pid))}
    tick = os.sysconf("SC_CLK_TCK")
    total, wanted = 0.0, {root}
    for _ in range(8):  # a few levels deep is all these servers have
        wanted |= {pid for pid, parent in parents.items() if parent in wanted}
    for pid in wanted:
        found = _stat(pid)
        if found:
            utime, stime, cutime, cstime = (int(x) for x in found[1][11:15])
            total += (utime + stime + (cutime + cstime if pid == root else 0)) / tick
    return total


@dataclass
class Meter:
    """The processes of a deployment by kind, and their CPU seconds when asked."""

    roots: dict[str, list[int]] = field(default_factory=lambda: {kind: [] for kind in PROCESS_KINDS})

    def cpu(self) -> dict[str, float]:
        return {kind: sum(tree_cpu(pid) for pid in pids) for kind, pids in self.roots.items()}


def _own_cpu() -> float:
    times = os.times()
    return times.user + times.system


# ---------------------------------------------------------------- the deployment


@dataclass
class Deployment:
    origin: dict[int, str]  # instances behind it -> nginx's URL (reads from the bucket)
    cache: str  # Varnish in front of the nginx of every instance
    apis: list[Any]  # tests.registry_api.test_api_instances_postgres.Api
    meter: Meter


def _config(folder: Path, database_url: str, endpoint: str, prefix: str, cache_port: int) -> Path:
    folder.mkdir(parents=True)
    config = folder / "registry.yaml"
    config.write_text(
        f"content_dir: work/content\nout_dir: work/public\ndata_dir: data\nbase_url: http://127.0.0.1:{cache_port}/\n"
        f"database_url: '{database_url}'\nsignup: open\nstorage: s3://{BUCKET}/{prefix}\n"
        f"storage_endpoint_url: {endpoint}\n"
        "tree_readers: nginx\n"  # read only through the nginx config below: one key per document
        f"purge:\n  url: http://127.0.0.1:{cache_port}/\n  method: PURGE\n  timeout_seconds: 1\n  key_header: xkey\n"
    )
    return config


def _nginx(stack: contextlib.ExitStack[Any], root: Path, apis: list[Any]) -> tuple[str, int]:
    from tests.hosts.servers import free_port, nginx_server

    port = free_port()
    more = [arg for api in apis[1:] for arg in ("--api-upstream", f"127.0.0.1:{api.port}")]
    args = ["--config", str(apis[0].config), "--from-bucket", *more]
    url = stack.enter_context(nginx_server(root / "no-tree", root / f"nginx-{len(apis)}", port, f"127.0.0.1:{apis[0].port}", args))
    return url, port


@contextlib.contextmanager
def deployment(root: Path, database_url: str, s3: Any, prefix: str, instances: int, meter: Meter) -> Iterator[Deployment]:
    """`instances` api processes (not started) on one schema and one bucket prefix; an nginx in
    front of the first alone and one in front of all; Varnish in front of the latter."""
    from tests.hosts.servers import free_port, varnish_server
    from tests.registry_api.test_api_instances_postgres import Api

    cache_port = free_port()
    apis = [Api(_config(root / f"host-{i}", database_url, s3.endpoint, prefix, cache_port)) for i in range(instances)]
    with contextlib.ExitStack() as stack:
        first, all_port = _nginx(stack, root, apis[:1])
        origin = {1: first}
        if instances > 1:
            origin[instances], all_port = _nginx(stack, root, apis)
        cache = stack.enter_context(varnish_server(root / "varnish", cache_port, all_port))
        meter.roots["nginx"] = [_child_pid("nginx", f"{root / f'nginx-{n}'} ") for n in sorted({1, instances})]
        meter.roots["varnish"] = [_child_pid("varnishd", str(root / "varnish"))]
        stack.callback(lambda: [api.stop() for api in apis])
        yield Deployment(origin, cache, apis, meter)


def _child_pid(*needles: str) -> int:
    """The child of this process whose command line holds every needle (nginx's master rewrites
    its own: "nginx: master process /usr/sbin/nginx -p RUNTIME ...")."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            line = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if all(needle in line for needle in needles) and (_stat(int(pid)) or (0,))[0] == os.getpid():
                return int(pid)
    raise RuntimeError(f"no child process runs {' '.join(needles)}")


def _answers(url: str) -> bool:
    try:
        return _request("GET", url)[0] == 200
    except OSError:
        return False


def start(deployed: Deployment, count: int, within: float = 120) -> None:
    """Starts the first `count` instances (the others stay or go down) and waits until each answers
    (a first start on a loaded registry syncs, builds and uploads it all: give it `within` seconds)."""
    from tests.registry_api.test_api_object_store import poll

    for index, api in enumerate(deployed.apis):
        running = api.process is not None and api.process.poll() is None
        if index < count and not running:
            api.start(ready=False)  # listening; ready is awaited below, within `within` (Api.start's own wait is 60 s)
            if not poll(lambda api=api: _answers(api.base + "-/ping"), within):
                raise RuntimeError(f"instance {index} did not answer within {within:.0f} s")
        elif index >= count and running:
            api.stop()
    deployed.meter.roots["api"] = [api.process.pid for api in deployed.apis[:count] if api.process is not None]


# ---------------------------------------------------------------- 1. consistency after a 201


def consistency(deployed: Deployment, token: str, rounds: int) -> dict[str, Any]:
    """Per round: the cache holds the package's document (a HIT), a new version is published,
    then the origin is read at once and the cache until it lists the version."""
    name = "bench-consistency"
    origin = deployed.origin[len(deployed.apis)]
    at_once, fresh, was_hit = 0, [], 0
    for index in range(rounds + 1):
        version = f"1.0.{index}"
        if index:
            was_hit += _cached(deployed.cache, name)
        status, _, reply = _request("PUT", deployed.cache + name, _body(name, version), token)
        answered = time.monotonic()
        if status != 201:
            raise RuntimeError(f"publish of {name}@{version} through the cache: {status} {reply[:300]!r}")
        at_once += version in _versions(origin, name)[0]
        fresh.append(_until_listed(deployed.cache, name, version, answered))
    return {"rounds": rounds, "origin_at_once": at_once - 1, "fresh": fresh[1:], "was_hit": was_hit}


def _cached(cache: str, name: str) -> bool:
    """Reads the document through the cache until it is a HIT (bounded): True if it became one."""
    for _ in range(20):
        if _versions(cache, name)[1] == "HIT":
            return True
    return False


def _until_listed(cache: str, name: str, version: str, since: float, limit: float = 30.0) -> float:
    """Seconds from `since` until the cache's document lists `version` (polled; `limit` at most)."""
    while True:
        taken = time.monotonic() - since
        if version in _versions(cache, name)[0] or taken > limit:
            return taken
        time.sleep(0.005)  # a polling interval, not a synchronisation


# ---------------------------------------------------------------- 2. publishes per second


@dataclass
class Throughput:
    instances: int
    done: int
    seconds: float
    latencies: list[float]
    cpu: dict[str, float]  # CPU seconds per kind of process over the run
    clients_cpu: float
    failures: list[str]

    @property
    def rate(self) -> float:
        return self.done / self.seconds

    def cpu_ms(self, kind: str) -> float:
        return self.cpu[kind] * 1000 / max(self.done, 1)


def throughput(deployed: Deployment, token: str, instances: int, label: str, sizes: Sizes) -> Throughput:
    """CLIENTS threads publish new versions of packages of their own through the nginx in front
    of `instances` instances, until `sizes.publishes` are done or `sizes.seconds` pass."""
    start(deployed, instances)
    base = deployed.origin[instances]
    bodies = [(f"bench-tp-{label}-{index % CLIENTS}", _body(f"bench-tp-{label}-{index % CLIENTS}", f"1.0.{index}"))
              for index in range(sizes.publishes)]  # fmt: skip
    latencies: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()
    deadline = time.monotonic() + sizes.seconds

    def client(mine: list[tuple[str, bytes]]) -> None:
        for name, body in mine:
            if time.monotonic() > deadline:
                return
            begun = time.monotonic()
            status, _, reply = _request("PUT", base + name, body, token)
            with lock:
                (latencies.append(time.monotonic() - begun) if status == 201 else failures.append(f"{status} {reply[:120]!r}"))

    workers = [threading.Thread(target=client, args=(bodies[k::CLIENTS],)) for k in range(CLIENTS)]
    cpu_before, own_before, begun = deployed.meter.cpu(), _own_cpu(), time.monotonic()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(sizes.seconds + 120)
    seconds = time.monotonic() - begun
    cpu = {kind: used - cpu_before[kind] for kind, used in deployed.meter.cpu().items()}
    return Throughput(instances, len(latencies), seconds, latencies, cpu, _own_cpu() - own_before, failures)


def scaling_model(one: Throughput, three: Throughput, cores: int) -> str:
    """What each publish costs, and the rate that cost allows on more cores."""
    per = {kind: three.cpu_ms(kind) for kind in PROCESS_KINDS}
    total = sum(per.values())
    api = per["api"]
    wait_ms = statistics.median(one.latencies) * 1000 - one.cpu_ms("api") if one.latencies else 0.0
    lines = [
        f"CPU per publish with 3 instances: {', '.join(f'{kind} {ms:.1f} ms' for kind, ms in per.items())} "
        f"(all servers {total:.1f} ms; the load generator {three.clients_cpu * 1000 / max(three.done, 1):.1f} ms more)",
        f"1 instance: {one.cpu_ms('api'):.1f} ms of api CPU per publish, median latency {statistics.median(one.latencies) * 1000:.0f} ms "
        f"with {CLIENTS} clients, so about {max(wait_ms, 0):.0f} ms of each is waiting (PostgreSQL, the bucket, locks, the GIL's queue)",
        "Model: the rate is bounded by the busiest resource. One instance runs its Python under one GIL, so "
        f"at most 1000 / {one.cpu_ms('api'):.1f} = {1000 / max(one.cpu_ms('api'), 0.1):.0f} publishes/s whatever the cores; "
        f"N instances on k cores, with PostgreSQL and the S3 server elsewhere, at most min(N, k) × 1000 / {api:.1f} "
        f"= {1000 / max(api, 0.1):.0f} × min(N, k) publishes/s; on this {cores}-core machine everything shares the cores: "
        f"at most {cores} × 1000 / {total + three.clients_cpu * 1000 / max(three.done, 1):.1f} = "
        f"{cores * 1000 / max(total + three.clients_cpu * 1000 / max(three.done, 1), 0.1):.0f} publishes/s",
    ]
    return "; ".join(lines)


# ---------------------------------------------------------------- 3. server share at a registry size


def embedded_share(root: Path, sizes: Sizes) -> list[float]:
    """bench_publish's figure on `root` (content/ of the synthetic registry): serve builds it,
    the samples are taken, serve stops; the built state stays for `migrate`."""
    with registry_server(root) as base:
        token = add_user(base, "bencher")
        samples, _ = server_share(base, token, "bench-raw-publish", sizes.rounds)
    return samples


def migrate(root: Path, database_url: str, endpoint: str, prefix: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    proc = subprocess.run(
        [sys.executable, "-m", "registry_gen", "migrate", "--to", "postgres", "--database-url", database_url,
         "--storage", f"s3://{BUCKET}/{prefix}", "--storage-endpoint-url", endpoint],
        cwd=root, env=env, capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"registry-gen migrate failed: {proc.stdout[-1000:]} {proc.stderr[-1000:]}")


# ---------------------------------------------------------------- the run


@dataclass
class Parts:
    postgres: Any
    s3: Any
    work: Path
    schemas: list[str] = field(default_factory=list)

    def database(self) -> str:
        from tests.conftest import postgres_state_url

        return postgres_state_url(self.postgres)


@contextlib.contextmanager
def parts() -> Iterator[Parts]:
    """PostgreSQL and the S3 server (with its public-read bucket) for the whole run."""
    import psycopg

    from tests.storage.s3servers import s3_credentials, s3_server
    from tests.user_api.pg_server import start_postgres

    work = Path(tempfile.mkdtemp(prefix="bench-scaleout-"))
    server = start_postgres()
    try:
        with psycopg.connect(server.url(), autocommit=True) as conn:  # the accounts' search
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public")
        with s3_credentials(), s3_server("moto", work / "s3") as s3:
            public_bucket(s3.endpoint)
            yield Parts(server, s3, work)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def _metered(found: Parts, s3: Any = None) -> Meter:
    meter = Meter()
    meter.roots["postgres"] = [int((found.postgres.data_dir / "postmaster.pid").read_text().split()[0])]
    meter.roots["s3"] = [(s3 or found.s3).process.pid]
    return meter


def measure_scaling(found: Parts, sizes: Sizes) -> dict[str, Any]:
    with deployment(found.work / "scale", found.database(), found.s3, "scale", 3, _metered(found)) as deployed:
        start(deployed, 1)
        token = add_user(deployed.apis[0].base, "scaler")
        _request("PUT", deployed.cache + "bench-warm", _body("bench-warm", "0.0.1"), token)  # first write: the package's creation
        before = throughput(deployed, token, 1, "one-a", sizes)
        three = throughput(deployed, token, 3, "three", sizes)
        after = throughput(deployed, token, 1, "one-b", sizes)
        start(deployed, 3)
        seen = consistency(deployed, token, sizes.rounds)
    return {"one": [before, after], "three": three, "consistency": seen}


def measure_share(found: Parts, sizes: Sizes) -> dict[str, Any]:
    """The server share embedded, then on PostgreSQL + moto's bucket, then on PostgreSQL + a
    SeaweedFS bucket: the same registry, each move a `registry-gen migrate` of it into a new schema."""
    from bench.synthetic import SCALES, RegistrySpec, ensure_registry

    root = found.work / "loaded"
    spec = SCALES.get(sizes.versions) or RegistrySpec(packages=max(1, sizes.versions // 5), versions=5, lean=True, prefix="so")
    shutil.copytree(ensure_registry(spec, progress=False), root / "content")
    measured: dict[str, Any] = {"embedded": embedded_share(root, sizes)}
    measured["moto"] = bucket_share(found, found.s3, root, "share", sizes)
    try:
        with seaweedfs(found.work) as second:
            measured["seaweedfs"] = bucket_share(found, second, root, "share-seaweedfs", sizes)
    except (RuntimeError, OSError) as exc:  # the moto figure stands; this one says what broke
        measured["seaweedfs"] = f"did not run: {type(exc).__name__}: {exc}"[:1000]
    return measured


def bucket_share(found: Parts, s3: Any, root: Path, folder: str, sizes: Sizes) -> dict[str, Any]:
    """`root`'s registry migrated into a new schema and `s3`'s bucket (prefix "loaded"), one
    instance started on it, the share's samples, and what each publish cost the api and the S3 server."""
    from tests.storage.s3servers import client

    begun = time.monotonic()
    migrate(root, database := found.database(), s3.endpoint, "loaded")
    moved = time.monotonic() - begun
    with deployment(found.work / folder, database, s3, "loaded", 1, _metered(found, s3)) as deployed:
        start(deployed, 1, within=1800)
        first_start = time.monotonic() - begun - moved
        token = add_user(deployed.apis[0].base, "sharer")
        before = deployed.meter.cpu()
        samples = server_share(deployed.origin[1], token, "bench-raw-publish-moved", sizes.rounds)[0]
        after = deployed.meter.cpu()
    keys = sum(page.get("KeyCount", 0) for page in client(s3.endpoint).get_paginator("list_objects_v2").paginate(Bucket=BUCKET))
    per = {kind: (after[kind] - before[kind]) * 1000 / (sizes.rounds + 1) for kind in ("api", "s3")}
    return {"samples": samples, "api_cpu_ms": per["api"], "s3_cpu_ms": per["s3"], "keys": keys, "moved": moved,
            "first_start": first_start, "seconds": time.monotonic() - begun}


@contextlib.contextmanager
def seaweedfs(work: Path) -> Iterator[Any]:
    """SeaweedFS (`weed mini`) started as tests/storage/s3servers.py starts it, with the same
    public-read bucket as moto's; the S3 credentials are parts()'s."""
    from tests.storage.s3servers import s3_server

    with s3_server("seaweedfs", work / "s3-seaweedfs") as s3:
        public_bucket(s3.endpoint)
        yield s3


def public_bucket(endpoint: str) -> None:
    """The bench's bucket, which anyone may read (nginx --from-bucket reads it anonymously)."""
    from registry_gen.hosting import public_read_policy
    from tests.storage.s3servers import client, make_bucket

    make_bucket(endpoint, BUCKET)
    client(endpoint).put_bucket_policy(Bucket=BUCKET, Policy=public_read_policy(BUCKET))


def _quantile(samples: list[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))]


def consistency_rows(seen: dict[str, Any]) -> list[dict[str, Any]]:
    fresh = seen["fresh"]
    within = sum(1 for taken in fresh if taken <= FRESH_WITHIN_S)
    note = (f"{seen['rounds']} publishes of one package through Varnish (xkey, purged by the instances) -> nginx "
            f"(--from-bucket) -> 3 instances; before each, the cache held the old document ({seen['was_hit']} of "
            f"{seen['rounds']} reads were a HIT)")  # fmt: skip
    return [
        {"figure": "scale-out: the origin (nginx from the bucket) serves the new version right after the 201",
         "value": round(100 * seen["origin_at_once"] / seen["rounds"], 1), "unit": "%", "baseline": None, "ratio": None,
         "goal": "≥ 100 %", "note": note + "; one GET of the full document at the origin right after each 201"},
        {"figure": "scale-out: 201 until the cache in front serves the new version, median",
         "value": round(statistics.median(fresh) * 1000, 1), "unit": "ms", "baseline": FRESH_WITHIN_S * 1000, "ratio": None,
         "goal": "≤ 1000 ms", "note": note + f"; p95 {_quantile(fresh, 0.95) * 1000:.1f} ms, max {max(fresh) * 1000:.1f} ms; "
         f"{within} of {len(fresh)} within 1 s; measured from the 201 to the end of the first read listing it "
         "(the origin read comes first)"},
        {"figure": "scale-out: 201 until the cache in front serves the new version, p95",
         "value": round(_quantile(fresh, 0.95) * 1000, 1), "unit": "ms", "baseline": FRESH_WITHIN_S * 1000, "ratio": None,
         "goal": "≤ 1000 ms", "note": f"{len(fresh)} samples (row above)"},
    ]  # fmt: skip


def scaling_rows(measured: dict[str, Any]) -> list[dict[str, Any]]:
    one_a, one_b = measured["one"]
    three: Throughput = measured["three"]
    floor = (one_a.rate + one_b.rate) / 2
    failures = sum(len(run.failures) for run in (one_a, one_b, three))
    shown = "; ".join(f"{run.instances} instance(s): {run.done} in {run.seconds:.1f} s, median latency "
                      f"{statistics.median(run.latencies) * 1000:.0f} ms" for run in (one_a, three, one_b) if run.latencies)  # fmt: skip
    return [
        {"figure": "scale-out: publishes per second, 1 api instance (floor)", "value": round(floor, 2), "unit": "publishes/s",
         "baseline": None, "ratio": None, "goal": "baseline",
         "note": f"{CLIENTS} clients, 2 KB packages, through nginx; mean of the run before and the run after the 3-instance one "
         f"({one_a.rate:.2f} and {one_b.rate:.2f}/s)", "met": None},
        {"figure": "scale-out: publishes per second, 3 api instances", "value": round(three.rate, 2), "unit": "publishes/s",
         "baseline": round(floor, 2), "ratio": round(three.rate / floor, 2), "goal": "≥ 1.5× one instance",
         "note": f"same PostgreSQL, bucket, clients; {shown}; {failures} failed; "
         + scaling_model(one_a, three, os.cpu_count() or 1)},
    ]  # fmt: skip


def share_rows(measured: dict[str, Any], versions: int) -> list[dict[str, Any]]:
    embedded = measured["embedded"]
    rows = [_bucket_share_row(measured["moto"], "bucket", "moto", versions)]
    if isinstance(measured["seaweedfs"], dict):
        rows.append(_bucket_share_row(measured["seaweedfs"], "SeaweedFS bucket", "SeaweedFS", versions))
    else:
        rows.append({"figure": f"scale-out: publish server share on PostgreSQL + SeaweedFS bucket, registry of {versions:,} versions",
                     "value": None, "unit": "ms", "goal": "≤ 50 ms", "note": measured["seaweedfs"]})
    rows.append(
        {"figure": f"scale-out: publish server share embedded (serve), registry of {versions:,} versions",
         "value": round(statistics.median(embedded) * 1000, 1), "unit": "ms", "baseline": VERDACCIO_SERVER_MS,
         "ratio": round(statistics.median(embedded) * 1000 / VERDACCIO_SERVER_MS, 2), "goal": "≤ 50 ms",
         "note": f"median of {len(embedded)}, p90 {_quantile(embedded, 0.9) * 1000:.1f} ms; the same registry before the move "
         "(bench_publish's figure)"})  # fmt: skip
    return rows


def _bucket_share_row(share: dict[str, Any], store: str, server: str, versions: int) -> dict[str, Any]:
    """The server share on PostgreSQL + one S3 implementation (moto keeps the row's old name)."""
    samples = share["samples"]
    median = statistics.median(samples) * 1000
    return {
        "figure": f"scale-out: publish server share on PostgreSQL + {store}, registry of {versions:,} versions",
        "value": round(median, 1), "unit": "ms", "baseline": VERDACCIO_SERVER_MS,
        "ratio": round(median / VERDACCIO_SERVER_MS, 2), "goal": "≤ 50 ms",
        "note": f"the S3 server: {server}; median of {len(samples)}, p90 {_quantile(samples, 0.9) * 1000:.1f} ms; PUT through "
        "nginx to 1 instance until a GET through nginx (from the bucket) lists it; includes the purge sent to Varnish; CPU per "
        f"publish: the api {share['api_cpu_ms']:.1f} ms, {server} {share['s3_cpu_ms']:.1f} ms ({share['keys']:,} keys in its "
        "bucket); the registry moved there by registry-gen migrate; PostgreSQL runs with fsync off (the tests' throwaway "
        f"server); this row's part of the run {share['seconds']:.0f} s (migrate {share['moved']:.0f} s, the first start "
        f"{share['first_start']:.0f} s)",
    }  # fmt: skip


def run(quick: bool, sizes: Sizes | None = None) -> list[dict[str, Any]]:
    sizes = sizes or (QUICK if quick else FULL)
    with parts() as found:
        scaled = measure_scaling(found, sizes)
        rows = consistency_rows(scaled["consistency"]) + scaling_rows(scaled)
        try:
            rows += share_rows(measure_share(found, sizes), sizes.versions)
        except (RuntimeError, OSError) as exc:  # the figures above stand; this one says what broke
            rows.append({"figure": "scale-out: publish server share on PostgreSQL + bucket", "value": None, "unit": "ms",
                         "goal": "≤ 50 ms", "note": f"did not run: {type(exc).__name__}: {exc}"[:1000]})
    return rows
