"""`registry-gen --help` loads only the command line, never the modules its commands run (issue 15:
start-up is what every command pays). Which modules a fresh interpreter imported is deterministic,
unlike a time, so that is what is asserted."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from registry_gen.cli import invoked_name, main
from registry_gen.plugins import entry_points

# What `--help` must not load: the build and what it renders with, the servers, the cloud SDK, the
# user store's SQL drivers, and the formatters only a running command needs.
HEAVY = (
    "registry_gen.build",
    "registry_gen.site",
    "registry_gen.markdown",
    "registry_gen.signing",
    "registry_gen.publish",
    "registry_gen.watch",
    "registry_gen.deploy",
    "user_api.store",
    "user_api.server",
    "boto3",
    "botocore",
    "jinja2",
    "cmarkgfm",
    "nh3",
    "waitress",
    "bottle",
    "cryptography",
    "yaml",
    "rich",
)
# What the plain listing (`registry-gen --help`, bare `registry-gen`) must not load either: once a
# command's parameters are parsed, typer's pydantic-based coercion imports these (~60 ms), but the
# list of commands parses none (the plugin entry points are read without importlib.metadata).
LISTING_ONLY = ("email", "importlib.metadata", "pydantic")
PROBE = "import json, sys\nfrom registry_gen.cli import main\nmain({args!r})\nprint(json.dumps(sorted(sys.modules)))"


def modules_loaded_by(args: list[str]) -> set[str]:
    proc = subprocess.run([sys.executable, "-c", PROBE.format(args=args)], capture_output=True, text=True, timeout=120, check=True)
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


def loaded(modules: set[str], unwanted: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == heavy or m.startswith(heavy + ".") for heavy in unwanted))


@pytest.mark.parametrize("args", [["build", "--help"], ["serve", "--help"], ["user", "--help"], ["--version"]])
def test_help_imports_no_command_machinery(args: list[str]) -> None:
    modules = modules_loaded_by(args)
    assert "typer" in modules  # the probe really ran the CLI
    assert loaded(modules, HEAVY) == []


@pytest.mark.parametrize("args", [["--help"], []])
def test_the_command_list_imports_only_the_command_line(args: list[str]) -> None:
    modules = modules_loaded_by(args)
    assert "registry_gen.cli" in modules
    assert loaded(modules, HEAVY + LISTING_ONLY) == []


def test_help_lists_every_command_plugins_included(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    listed = capsys.readouterr().out
    for command in ("build", "check", "watch", "verify", "deploy", "import", "keys", "serve", "user", "owner", "groups"):
        assert f"\n  {command} " in listed


def test_a_command_named_gets_its_real_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--debug", "build", "--help"]) == 0
    assert "--prune" in capsys.readouterr().out


def test_a_mistyped_command_still_gets_a_hint(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["biuld"]) == 2
    assert "Did you mean 'build'?" in capsys.readouterr().err


def test_invoked_name_skips_global_options() -> None:
    assert invoked_name(["--debug", "build", "x"]) == "build"
    assert invoked_name(["--help", "build"]) is None
    assert invoked_name([]) is None


def test_entry_points_match_importlib_metadata() -> None:
    from importlib.metadata import entry_points as reference

    for group in ("registry_gen.commands", "registry_gen.account_importers", "console_scripts"):
        ours = sorted((e.name, e.value) for e in entry_points(group))
        assert ours == sorted((e.name, e.value) for e in reference(group=group))
        if group == "registry_gen.commands":
            assert ("user_api", "user_api.cli:register") in ours


def test_entry_points_first_distribution_on_the_path_wins(tmp_path) -> None:  # type: ignore[no-untyped-def]
    for folder, target in (("first", "one:register"), ("second", "two:register")):
        meta = tmp_path / folder / "Some_Plugin-1.0.dist-info"
        meta.mkdir(parents=True)
        (meta / "entry_points.txt").write_text(f"[registry_gen.commands]\nPlug = {target}\n")
    found = entry_points("registry_gen.commands", [str(tmp_path / "first"), str(tmp_path / "second")])
    assert [(e.name, e.value) for e in found] == [("Plug", "one:register")]


def test_a_build_that_changes_nothing_loads_no_renderer_and_no_crypto(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A no-change build needs the state and the change scan only: jinja2, the Markdown renderers
    and cryptography (no signing key here) load when something is to be written."""
    from tests.support import make_tarball

    content, out = tmp_path / "content", tmp_path / "public"
    make_tarball(content, "quiet", "1.0.0")
    args = ["build", str(content), "-o", str(out), "--base-url", "http://127.0.0.1:9/"]
    first = modules_loaded_by(args)
    assert "jinja2" in first  # the first build rendered the site
    assert (out / "quiet" / "index.html").is_file()
    again = modules_loaded_by(args)
    assert "registry_gen.build" in again
    assert loaded(again, ("jinja2", "cmarkgfm", "nh3", "cryptography", "boto3", "waitress")) == []


def test_an_entry_point_with_extras_loads_its_object() -> None:
    from registry_gen.plugins import EntryPoint

    assert EntryPoint("joiner", "os.path:join [speedups]", "g").load() is __import__("os").path.join
