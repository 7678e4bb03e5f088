"""`registry-gen --help` loads only the command line, never the modules its commands run (issue 15:
start-up is what every command pays). Which modules a fresh interpreter imported is deterministic,
unlike a time, so that is what is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import pytest
import typer

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
# What no help text or listing must load either: typer's pydantic-based converters (~60 ms; typer
# builds them only for values that need one, see registry_gen/cli_coercion.py) and
# importlib.metadata (the plugin entry points are read without it).
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
    assert loaded(modules, HEAVY + LISTING_ONLY) == []


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


# What a no-change build must not load (issue 15, goal 2: start-up <= 0.12 s): typer's pydantic
# converters (values given as text need none), the other commands and the plugins, the worker pool,
# filelock (a free lock is taken with a plain flock), the archive reader, the publish path, semver,
# and the renderers and cryptography (no signing key here): they load when something is to be written.
NO_CHANGE_BUILD_SKIPS = (
    "pydantic",
    "pydantic_core",
    "typer._adapters",
    "importlib.metadata",
    "user_api",
    "registry_gen.commands_watch",
    "registry_gen.commands_init",
    "registry_gen.importers",
    "multiprocessing",
    "concurrent.futures.process",
    "filelock",
    "registry_gen.archive",
    "tarfile",
    "zipfile",
    "registry_gen.publish",
    "semver",
    "registry_gen.markdown",
    "registry_gen.nginx_access",
    "mimetypes",
    "jinja2",
    "cmarkgfm",
    "nh3",
    "cryptography",
    "boto3",
    "waitress",
)


def test_a_build_that_changes_nothing_loads_only_the_state_and_the_scan(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A no-change build needs the command line, the state and the change scan only."""
    from tests.support import make_tarball

    content, out = tmp_path / "content", tmp_path / "public"
    make_tarball(content, "quiet", "1.0.0")
    args = ["build", str(content), "-o", str(out), "--base-url", "http://127.0.0.1:9/"]
    first = modules_loaded_by(args)
    assert "jinja2" in first  # the first build rendered the site
    assert (out / "quiet" / "index.html").is_file()
    again = modules_loaded_by(args)
    assert "registry_gen.build" in again
    assert loaded(again, NO_CHANGE_BUILD_SKIPS) == []


def test_an_entry_point_with_extras_loads_its_object() -> None:
    from registry_gen.plugins import EntryPoint

    assert EntryPoint("joiner", "os.path:join [speedups]", "g").load() is __import__("os").path.join


def converter_outcome(converter: Any, value: Any, param: Any, ctx: Any) -> tuple[str, Any]:
    """What a typer converter makes of `value`: ("value", result) or ("error", the message)."""
    from typer._click.exceptions import BadParameter

    try:
        return "value", converter.coerce(value, param=param, ctx=ctx)
    except BadParameter as exc:
        return "error", exc.format_message()


def test_the_deferred_converters_agree_with_typers_own(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """cli_coercion answers text values of `str` and `Path` parameters without pydantic and hands
    everything else to typer: either way each value converts, or fails with the same message, as
    typer's own converter (built on pydantic) does. Fails first when a typer upgrade changes the contract."""
    from registry_gen.cli_coercion import DeferredParam, deferred_converter, typer_converter

    a_file = tmp_path / "a-file.txt"
    a_file.write_text("x")
    app = typer.Typer()

    @app.command()
    def probe(
        text: str = "",
        where: Path | None = None,
        folder: Annotated[Path, typer.Option(exists=True, file_okay=False)] = Path("."),
        resolved: Annotated[Path, typer.Option(resolve_path=True)] = Path("."),
        count: int = 0,
        names: Annotated[list[str] | None, typer.Option()] = None,
    ) -> None:
        """Never run."""

    command = typer.main.get_command(app)
    ctx = command.make_context("probe", [], resilient_parsing=True)
    values = ["", "x", "a/../b/", "3", str(tmp_path), str(tmp_path / "missing"), str(a_file), None, 3, ["p", "q"]]
    compared = 0
    for param in command.params:
        descriptor = param.type_descriptor
        deferred = deferred_converter(descriptor)
        assert isinstance(deferred, DeferredParam)
        for value in values:
            assert converter_outcome(deferred, value, param, ctx) == converter_outcome(typer_converter(descriptor), value, param, ctx), (param.name, value)
            compared += 1
    assert {"text", "where", "folder", "resolved", "count", "names"} <= {p.name for p in command.params}
    assert compared == len(command.params) * len(values)
    # The cases that matter really were on both sides: a path refused, a path resolved, a number refused.
    folder = next(p for p in command.params if p.name == "folder")
    assert converter_outcome(deferred_converter(folder.type_descriptor), str(a_file), folder, ctx)[0] == "error"
    count = next(p for p in command.params if p.name == "count")
    assert converter_outcome(deferred_converter(count.type_descriptor), "x", count, ctx)[0] == "error"
