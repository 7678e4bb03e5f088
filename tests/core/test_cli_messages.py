"""Issue 31, "First run": the CLI's warnings and errors a newcomer met, each told in one line that
names what and where. Run as a user runs them: the installed script (a pty where it prompts)."""

from __future__ import annotations

import os
from pathlib import Path

from registry_gen.settings import load_settings
from tests.core.test_cli_errors import SCRIPT, assert_one_line, run
from tests.support import drive_terminal

INIT_THEN_APPENDED = "signing_key: null             # PEM key\nsite_title: Ours\nsigning_key: appended.pem\n"


def test_a_key_set_twice_is_one_warning_naming_both_lines_and_the_last_still_wins(tmp_path: Path) -> None:
    """What `echo 'signing_key: …' >> registry.yaml` (the README's old step) made: still working."""
    (tmp_path / "content").mkdir()
    (tmp_path / "registry.yaml").write_text("base_url: http://127.0.0.1:9/\ngzip: true\n" + INIT_THEN_APPENDED + "gzip: false\n")
    proc = run(["check"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2, proc.stderr
    signing = next(line for line in warnings if "signing_key" in line)
    assert "registry.yaml" in signing and "lines 3 and 5" in signing and "(line 5) is used" in signing
    assert "lines 2 and 6" in next(line for line in warnings if "gzip" in line)
    settings = load_settings(tmp_path / "registry.yaml")
    assert settings.signing_key == tmp_path / "appended.pem" and settings.gzip is False  # as YAML always had it
    assert len(settings.config_warnings) == 2


def test_a_key_set_once_warns_of_nothing(tmp_path: Path) -> None:
    (tmp_path / "content").mkdir()
    (tmp_path / "registry.yaml").write_text("base_url: http://127.0.0.1:9/\nlimits:\n  max_members: 5\npackages:\n  'a/*': {read: authenticated}\n")
    proc = run(["check"], tmp_path)
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr


def test_a_bad_option_value_names_the_option_not_the_config_file(tmp_path: Path) -> None:
    (tmp_path / "content").mkdir()
    (tmp_path / "registry.yaml").write_text("base_url: http://127.0.0.1:9/\n")
    line = assert_one_line(run(["build", "--base-url", "notaurl"], tmp_path), 1, "--base-url", "'notaurl'")
    assert "registry.yaml" not in line
    (tmp_path / "registry.yaml").write_text("base_url: notaurl\n")  # the file's own mistake still names the file
    assert_one_line(run(["build"], tmp_path), 1, "registry.yaml", "base_url must be an absolute http(s) URL")


def test_advisory_add_names_a_missing_file_once_without_errno(tmp_path: Path) -> None:
    (tmp_path / "content").mkdir()
    line = assert_one_line(run(["advisory", "add", "nope.json"], tmp_path), 1, "nope.json", "not found")
    assert "Errno" not in line and line.count("nope.json") == 1
    assert_one_line(run(["advisory", "add", str(tmp_path)], tmp_path), 1, "is a folder")
    (tmp_path / "odd.json").write_text('{"id": "X-1"}')
    line = assert_one_line(run(["advisory", "add", "odd.json"], tmp_path), 1, "odd.json", "neither OSV")
    assert line.count("odd.json") == 1, line
    assert not (tmp_path / "content" / "advisories").exists()


def test_a_prompt_tells_its_mistake_as_every_other_error_line(tmp_path: Path) -> None:
    """typer's own prompt says `Error: The two entered values do not match.`; ours says `error:`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_GEN")}
    # Each prompt's last space comes from getpass once the echo is off (and typed-ahead input flushed).
    answers = [("Password: ", "first-try-1"), ("Repeat for confirmation: ", "second-try-2"),
               ("Password: ", "agreed-pass-3"), ("Repeat for confirmation: ", "agreed-pass-3")]
    code, transcript = drive_terminal([SCRIPT, "user", "add", "alice", "--admin"], env, tmp_path, answers, deadline=60)
    assert code == 0, transcript
    assert "error: the two entered values do not match" in transcript, transcript
    assert "Error:" not in transcript
    assert "created admin alice" in transcript
