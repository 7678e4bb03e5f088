"""Issue 31, "First run": `registry-gen keys generate` sets the key in the registry.yaml it found,
on the `signing_key:` line `init` wrote, instead of the README's `echo … >>` (a second key line that
silently won). The installed script, and a pty where it asks."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from registry_gen.keyring import load_signer
from registry_gen.settings import load_settings, with_top_level_value
from tests.core.test_cli_errors import SCRIPT, assert_one_line, run
from tests.support import drive_terminal


@pytest.fixture
def initialised(tmp_path: Path) -> Path:
    assert run(["init", "--base-url", "https://npm.example.com/"], tmp_path).returncode == 0
    return tmp_path


def changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    old, new = before.splitlines(), after.splitlines()
    assert len(old) == len(new), "lines were added or removed"
    return [(a, b) for a, b in zip(old, new) if a != b]


def test_set_config_edits_the_one_signing_key_line_in_place(initialised: Path) -> None:
    config = initialised / "registry.yaml"
    os.chmod(config, 0o600)  # it may hold a database password: the edit keeps the mode
    before = config.read_text()
    proc = run(["keys", "generate", "--out", "keys/signing.pem", "--set-config"], initialised)
    assert proc.returncode == 0, proc.stderr
    [(old, new)] = changed_lines(before, config.read_text())
    assert old.startswith("signing_key: null ") and new.startswith("signing_key: keys/signing.pem ")
    assert new.index("#") == old.index("#") and new.split("#", 1)[1] == old.split("#", 1)[1]  # the comment kept
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert [p.name for p in initialised.iterdir() if p.name.startswith(".registry.yaml")] == []  # no temp left
    settings = load_settings(config)
    assert settings.signing_key == initialised / "keys" / "signing.pem" and settings.config_warnings == ()
    assert load_signer(settings) is not None
    assert "line 16" in proc.stdout


def test_set_config_removes_the_line_the_old_readme_appended(initialised: Path) -> None:
    config = initialised / "registry.yaml"
    with open(config, "a") as appended:
        appended.write("signing_key: /etc/old-key.pem\n")
    proc = run(["keys", "generate", "--out", "new.pem", "--set-config"], initialised)
    assert proc.returncode == 0, proc.stderr
    assert "warning:" in proc.stderr and "signing_key" in proc.stderr  # said while it was still there
    [line] = [line for line in config.read_text().splitlines() if line.startswith("signing_key:")]
    assert line.startswith("signing_key: new.pem ") and "#" in line  # init's line, its comment kept
    assert load_settings(config).signing_key == initialised / "new.pem"
    assert run(["check"], initialised).stderr.count("warning:") == 0


def test_without_a_terminal_nor_flag_the_config_is_left_alone_and_the_way_is_said(initialised: Path) -> None:
    before = (initialised / "registry.yaml").read_text()
    proc = run(["keys", "generate", "--out", "k.pem"], initialised)
    assert proc.returncode == 0 and (initialised / "k.pem").is_file()
    assert (initialised / "registry.yaml").read_text() == before
    assert "--set-config" in proc.stdout and "signing_key" in proc.stdout


@pytest.mark.parametrize(("answer", "is_set"), [("y", True), ("n", False)])
def test_on_a_terminal_it_asks(initialised: Path, answer: str, is_set: bool) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_GEN")}
    code, transcript = drive_terminal(
        [SCRIPT, "keys", "generate", "--out", "asked.pem"], env, initialised, [("Set signing_key in", answer)], deadline=60
    )
    assert code == 0, transcript
    assert (load_settings(initialised / "registry.yaml").signing_key == initialised / "asked.pem") is is_set


def test_set_config_without_a_config_file_writes_no_key(tmp_path: Path) -> None:
    assert_one_line(run(["keys", "generate", "--out", "k.pem", "--set-config"], tmp_path), 1, "--set-config", "registry.yaml")
    assert not (tmp_path / "k.pem").exists()


def test_the_value_goes_where_the_key_is_or_at_the_end() -> None:
    assert with_top_level_value("a: 1\n", "signing_key", "k.pem") == ("a: 1\nsigning_key: k.pem\n", "added signing_key at its end")
    block = "signing_key:\n  /old/key.pem\nport: 5\n"  # a value on the next, indented line
    assert with_top_level_value(block, "signing_key", "k.pem")[0] == "signing_key: k.pem\nport: 5\n"
    nested = "limits:\n  signing_key: no\nsigning_key: null  # here\n"
    assert with_top_level_value(nested, "signing_key", '"a b: c"')[0] == 'limits:\n  signing_key: no\nsigning_key: "a b: c" # here\n'
