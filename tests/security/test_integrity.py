"""dist.integrity: every SRI entry verified, unknown forms refused, no digest refused (issue 13, Low).

Against a real `registry-gen serve`: the attack is a publish whose declared digests do not
describe the bytes, which a client would later trust."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator

import pytest

from tests.registry_api.helpers import RegistryProcess, add_user, http, publish_body, tarball

pytestmark = pytest.mark.slow
DATA = tarball("sri-pkg", "1.0.0")
OTHER = tarball("sri-pkg", "9.9.9")


def _sri(algorithm: str, data: bytes) -> str:
    return f"{algorithm}-" + base64.b64encode(hashlib.new(algorithm, data).digest()).decode()


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RegistryProcess, str]]:
    process = RegistryProcess(tmp_path_factory.mktemp("sri")).start()
    try:
        yield process, add_user(process.base, "sri-user", "sri-user-password")
    finally:
        process.stop()


def _publish(registry: tuple[RegistryProcess, str], dist: dict[str, str]) -> tuple[int, bytes]:
    process, token = registry
    body = publish_body("sri-pkg", "1.0.0", DATA)
    body["versions"]["1.0.0"]["dist"] = {"tarball": "http://example.invalid/x.tgz", **dist}
    reply = http("PUT", process.base + "sri-pkg", token=token, body=body)
    return reply.status, reply.body


@pytest.mark.parametrize("dist", [
    {"integrity": f"{_sri('sha512', DATA)} {_sri('sha256', OTHER)}"},  # a second, lying hash
    {"integrity": _sri("sha384", OTHER)},  # only a non-sha512 hash, and it lies
    {"integrity": "md5-AAAAAAAAAAAAAAAAAAAAAA=="},  # an algorithm nobody checks
    {"integrity": "sha512 not-sri"},
    {},  # no digest at all
])
def test_publishes_with_unverifiable_digests_are_refused(registry: tuple[RegistryProcess, str], dist: dict[str, str]) -> None:
    status, body = _publish(registry, dist)
    assert status == 400, body
    assert registry[0].packument("sri-pkg") is None


def test_every_matching_hash_is_accepted(registry: tuple[RegistryProcess, str]) -> None:
    status, body = _publish(registry, {"integrity": f"{_sri('sha512', DATA)} {_sri('sha256', DATA)} {_sri('sha1', DATA)}"})
    assert status == 201, body
