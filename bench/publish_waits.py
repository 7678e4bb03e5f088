"""What a publish waits for on PostgreSQL + a bucket (issue 28, acceptance 2, sharewall): per publish
of a new version, the PostgreSQL statements and waits (a statement sent alone, a pipeline, a read
inside a pipeline), the object-store requests, the api's CPU and the wall time, by thirds of the run
(a package's size grows by one version a publish).

`python bench/publish_waits.py [seaweedfs|moto] [--publishes 15]` starts PostgreSQL and the S3
server as the tests do (real processes on 127.0.0.1), runs one instance in this process (the write
service as `registry-gen api` runs it, `tree_readers: nginx`) and publishes new versions of one
package in a row. Run it with PYTHONPATH naming the checkout to measure (main, then the branch); it
prints the registry_gen it imported, the figures and the load average; asserts nothing.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _count_waits(counts: collections.Counter[str]) -> None:
    """Statements and waits for PostgreSQL, as tests/registry_api/test_publish_cost_postgres counts them."""
    import psycopg

    def alone(original: Any) -> Any:
        def send(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            counts["statements"] += 1
            if self.connection._pipeline is None:
                counts["waits"] += 1
            return original(self, query, *args, **kwargs)

        return send

    for cls, method in ((psycopg.Cursor, "execute"), (psycopg.Cursor, "executemany"), (psycopg.ServerCursor, "execute")):
        setattr(cls, method, alone(getattr(cls, method)))
    pipeline, fetch = psycopg.Connection.pipeline, psycopg.Cursor._fetch_pipeline

    def together(self: Any) -> Any:
        if self._pipeline is None:
            counts["waits"] += 1
        return pipeline(self)

    def fetched(self: Any) -> None:
        if self._execmany_returning is not False and not self.pgresult and self._conn._pipeline:
            counts["waits"] += 1
        fetch(self)

    psycopg.Connection.pipeline = together  # type: ignore[method-assign]
    psycopg.Cursor._fetch_pipeline = fetched  # type: ignore[method-assign]


def measure(kind: str, publishes: int) -> None:
    import registry_gen
    from registry_gen.objectstore import open_object_store
    from registry_gen.refresher import IndexRefresher
    from registry_gen.settings import Settings
    from registry_gen.writes import WriteService
    from tests.registry_api.test_publish_cost_postgres import ALICE, _upload
    from tests.storage.s3servers import make_bucket, s3_credentials, s3_server
    from tests.user_api.pg_server import start_postgres

    print(f"registry_gen from {Path(registry_gen.__file__).parent}; {kind}; load average {os.getloadavg()[0]:.1f}", flush=True)
    postgres = start_postgres()
    try:
        with tempfile.TemporaryDirectory(prefix="publish-waits-") as work, s3_credentials(), s3_server(kind, Path(work) / "s3") as s3:
            make_bucket(s3.endpoint, "registry")
            root = Path(work)
            settings = Settings(
                content_dir=root / "content", out_dir=root / "public", data_dir=root / "data", base_url="http://127.0.0.1:9/",
                database_url=postgres.url(), index_refresh_seconds=3600, storage="s3://registry/registry",
                storage_endpoint_url=s3.endpoint, tree_readers="nginx",
            )  # fmt: skip
            objects = open_object_store(settings)
            assert objects is not None
            objects.start(settings)
            service = WriteService(settings, refresher=IndexRefresher(settings), objects=objects)
            for version in ("0.0.1", "0.0.2"):  # the package known to this instance
                service.publish(_upload(settings, "waits-kit", version), ALICE)
            counts: collections.Counter[str] = collections.Counter()
            for bucket in {id(b): b for b in (objects.content, objects.tree.bucket)}.values():
                bucket.watchers.append(lambda operation, _: counts.update(["object-store requests"]))
            uploads = [_upload(settings, "waits-kit", f"1.0.{k}") for k in range(publishes)]
            _count_waits(counts)
            walls, cpus = [], []
            for upload in uploads:
                begun, cpu = time.perf_counter(), time.process_time()
                service.publish(upload, ALICE)
                walls.append(time.perf_counter() - begun)
                cpus.append(time.process_time() - cpu)
    finally:
        postgres.stop()
    print(", ".join(f"{key} {value / publishes:.1f}" for key, value in sorted(counts.items())) + " per publish")
    third = max(1, publishes // 3)
    for start in range(0, third * 3, third):
        part = slice(start, start + third)
        print(f"versions {start + 3}-{start + third + 2}: api CPU {sum(cpus[part]) * 1000 / third:.1f} ms, "
              f"wall median {sorted(walls[part])[third // 2] * 1000:.1f} ms")  # fmt: skip
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("server", nargs="?", default="seaweedfs", choices=("seaweedfs", "moto"))
    parser.add_argument("--publishes", type=int, default=15, help="publishes measured")
    args = parser.parse_args()
    measure(args.server, args.publishes)


if __name__ == "__main__":
    sys.path.insert(0, os.environ.get("PYTHONPATH", "").split(":")[0] or str(Path(__file__).resolve().parents[1]))
    main()
