"""What a publish of a package this instance published before costs on PostgreSQL + moto: the
object-store requests by kind, the api's CPU and moto's CPU per publish (listskip: the build's
sync LIST skipped when the package's folder token is unchanged).

`python bench/listskip_cost.py [--keys 10000] [--publishes 20] [--tree-readers nginx]` starts PostgreSQL and moto as the
tests do (real processes on 127.0.0.1), fills the bucket with `--keys` 2 KB filler objects
(bench.s3_request_cost's layout: moto's LIST scans the whole bucket), runs one instance in this
process (the write service as `registry-gen api` runs it, content and tree in the bucket), and
publishes `--publishes` new versions of one package in a row. The api's CPU is this process's
(os.times: the request thread and the tree-upload threads), moto's its process tree's (/proc).
Run it with PYTHONPATH naming the checkout to measure (main, then the branch); it prints the
registry_gen it imported, one Markdown table and the load average; asserts nothing.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
from pathlib import Path
from typing import Any


def _cpu() -> float:
    times = os.times()
    return times.user + times.system


def _counting_statements() -> list[str]:
    """Every statement psycopg sends from now on (a row of an executemany counts as one call)."""
    import psycopg

    sent: list[str] = []
    for cls, method in ((psycopg.Cursor, "execute"), (psycopg.Cursor, "executemany"), (psycopg.ServerCursor, "execute")):
        original = getattr(cls, method)

        def counted(self: Any, query: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            sent.append(str(query))
            return _original(self, query, *args, **kwargs)

        setattr(cls, method, counted)
    return sent


def measure(keys: int, publishes: int, tree_readers: str = "any") -> dict[str, Any]:
    import registry_gen
    from bench.bench_scaleout import tree_cpu
    from bench.s3_request_cost import BUCKET, fill
    from registry_gen.objectstore import open_object_store
    from registry_gen.refresher import IndexRefresher
    from registry_gen.settings import Settings
    from registry_gen.writes import WriteService
    from tests.registry_api.test_publish_cost_postgres import ALICE, _upload
    from tests.storage.s3servers import client, make_bucket, s3_credentials, s3_server
    from tests.user_api.pg_server import start_postgres

    print(f"registry_gen from {Path(registry_gen.__file__).parent}", flush=True)
    postgres = start_postgres()
    try:
        with tempfile.TemporaryDirectory(prefix="listskip-") as work, s3_credentials(), s3_server("moto", Path(work)) as moto:
            make_bucket(moto.endpoint, BUCKET)
            fill(client(moto.endpoint), moto.endpoint, 0, keys)
            root = Path(work)
            settings = Settings(
                content_dir=root / "content", out_dir=root / "public", data_dir=root / "data", base_url="http://127.0.0.1:9/",
                database_url=postgres.url(), index_refresh_seconds=3600, storage=f"s3://{BUCKET}/registry",
                storage_endpoint_url=moto.endpoint, tree_readers=tree_readers,
            )  # fmt: skip
            objects = open_object_store(settings)
            assert objects is not None
            objects.start(settings)
            service = WriteService(settings, refresher=IndexRefresher(settings), objects=objects)
            for version in ("0.0.1", "0.0.2"):  # the package known to this instance
                service.publish(_upload(settings, "cost-kit", version), ALICE)
            sent: collections.Counter[str] = collections.Counter()
            for bucket in {id(b): b for b in (objects.content, objects.tree.bucket)}.values():
                bucket.watchers.append(lambda operation, _: sent.update([operation]))
            uploads = [_upload(settings, "cost-kit", f"1.0.{k}") for k in range(publishes)]
            statements = _counting_statements()
            api, server = _cpu(), tree_cpu(moto.process.pid)
            for upload in uploads:
                service.publish(upload, ALICE)
            api, server = _cpu() - api, tree_cpu(moto.process.pid) - server
            sent["PostgreSQL statements"] = len(statements)
    finally:
        postgres.stop()
    statements = sent.pop("PostgreSQL statements")
    return {"requests": {op: count / publishes for op, count in sorted(sent.items())}, "statements": statements / publishes,
            "api": api * 1000 / publishes, "moto": server * 1000 / publishes}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=10_000, help="filler objects in the bucket")
    parser.add_argument("--publishes", type=int, default=20, help="publishes measured")
    parser.add_argument("--tree-readers", default="any", choices=("any", "nginx"), help="registry.yaml tree_readers (onekey)")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f}; tree_readers: {args.tree_readers}", flush=True)
    found = measure(args.keys, args.publishes, args.tree_readers)
    requests = ", ".join(f"{op} {count:.2f}" for op, count in found["requests"].items())
    print("| keys in bucket | object-store requests per publish | PostgreSQL statements | api CPU, ms | moto CPU, ms |")
    print("|---|---|---|---|---|")
    print(f"| {args.keys:,} | {sum(found['requests'].values()):.2f} ({requests}) | {found['statements']:.1f} | {found['api']:.1f} | {found['moto']:.1f} |")
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    sys.path.insert(0, os.environ.get("PYTHONPATH", "").split(":")[0] or str(Path(__file__).resolve().parents[1]))
    main()
