from __future__ import annotations

from pathlib import Path

import re

import pytest

from registry_gen.cli import main
from registry_gen.errors import ConfigError
from registry_gen.settings import load_settings
from tests.support import make_tarball


def test_config_file_values_are_relative_to_the_file(tmp_path: Path) -> None:
    config = tmp_path / "conf" / "registry.yaml"
    config.parent.mkdir()
    config.write_text("content_dir: archives\nout_dir: site\nbase_url: https://npm.example.org/reg\n")
    settings = load_settings(config)
    assert settings.content_dir == config.parent / "archives"
    assert settings.out_dir == config.parent / "site"
    assert settings.base_url == "https://npm.example.org/reg/"


def test_overrides_beat_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "registry.yaml"
    config.write_text("out_dir: from-file\n")
    assert load_settings(config, out_dir=tmp_path / "cli").out_dir == tmp_path / "cli"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("colour: blue\n", "unknown key 'colour'"),
        ("limits:\n  max_members: -1\n", "limits.max_members must be a positive integer"),
        ("base_url: ftp://x/\n", "base_url must be an absolute http(s) URL"),
        ("signup: maybe\n", "signup must be one of"),
        ("- a\n- b\n", "top level must be a mapping"),
        ("a: [\n", "not valid YAML"),
        ('strict: "false"\n', "strict must be true or false, got the string 'false'"),
        ("gzip: no-thanks\n", "gzip must be true or false, got the string 'no-thanks'"),
        ("port: http\n", "port must be an integer, got the string 'http'"),
        ("port: true\n", "port must be an integer, got bool True"),
        ("content_dir: 12\n", "content_dir must be a path (string), got int 12"),
        ("site_title: [a, b]\n", "site_title must be a string, got list"),
        ("limits:\n  max_members: many\n", "limits.max_members must be a positive integer, got the string 'many'"),
        ("limits: 5\n", "limits must be a mapping, got int 5"),
    ],
)
def test_bad_config_names_the_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    config = tmp_path / "registry.yaml"
    config.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(message)) as caught:
        load_settings(config)
    assert str(config) in str(caught.value)


def test_missing_explicit_config_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_settings(tmp_path / "nope.yaml")


def test_cli_reports_config_errors_without_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "registry.yaml"
    config.write_text("colour: blue\n")
    assert main(["build", "--config", str(config)]) == 1
    err = capsys.readouterr().err
    assert "unknown key 'colour'" in err and str(config) in err and "Traceback" not in err


def test_cli_build_exits_non_zero_and_counts_what_it_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    content = tmp_path / "content"
    make_tarball(content, "good", "1.0.0")
    (content / "bad.tgz").write_bytes(b"not an archive")
    args = ["build", str(content), "--out", str(tmp_path / "out"), "--base-url", "http://127.0.0.1:1/"]
    assert main(args) == 1  # the good package is still published
    captured = capsys.readouterr()
    assert "1 packages, 1 versions" in captured.out and "1 archives refused" in captured.out
    assert "bad.tgz" in captured.err and "archive-format" in captured.err
    assert (tmp_path / "out" / "good" / "index.html").is_file()
    (content / "bad.tgz").unlink()
    assert main(args) == 0
    assert "0 archives refused" in capsys.readouterr().out


def test_build_strict_adds_the_lint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    content = tmp_path / "content"
    make_tarball(content, "linted", "1.0.0", license="not an spdx expression at all")
    args = ["build", str(content), "--out", str(tmp_path / "out"), "--base-url", "http://127.0.0.1:1/"]
    assert main(args) == 0  # hosted as written
    capsys.readouterr()
    assert main([*args, "--strict"]) == 1
    err = capsys.readouterr().err
    assert "lint: " in err and "license" in err


def test_typed_config_values_are_taken_as_they_are(tmp_path: Path) -> None:
    config = tmp_path / "registry.yaml"
    config.write_text("strict: false\ngzip: no\nport: 5000\ntemplate_dir: null\ndatabase_url: null\n")
    settings = load_settings(config)
    assert (settings.strict, settings.gzip, settings.port, settings.template_dir) == (False, False, 5000, None)


def test_a_wrong_type_is_one_cli_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "registry.yaml"
    config.write_text('strict: "false"\n')
    assert main(["build", "--config", str(config)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "strict must be true or false" in err and "Traceback" not in err
