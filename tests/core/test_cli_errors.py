"""Operator mistakes on the command line: one `error:` line naming what and where, an exit code,
never a traceback (unless --debug asks for one). Run as a user runs it: the installed script."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from registry_gen import __version__

SCRIPT = str(Path(sys.executable).with_name("registry-gen"))


def run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_GEN")} | env
    return subprocess.run([SCRIPT, *args], cwd=cwd, env=environment, capture_output=True, text=True, timeout=60)


def run_in_bash(session: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_GEN")}
    command = ["bash", "--norc", "--noprofile", "-c", session]
    return subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=60)


def assert_one_line(proc: subprocess.CompletedProcess[str], code: int, *wanted: str) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    for text in wanted:
        assert text in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "content").mkdir()
    return tmp_path


def test_version(folder: Path) -> None:
    proc = run(["--version"], folder)
    assert (proc.returncode, proc.stdout) == (0, f"registry-gen {__version__}\n")


def test_a_port_in_use_names_the_address_and_the_fix(folder: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = run(["serve", "--port", str(port)], folder)
    assert_one_line(proc, 1, f"address 127.0.0.1:{port} is in use", "--port", "PORT=")
    assert not (folder / "public").exists()  # refused before building anything


def test_a_port_out_of_range_is_refused_not_wrapped_around(folder: Path) -> None:
    assert_one_line(run(["serve", "--port", "99999"], folder), 2, "'--port'", "65535", "registry-gen serve --help")
    (folder / "registry.yaml").write_text("port: 99999\n")
    assert_one_line(run(["serve"], folder), 1, "port 99999 is not a port", "--port")


def test_an_address_not_of_this_machine(folder: Path) -> None:
    # 192.0.2.0/24 is TEST-NET-1: never an address of this machine.
    assert_one_line(run(["serve", "--host", "192.0.2.1", "--port", "0"], folder), 1, "192.0.2.1 is not an address of this machine", "--host")


@pytest.mark.parametrize(("text", "command"), [("port: abc\n", "serve"), ("site_title: 42\n", "build")])
def test_wrong_types_in_registry_yaml_give_one_line(folder: Path, text: str, command: str) -> None:
    (folder / "registry.yaml").write_text(text)
    assert_one_line(run([command], folder), 1)
    assert not (folder / "public" / "-" / "web").exists()


def test_unknown_options_give_one_line_pointing_at_help(folder: Path) -> None:
    assert_one_line(run(["build", "--colour", "blue"], folder), 2, "No such option: --colour", "registry-gen build --help")


def test_debug_shows_the_traceback(folder: Path) -> None:
    (folder / "registry.yaml").write_text("site_title: 42\n")
    for proc in (run(["--debug", "build"], folder), run(["build"], folder, REGISTRY_GEN_DEBUG="1")):
        assert proc.returncode != 0 and "Traceback" in proc.stderr, proc.stderr


def test_shell_completion_completes_commands(folder: Path) -> None:
    # As a bash user does it: bash prints the script and loads it, then presses Tab after
    # `registry-gen bu`. typer picks the script's shell from the process tree (shellingham), so
    # the command must run with a bash as its parent: run straight from pytest (under make's sh,
    # an xdist worker, a CI runner) it finds `sh` or nothing and says "Shell ... not supported".
    # `; true` keeps bash from exec'ing the last command in its own place.
    script = shlex.quote(SCRIPT)
    session = (
        f'eval "$({script} --show-completion)"; COMP_WORDS=(registry-gen bu); COMP_CWORD=1; '
        f'_registry_gen_completion {script} bu registry-gen; printf "%s\\n" "${{COMPREPLY[@]}}"; true'
    )
    proc = run_in_bash(session, folder)
    assert (proc.returncode, proc.stdout.split(), proc.stderr) == (0, ["build"], "")
