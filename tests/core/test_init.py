"""`registry-gen init` and the default-URL warning, run as a user runs them: the installed script."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

from registry_gen.settings import load_settings
from tests.core.test_cli_errors import SCRIPT, assert_one_line, run

WARNING = "warning: no base_url configured"


def test_init_writes_a_commented_config_that_loads(tmp_path: Path) -> None:
    proc = run(["init", "site", "--base-url", "https://npm.example.com"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    config = tmp_path / "site" / "registry.yaml"
    text = config.read_text()
    assert text.count("\n#") >= 5  # commented for a person, not a bare dump
    assert yaml.safe_load(text)["base_url"] == "https://npm.example.com/"
    settings = load_settings(config)
    assert settings.base_url == "https://npm.example.com/" and settings.base_url_given
    assert settings.content_dir == tmp_path / "site" / "content"


def test_init_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    (tmp_path / "registry.yaml").write_text("site_title: mine\n")
    assert_one_line(run(["init", "--base-url", "https://a.example/"], tmp_path), 1, "registry.yaml already exists", "--force")
    assert (tmp_path / "registry.yaml").read_text() == "site_title: mine\n"
    assert run(["init", "--base-url", "https://a.example/", "--force"], tmp_path).returncode == 0
    assert "base_url: https://a.example/" in (tmp_path / "registry.yaml").read_text()


def test_init_refuses_a_url_that_is_not_http(tmp_path: Path) -> None:
    assert_one_line(run(["init", "--base-url", "ftp://example.com/"], tmp_path), 1, "--base-url", "http(s)")
    assert not (tmp_path / "registry.yaml").exists()


def test_init_asks_for_the_url_on_a_terminal(tmp_path: Path) -> None:
    controller, terminal = os.openpty()
    try:
        os.write(controller, b"https://registry.example.org\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_GEN")}
        proc = subprocess.run([SCRIPT, "init"], cwd=tmp_path, stdin=terminal, capture_output=True, text=True, env=env, timeout=60)
    finally:
        os.close(controller)
        os.close(terminal)
    assert proc.returncode == 0, proc.stderr
    assert "Public URL" in proc.stdout
    assert load_settings(tmp_path / "registry.yaml").base_url == "https://registry.example.org/"


def test_init_without_a_terminal_leaves_the_url_to_fill_in_and_build_warns(tmp_path: Path) -> None:
    proc = run(["init"], tmp_path)
    assert proc.returncode == 0 and "base_url not set yet" in proc.stdout
    built = run(["build"], tmp_path)  # init made content/
    assert built.returncode == 0, built.stderr
    warnings = [line for line in built.stderr.splitlines() if line.startswith(WARNING)]
    assert len(warnings) == 1 and "http://127.0.0.1:4873/" in warnings[0] and "--base-url" in warnings[0]


def test_build_with_a_configured_url_does_not_warn(tmp_path: Path) -> None:
    (tmp_path / "content").mkdir()
    assert WARNING not in run(["build", "--base-url", "https://npm.example.com/"], tmp_path).stderr
    (tmp_path / "registry.yaml").write_text("base_url: http://127.0.0.1:4873/\n")  # chosen, even if it is the default
    assert WARNING not in run(["build"], tmp_path).stderr


def test_init_makes_the_content_folder_and_a_local_url_gives_the_port(tmp_path: Path) -> None:
    """Issue 31: `init --base-url http://127.0.0.1:5110/` wrote `port: 4873` and no content/, so
    the README's next step, `serve`, stopped at once."""
    proc = run(["init", "--base-url", "http://127.0.0.1:5110/"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    settings = load_settings(tmp_path / "registry.yaml")
    assert (settings.port, settings.host, settings.base_url) == (5110, "127.0.0.1", "http://127.0.0.1:5110/")
    assert settings.content_dir.is_dir() and not any(settings.content_dir.iterdir())
    assert "port: 5110 " in (tmp_path / "registry.yaml").read_text()  # the commented line, edited in place
    assert "user add" in proc.stdout and "serve" in proc.stdout  # the next steps, in order


def test_init_takes_an_ipv6_loopback_address_and_leaves_public_urls_on_the_default_port(tmp_path: Path) -> None:
    assert run(["init", "six", "--base-url", "http://[::1]:5111/"], tmp_path).returncode == 0
    six = load_settings(tmp_path / "six" / "registry.yaml")
    assert (six.host, six.port) == ("::1", 5111)
    assert run(["init", "public", "--base-url", "https://npm.example.com:8443/"], tmp_path).returncode == 0
    public = load_settings(tmp_path / "public" / "registry.yaml")
    assert (public.host, public.port) == ("127.0.0.1", 4873)  # behind a proxy: its port is not serve's
    assert (tmp_path / "public" / "content").is_dir()
