"""Groups and accounts on PostgreSQL are one database (issue 27): two `registry-gen api` processes,
each with its own registry.yaml and data folder as on two hosts, share one PostgreSQL; a group set
through one host's configuration decides the other's read answers at once, over real HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from registry_gen.settings import Settings
from tests.hosts.servers import free_port, stop_process, wait_for_api
from tests.registry_api.helpers import add_user, http

pytestmark = pytest.mark.slow

RULES = "packages:\n  'secret-*': {read: [group-a]}\n"


def _env() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if not key.startswith("REGISTRY_")}


@pytest.fixture
def two_hosts(pg_store_settings: Settings, tmp_path: Path) -> Iterator[dict[str, tuple[Path, str]]]:
    """host name -> (its registry.yaml, its API's base URL)."""
    hosts: dict[str, tuple[Path, str]] = {}
    processes = []
    try:
        for name in ("a", "b"):
            root = tmp_path / name
            root.mkdir()
            config = root / "registry.yaml"
            config.write_text(f"data_dir: data\nout_dir: public\ndatabase_url: '{pg_store_settings.database_url}'\nsignup: open\n{RULES}")
            port = free_port()
            process = subprocess.Popen(
                [sys.executable, "-m", "registry_gen", "api", "--config", str(config), "--host", "127.0.0.1", "--port", str(port)],
                cwd=root, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            processes.append(process)
            wait_for_api(port, process)
            hosts[name] = (config, f"http://127.0.0.1:{port}/")
        yield hosts
    finally:
        for process in processes:
            stop_process(process)


def _read_answer(base: str, token: str) -> int:
    """The API's read decision for the path nginx would serve (`auth_request`)."""
    reply = http("GET", f"{base}-/registry-gen/read-access", token=token, headers={"X-Registry-Gen-Path": "/secret-tool"})
    return reply.status


def _groups(config: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "registry_gen", "groups", "alice", "--config", str(config), *args],
                          capture_output=True, text=True, cwd=config.parent, env=_env(), timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_group_set_through_one_host_decides_the_others_reads(two_hosts: dict[str, tuple[Path, str]]) -> None:
    (config_a, base_a), (config_b, base_b) = two_hosts["a"], two_hosts["b"]
    token = add_user(base_a, "alice", "alice-password-1")  # signed up through host a
    assert _read_answer(base_a, token) == _read_answer(base_b, token) == 403  # in no group yet
    assert _groups(config_a, "--add", "group-a") == "alice: group-a\n"
    assert _read_answer(base_b, token) == 200 and _read_answer(base_a, token) == 200
    assert _groups(config_b, "--remove", "group-a") == "alice: (no groups)\n"
    assert _read_answer(base_a, token) == 403 and _read_answer(base_b, token) == 403
    for config in (config_a, config_b):
        assert not list((config.parent / "data").glob("groups.sqlite3*"))  # no local groups store any more
