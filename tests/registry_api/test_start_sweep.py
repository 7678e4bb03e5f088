"""A crash mid-write leaves a named temp file (REGISTRY_GEN_FAILPOINT=before-rename): it lies in its
root's temp folder, the next start removes it, and it is never served nor counted as content."""

from __future__ import annotations

import os
import urllib.error
from pathlib import Path

import pytest

from registry_gen.writer import TEMP_FOLDER
from tests.registry_api.helpers import RegistryProcess, add_user, http, publish_body, tarball
from tests.support import free_port, make_tarball

ROOTS = ("content", "public", "public.state")
KILL = {"REGISTRY_GEN_FAILPOINT": "before-rename:kill"}


def _temp_files(root: Path) -> dict[str, list[str]]:
    """Every temp-looking file under the registry's roots, by the folder it is in."""
    found: dict[str, list[str]] = {}
    for name in ROOTS:
        for folder, _dirs, files in os.walk(root / name):
            temps = sorted(f for f in files if f.endswith(".tmp"))
            if temps:
                found[os.path.relpath(folder, root)] = temps
    return found


def _publish(server: RegistryProcess, token: str, version: str) -> int:
    return http("PUT", server.base + "crashed", token=token, body=publish_body("crashed", version, tarball("crashed", version))).status


def _registry(root: Path, port: int) -> str:
    """A registry with crashed@1.0.0 whose roots (content/, the tree, the state) all exist; a token."""
    first = RegistryProcess(root, port=port).start()
    try:
        token = add_user(first.base, "alice", "alice-password-1")
        assert _publish(first, token, "1.0.0") == 201
    finally:
        first.stop()
    return token


def _left_in_temp_folders(root: Path) -> dict[str, list[str]]:
    left = _temp_files(root)
    assert left and set(left) <= {os.path.join(name, TEMP_FOLDER) for name in ROOTS}, left
    return left


def test_a_write_killed_before_its_rename_leaves_a_temp_file_the_next_start_removes(tmp_path: Path) -> None:
    root, port = tmp_path / "registry", free_port()  # one address: the tree is built for the same URL at each start
    token = _registry(root, port)
    killed = RegistryProcess(root, env=KILL, port=port).start()  # its start marks the tree's and the state's temp folders
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        _publish(killed, token, "1.0.1")  # the meta's replacement, killed before its rename
    assert killed.process is not None and killed.process.wait(timeout=60) == -9
    assert _left_in_temp_folders(root) == {os.path.join("content", TEMP_FOLDER): [_only(root / "content" / TEMP_FOLDER)]}
    restarted = RegistryProcess(root, port=port).start()
    try:
        assert _temp_files(root) == {}
        assert any("removed 1 temp file(s) left by an interrupted write" in line for line in restarted.output)
        listed = http("GET", restarted.base + "-/all").json
        assert "crashed" in listed and not [key for key in listed if key.startswith(".")]  # never counted as content
        assert _publish(restarted, token, "1.0.1") == 201  # the write the crash lost, written again
    finally:
        restarted.stop()


def test_a_start_build_killed_before_a_rename_leaves_a_temp_file_never_served(tmp_path: Path) -> None:
    root, port = tmp_path / "registry", free_port()
    _registry(root, port)
    make_tarball(root / "content" / "crashed", "crashed", "1.0.1")  # dropped in: the next start's build rewrites the document
    with pytest.raises(AssertionError, match="did not start"):
        RegistryProcess(root, env=KILL, port=port).start()
    left = _left_in_temp_folders(root)
    assert os.path.join("public", TEMP_FOLDER) in left
    restarted = RegistryProcess(root, port=port).start()
    try:
        assert _temp_files(root) == {}
        for name in left[os.path.join("public", TEMP_FOLDER)]:
            assert http("GET", f"{restarted.base}{TEMP_FOLDER}/{name}").status == 404
        assert sorted(http("GET", restarted.base + "crashed").json["versions"]) == ["1.0.0", "1.0.1"]
    finally:
        restarted.stop()


def _only(folder: Path) -> str:
    (entry,) = os.listdir(folder)
    return entry
