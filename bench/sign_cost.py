"""The CPU of one read decision for nginx's reads of a private tree bucket (issue 28, obsign): the
read check asked as nginx asks it (`user_api.read_access.signing`, no read rules), answered with the
three presigned paths, signed by obstore (`TreeSigner` now) against boto3's `generate_presigned_url`
(main's TreeSigner before this branch, rebuilt here as the floor it is compared with).

Signing sends no request, so no S3 server runs: the endpoint is a loopback one nginx would read.
`python -m bench.sign_cost [--decisions 2000] [--rounds 5]` times interleaved rounds (boto3's batch,
then obstore's, then again) with `time.process_time` (every thread: obstore's Rust runtime counts)
and counts botocore/boto3 Python calls per decision with a profile hook; prints a Markdown table
and the load average. bench_private_reads reports the same figures as a row of `make bench`.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

ENDPOINT = "http://127.0.0.1:9"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench-secret", "AWS_DEFAULT_REGION": "us-east-1"}
# What nginx sends for a package document: the served path and the document the Accept header picked.
QUESTION = {"HTTP_X_REGISTRY_GEN_PATH": "/@scope/some-package/", "HTTP_X_REGISTRY_GEN_DOCUMENT": "index.html", "REQUEST_METHOD": "GET"}


class Boto3TreeSigner:
    """main's TreeSigner (before obsign): one botocore presign per key."""

    def __init__(self, bucket: str, prefix: str):
        from registry_gen.storage.s3 import Timeouts, s3_client

        self.client = s3_client(ENDPOINT, Timeouts())
        self.bucket, self.prefix = bucket, prefix

    def signed_reads(self, path: str, document: str) -> tuple[str, ...] | None:
        from registry_gen.objectstore import PRESIGN_SECONDS, read_keys

        keys = read_keys(path, document)
        if keys is None:
            return None
        urls = [self.client.generate_presigned_url("get_object", Params={"Bucket": self.bucket, "Key": self.prefix + key}, ExpiresIn=PRESIGN_SECONDS)
                for key in keys]  # fmt: skip
        return tuple(f"{parts.path}?{parts.query}" for parts in map(urlsplit, urls))


@contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)


def decisions() -> dict[str, Callable[[], None]]:
    """The read decision (WSGI, as the API answers nginx) with each signer, by name."""
    from registry_gen.objectstore import TreeSigner
    from registry_gen.storage import S3Location, S3Storage
    from user_api.read_access import allow_all, signing

    with _environment(CREDENTIALS):
        signers: dict[str, Any] = {
            "boto3 (main)": Boto3TreeSigner("registry", "reg/_tree/"),
            "obstore (obsign)": TreeSigner(S3Storage(S3Location("registry", "reg/_tree"), endpoint_url=ENDPOINT)),
        }

    def decide(signer: Any) -> Callable[[], None]:
        app = signing(allow_all, signer)
        answers: list[str] = []

        def start_response(status: str, headers: list[tuple[str, str]], *rest: Any) -> None:
            answers.append(status)
            assert len(headers) == 5, headers  # the three signed paths are there

        def once() -> None:
            list(app(dict(QUESTION), start_response))

        return once

    return {name: decide(signer) for name, signer in signers.items()}


def botocore_calls(decision: Callable[[], None], count: int) -> float:
    """Python calls into botocore and boto3 per decision (this thread; a profile hook)."""
    calls = 0

    def seen(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal calls
        if event == "call" and str(frame.f_globals.get("__name__", "")).partition(".")[0] in ("botocore", "boto3"):
            calls += 1

    gc.collect()  # a finalizer of the other signer's objects run here would count as its call
    sys.setprofile(seen)
    try:
        for _ in range(count):
            decision()
    finally:
        sys.setprofile(None)
    return calls / count


def measure(count: int, rounds: int) -> dict[str, dict[str, Any]]:
    """Per signer: CPU ms per decision in each interleaved round, and botocore calls per decision."""
    chosen = decisions()
    for decision in chosen.values():  # warm: credentials read, botocore's loaders and caches filled
        for _ in range(20):
            decision()
    cpu: dict[str, list[float]] = {name: [] for name in chosen}
    for _ in range(rounds):
        for name, decision in chosen.items():
            started = time.process_time()
            for _ in range(count):
                decision()
            cpu[name].append((time.process_time() - started) * 1000 / count)
    return {name: {"cpu_ms": cpu[name], "median_ms": statistics.median(cpu[name]), "botocore_calls": botocore_calls(chosen[name], 50)}
            for name in chosen}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    figures = measure(args.decisions, args.rounds)
    print(f"{args.rounds} interleaved rounds of {args.decisions} decisions; load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end\n")
    print("| signer | CPU ms per read decision, by round | median | botocore/boto3 Python calls per decision |")
    print("|---|---|---|---|")
    for name, figure in figures.items():
        rounds = "; ".join(f"{value:.3f}" for value in figure["cpu_ms"])
        print(f"| {name} | {rounds} | {figure['median_ms']:.3f} | {figure['botocore_calls']:.0f} |")


if __name__ == "__main__":
    main()
