"""What one S3 request costs the client process, by client library: boto3 as the api configures it
against obstore (Rust object_store bindings) and the minio client.

`python -m bench.s3_client_cost [--kinds moto,seaweedfs] [--repeat 100] [--rounds 3]` starts each
server the way the tests do (tests/storage/s3servers.py, real processes on 127.0.0.1), fills a
22-object content folder, then for each client times, in interleaved rounds (client A's batch,
then B's, then C's, then again), the requests a publish sends: a 2 KB PUT, a create-only 2 KB PUT
(`If-None-Match: *`, a new key each), a GET of 2 KB, a LIST of the folder, a DELETE. Per request:
the client process's CPU (`time.process_time`: every thread, so obstore's Rust runtime counts),
the server's CPU (its process tree, /proc) and the client's Python calls (a profile hook, one
separate pass). Prints one Markdown table and the load average; asserts nothing. Bench evidence
for bench/PROFILE.md (issue 28, acceptance 2, s3client).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.bench_scaleout import tree_cpu

BUCKET = "cost"
FOLDER = 22
BODY = os.urandom(2048)
REQUESTS = ("PUT 2 KB", "create-only PUT", "GET 2 KB", "LIST 22 objects", "DELETE")


def _boto3(endpoint: str) -> dict[str, Callable[[str], Any]]:
    from registry_gen.storage.s3 import Timeouts, s3_client

    s3 = s3_client(endpoint, Timeouts())
    return {
        "PUT 2 KB": lambda key: s3.put_object(Bucket=BUCKET, Key=key, Body=BODY, ContentType="application/json", CacheControl="max-age=0"),
        "create-only PUT": lambda key: s3.put_object(Bucket=BUCKET, Key=key + ".c", Body=BODY, IfNoneMatch="*"),
        "GET 2 KB": lambda _: s3.get_object(Bucket=BUCKET, Key="content/p/0.tgz")["Body"].read(),
        "LIST 22 objects": lambda _: [o["LastModified"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="content/p/")["Contents"]],
        "DELETE": lambda key: s3.delete_object(Bucket=BUCKET, Key=key),
    }


def _obstore(endpoint: str) -> dict[str, Callable[[str], Any]]:
    import obstore
    from obstore.store import S3Store

    store = S3Store(
        BUCKET, endpoint=endpoint, access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
        secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"], region="us-east-1",
        virtual_hosted_style_request=False, client_options={"allow_http": True, "timeout": "20s", "connect_timeout": "3s"},
        retry_config={"max_retries": 2, "retry_timeout": timedelta_s(30)},
    )  # fmt: skip
    return {
        "PUT 2 KB": lambda key: obstore.put(store, key, BODY, attributes={"Content-Type": "application/json", "Cache-Control": "max-age=0"}),
        "create-only PUT": lambda key: obstore.put(store, key + ".c", BODY, mode="create"),
        "GET 2 KB": lambda _: obstore.get(store, "content/p/0.tgz").bytes(),
        "LIST 22 objects": lambda _: [o["last_modified"] for o in obstore.list(store, "content/p/").collect()],
        "DELETE": lambda key: obstore.delete(store, key),
    }


def timedelta_s(seconds: float) -> Any:
    from datetime import timedelta

    return timedelta(seconds=seconds)


def _minio(endpoint: str) -> dict[str, Callable[[str], Any]]:
    from minio import Minio

    client = Minio(endpoint.removeprefix("http://"), access_key=os.environ["AWS_ACCESS_KEY_ID"],
                   secret_key=os.environ["AWS_SECRET_ACCESS_KEY"], secure=False, region="us-east-1")  # fmt: skip

    def get(_: str) -> bytes:
        response = client.get_object(BUCKET, "content/p/0.tgz")
        try:
            return response.read()
        finally:
            response.close()
            response.release_conn()

    return {
        "PUT 2 KB": lambda key: client.put_object(BUCKET, key, io.BytesIO(BODY), len(BODY), content_type="application/json",
                                                  metadata={"Cache-Control": "max-age=0"}),
        "create-only PUT": lambda key: client.put_object(BUCKET, key + ".c", io.BytesIO(BODY), len(BODY), metadata={"If-None-Match": "*"}),
        "GET 2 KB": get,
        "LIST 22 objects": lambda _: [o.last_modified for o in client.list_objects(BUCKET, prefix="content/p/")],
        "DELETE": lambda key: client.remove_object(BUCKET, key),
    }


CLIENTS = {"boto3": _boto3, "obstore": _obstore, "minio": _minio}


def python_calls(send: Callable[[str], Any], count: int, tag: str) -> float:
    calls = 0

    def hook(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        if event == "call":
            calls += 1

    sys.setprofile(hook)
    try:
        for index in range(count):
            send(f"calls/{tag}/{index}")
    finally:
        sys.setprofile(None)
    return calls / count


def run_kind(kind: str, clients: list[str], repeat: int, rounds: int) -> list[tuple[Any, ...]]:
    from tests.storage.s3servers import client, make_bucket, s3_credentials, s3_server

    with tempfile.TemporaryDirectory(prefix="s3-client-") as work, s3_credentials(), s3_server(kind, Path(work)) as server:
        make_bucket(server.endpoint, BUCKET)
        filler = client(server.endpoint)
        for index in range(FOLDER):
            filler.put_object(Bucket=BUCKET, Key=f"content/p/{index}.tgz", Body=BODY)
        senders = {name: CLIENTS[name](server.endpoint) for name in clients}
        for name, sends in senders.items():  # warm: connections, lazy imports, the endpoint ruleset's cache
            for request in REQUESTS:
                sends[request](f"warm/{name}")
        cpu = {(name, request): [0.0, 0.0] for name in clients for request in REQUESTS}
        for round_ in range(rounds):
            for request in REQUESTS:
                for name in clients:
                    send = senders[name][request]
                    server_before, begun = tree_cpu(server.process.pid), time.process_time()
                    for index in range(repeat):
                        send(f"keys/{name}/{round_}/{index}")
                    cpu[name, request][0] += time.process_time() - begun
                    cpu[name, request][1] += tree_cpu(server.process.pid) - server_before
        calls = {(name, request): python_calls(senders[name][request], 20, f"{name}-{request[:3]}") for name in clients for request in REQUESTS}
    total = repeat * rounds
    return [(kind, request, name, cpu[name, request][0] * 1000 / total, cpu[name, request][1] * 1000 / total, calls[name, request])
            for request in REQUESTS for name in clients]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kinds", default="moto,seaweedfs", help="S3 servers to measure against")
    parser.add_argument("--clients", default="boto3,obstore,minio")
    parser.add_argument("--repeat", type=int, default=100, help="requests of each kind per client per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}", flush=True)
    print("| server | request | client | client CPU per request, ms | server CPU per request, ms | Python calls per request |")
    print("|---|---|---|---|---|---|")
    for kind in args.kinds.split(","):
        for row in run_kind(kind, args.clients.split(","), args.repeat, args.rounds):
            print("| {} | {} | {} | {:.2f} | {:.2f} | {:,.0f} |".format(*row), flush=True)
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
