"""Issue 31, acceptance 1: the README's "A first registry" block, run as written, in an empty
folder, each command on a pseudo-terminal as a person types it (the prompts answered when they
show), with the real npm 11 and a real `registry-gen serve`: no step in between.

The block is read from README.md, so the test and the README cannot drift apart; only the port
(an ephemeral one instead of 4873) and the package's name are substituted."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from registry_gen.settings import load_settings
from tests.hosts.servers import free_port, stop_process, wait_for_port
from tests.support import NPM, Npm, drive_terminal

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[2] / "README.md"
README_PORT = "4873"
PACKAGE = "my-package"
PASSWORD = "first-run-password-1"


def first_registry_commands() -> list[str]:
    """The command lines of the README's "A first registry" block, comments dropped."""
    section = README.read_text(encoding="utf-8").split("\n## A first registry\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "README: no sh block under 'A first registry'"
    lines = [line.split("  #", 1)[0].strip() for line in block.group(1).splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def test_the_readme_block_is_the_five_steps_and_a_login() -> None:
    steps = [" ".join(shlex.split(line)[:2]) for line in first_registry_commands()]
    assert steps == ["registry-gen init", "registry-gen user", "registry-gen serve", "npm login", "npm publish", "npm install"]


def environment(home: Path, registry: str) -> dict[str, str]:
    """registry-gen from this checkout first on the PATH; npm isolated in `home` and told the
    registry only by the README's `--registry` options."""
    env = Npm(home, registry).env
    del env["npm_config_registry"]
    env = {k: v for k, v in env.items() if not k.startswith("REGISTRY_GEN")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def typed(line: str, env: dict[str, str], cwd: Path, answers: list[tuple[str, str]] | None = None) -> str:
    """One README line typed into a terminal; its transcript (it must succeed)."""
    words = shlex.split(line)
    words[0] = NPM if words[0] == "npm" else words[0]
    code, transcript = drive_terminal(words, env, cwd, answers or [], deadline=180)
    assert code == 0, f"{line}:\n{transcript}"
    return transcript


def write_package(folder: Path) -> Path:
    folder.mkdir()
    (folder / "package.json").write_text(json.dumps({"name": PACKAGE, "version": "1.0.0", "main": "index.js"}))
    (folder / "index.js").write_text("module.exports = 'hello from the first registry';\n")
    return folder


def test_the_first_registry_of_the_readme_runs_as_written(tmp_path: Path) -> None:
    port = str(free_port())
    registry = f"http://127.0.0.1:{port}/"
    init, user_add, serve, login, publish, install = (
        line.replace(README_PORT, port).replace("my-package", PACKAGE) for line in first_registry_commands()
    )
    folder = tmp_path / "my-registry"
    folder.mkdir()
    env = environment(tmp_path / "home", registry)

    typed(init, env, folder)
    assert load_settings(folder / "registry.yaml").port == int(port)  # the port serve will listen on
    # getpass writes each prompt's last space once the echo is off (typed-ahead input is flushed).
    typed(user_add, env, folder, [("Password: ", PASSWORD), ("Repeat for confirmation: ", PASSWORD)])
    with open(tmp_path / "serve.log", "w") as log:
        server = subprocess.Popen(shlex.split(serve), cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for_port(int(port), server, deadline=60)
            typed(login, env, write_package(tmp_path / "package"), [("Username:", "alice"), ("Password:", PASSWORD)])
            typed(publish, env, tmp_path / "package")
            project = tmp_path / "project"
            project.mkdir()
            (project / "package.json").write_text(json.dumps({"name": "uses-it", "version": "1.0.0", "private": True}))
            typed(install, env, project)
        finally:
            stop_process(server)
    installed = project / "node_modules" / PACKAGE
    assert json.loads((installed / "package.json").read_text())["version"] == "1.0.0"
    assert "hello from the first registry" in (installed / "index.js").read_text()
    assert json.loads((project / "package.json").read_text())["dependencies"] == {PACKAGE: "^1.0.0"}
    said = (tmp_path / "serve.log").read_text()
    assert "warning:" not in said and "error:" not in said, said  # no dead end on the way, nor a hint of one
    assert f"at {registry}" in said
