"""What one S3 request costs an S3 server by kind, as its bucket grows: moto against SeaweedFS.

`python -m bench.s3_request_cost [--sizes 200,10000,35000] [--repeat 40]` starts each server the
way the tests do (tests/storage/s3servers.py, real processes on 127.0.0.1), fills one bucket with
2 KB objects laid out as a registry's (`content/NAME/…` folders of 22 objects, tree keys beside
them) and, at each size, times the three requests a publish sends: a LIST of one package's
content folder (the build's sync), a PUT of a 2 KB object and a GET of one. Per request: the
client's wall time (boto3, as the api sends them) and the server's CPU (its process tree, from
/proc). Prints one Markdown table and the load average; asserts nothing. Bench evidence for
bench/PROFILE.md (issue 28, acceptance 2: how much of the server share is the emulator's).
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.bench_scaleout import tree_cpu

BUCKET = "cost"
FOLDER = 22  # objects in a package's content folder (pgpublish's measured publish)
BODY = os.urandom(2048)
FILLERS = 8  # threads filling the bucket


def _key(index: int) -> str:
    """The index-th filler key: content folders of FOLDER objects, and as many tree keys."""
    package, within = divmod(index // 2, FOLDER)
    if index % 2:
        return f"tree/p{package}/{within}/index.html"
    return f"content/p{package}/p{package}-1.0.{within}.tgz"


def fill(s3: Any, endpoint: str, start: int, stop: int) -> None:
    """PUTs keys start..stop-1 to presigned URLs over keep-alive HTTP (SeaweedFS refuses unsigned
    writes), so filling costs the server and a signature, not a whole boto3 call each."""
    host = endpoint.removeprefix("http://")
    failures: list[str] = []

    def worker(indexes: range) -> None:
        connection = http.client.HTTPConnection(host, timeout=60)
        for index in indexes:
            url = s3.generate_presigned_url("put_object", Params={"Bucket": BUCKET, "Key": _key(index)}, ExpiresIn=3600)
            connection.request("PUT", url.removeprefix(endpoint), body=BODY, headers={"Content-Length": str(len(BODY))})
            answer = connection.getresponse()
            answer.read()
            if answer.status != 200:
                failures.append(f"filling {_key(index)}: {answer.status}")
                return
        connection.close()

    threads = [threading.Thread(target=worker, args=(range(start + k, stop, FILLERS),)) for k in range(FILLERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise RuntimeError("; ".join(failures[:3]))


def per_request(server_pid: int, repeat: int, send: Callable[[int], Any]) -> tuple[float, float]:
    """(median client wall ms, server CPU ms per request) over `repeat` requests."""
    walls = []
    cpu_before = tree_cpu(server_pid)
    for index in range(repeat):
        begun = time.perf_counter()
        send(index)
        walls.append((time.perf_counter() - begun) * 1000)
    return statistics.median(walls), (tree_cpu(server_pid) - cpu_before) * 1000 / repeat


def measure(s3: Any, server_pid: int, size: int, repeat: int) -> dict[str, tuple[float, float]]:
    folder = "content/p0/"
    return {
        "LIST one folder": per_request(server_pid, repeat, lambda _: s3.list_objects_v2(Bucket=BUCKET, Prefix=folder)),
        "PUT 2 KB": per_request(server_pid, repeat, lambda i: s3.put_object(Bucket=BUCKET, Key=f"new/{size}/{i}", Body=BODY)),
        "GET 2 KB": per_request(server_pid, repeat, lambda _: s3.get_object(Bucket=BUCKET, Key=_key(0))["Body"].read()),
    }


def run_kind(kind: str, sizes: list[int], repeat: int) -> list[tuple[str, int, str, float, float]]:
    from tests.storage.s3servers import client, make_bucket, s3_credentials, s3_server

    rows = []
    with tempfile.TemporaryDirectory(prefix="s3-cost-") as work, s3_credentials(), s3_server(kind, Path(work)) as server:
        make_bucket(server.endpoint, BUCKET)
        s3, filled = client(server.endpoint), 0
        for size in sizes:
            fill(s3, server.endpoint, filled, size)
            filled = size
            listed = s3.list_objects_v2(Bucket=BUCKET, Prefix="content/p0/")["KeyCount"]
            assert listed == FOLDER, f"{kind}: the folder lists {listed} objects"
            for request, (wall, cpu) in measure(s3, server.process.pid, size, repeat).items():
                rows.append((kind, size, request, wall, cpu))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="200,10000,35000", help="bucket sizes (keys) to measure at, ascending")
    parser.add_argument("--repeat", type=int, default=40, help="requests of each kind at each size")
    parser.add_argument("--kinds", default="moto,seaweedfs", help="S3 servers to measure")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    print(f"load average at start: {os.getloadavg()[0]:.1f}", flush=True)
    print("| server | keys in bucket | request | client wall, median ms | server CPU per request, ms |")
    print("|---|---|---|---|---|")
    for kind in args.kinds.split(","):
        for server, size, request, wall, cpu in run_kind(kind, sizes, args.repeat):
            print(f"| {server} | {size:,} | {request} | {wall:.1f} | {cpu:.1f} |", flush=True)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
