"""Issue 31, "First run": `registry-gen serve` as a newcomer meets it, the installed script in a
real process. An empty folder starts an empty registry; a missing content folder beside a tree
is refused before anything is written; the greeting names the address really listened on, and a
base_url on this machine with another port is one `warning:` line."""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.core.test_cli_errors import SCRIPT, assert_one_line, run
from tests.hosts.servers import free_port, stop_process, wait_for_port
from tests.registry_api.helpers import snapshot
from tests.support import make_tarball

DEADLINE = 60.0


@contextmanager
def serving(folder: Path, *args: str) -> Iterator[tuple[subprocess.Popen[str], Path, Path]]:
    """`registry-gen serve ARGS` in `folder`; yields the process and its stdout and stderr files."""
    out, err = folder.parent / f"{folder.name}.out", folder.parent / f"{folder.name}.err"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_GEN")} | {"PYTHONUNBUFFERED": "1"}
        process = subprocess.Popen([SCRIPT, "serve", *args], cwd=folder, stdout=stdout, stderr=stderr, text=True, env=env)
        try:
            yield process, out, err
        finally:
            stop_process(process)


def greeted(process: subprocess.Popen[str], out: Path) -> list[str]:
    """serve's stdout once it greeted (its last greeting line names the `npm … --registry` to try)."""
    end = time.monotonic() + DEADLINE
    while time.monotonic() < end:
        lines = out.read_text().splitlines()
        if any(line.startswith("  npm login") or line.startswith("  npm adduser") for line in lines):
            return lines
        assert process.poll() is None, out.read_text()
        time.sleep(0.05)
    raise AssertionError(f"serve did not greet within {DEADLINE}s:\n{out.read_text()}")


def test_serve_in_an_empty_folder_starts_an_empty_registry(tmp_path: Path) -> None:
    folder = tmp_path / "empty"
    folder.mkdir()
    port = free_port()
    with serving(folder, "--port", str(port)) as (process, out, err):
        wait_for_port(port, process, DEADLINE)
        lines = greeted(process, out)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ping", timeout=30) as reply:
            assert reply.status == 200
    said = [line for line in lines if "new registry" in line]
    assert len(said) == 1 and "content" in said[0], lines
    assert (folder / "content").is_dir() and (folder / "public" / "-" / "web").is_dir()
    assert "error" not in err.read_text()


def test_a_missing_content_folder_beside_a_tree_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    make_tarball(tmp_path / "content", "kept", "1.0.0")
    assert run(["build", "--base-url", "http://127.0.0.1:9/"], tmp_path).returncode == 0
    (tmp_path / "content").rename(tmp_path / "elsewhere")
    before = snapshot(tmp_path)
    proc = run(["serve", "--port", str(free_port())], tmp_path)
    assert_one_line(proc, 1, "content folder content does not exist", "the tree public does", "nothing was changed")
    assert snapshot(tmp_path) == before  # not a file written, nor a folder made
    assert not (tmp_path / "content").exists()


def test_a_failed_serve_leaves_no_empty_tree_behind(tmp_path: Path) -> None:
    (tmp_path / "content").write_text("a file where the folder should be\n")
    assert_one_line(run(["serve", "--port", str(free_port())], tmp_path), 1, "content", "not a folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["content"]  # no public/, no lock file


def test_serve_names_the_port_it_listens_on_and_warns_of_a_local_url_on_another(tmp_path: Path) -> None:
    configured, listened = free_port(), free_port()
    (tmp_path / "content").mkdir()
    (tmp_path / "registry.yaml").write_text(f"base_url: http://127.0.0.1:{configured}/\n")
    with serving(tmp_path, "--port", str(listened)) as (process, out, err):
        wait_for_port(listened, process, DEADLINE)
        lines = greeted(process, out)
    serving_line = next(line for line in lines if line.startswith("registry-gen: serving"))
    assert serving_line.endswith(f"at http://127.0.0.1:{listened}/"), lines
    assert any(line.startswith("listening on") and f":{listened}/" in line for line in lines)
    assert any(f"public URL http://127.0.0.1:{configured}/" in line for line in lines)
    tried = [line for line in lines if "--registry" in line]
    assert tried and all(f"http://127.0.0.1:{listened}/" in line for line in tried), lines
    warnings = [line for line in err.read_text().splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, warnings
    assert f"port {configured}" in warnings[0] and f"listens on {listened}" in warnings[0] and "--port" in warnings[0]


def test_a_public_base_url_on_another_port_is_not_warned_about(tmp_path: Path) -> None:
    """Behind nginx, base_url names the proxy: its port differs from serve's on purpose."""
    port = free_port()
    (tmp_path / "content").mkdir()
    (tmp_path / "registry.yaml").write_text("base_url: https://npm.example.com/\n")
    with serving(tmp_path, "--port", str(port)) as (process, out, err):
        wait_for_port(port, process, DEADLINE)
        lines = greeted(process, out)
    assert any(line.endswith(f"at http://127.0.0.1:{port}/") for line in lines)
    assert any("public URL https://npm.example.com/" in line for line in lines)
    assert "warning:" not in err.read_text()
