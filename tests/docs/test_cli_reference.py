"""The command-line reference has an entry for every command and option `registry-gen` offers
(the user_api commands included), and a command or option without help text stops it."""

from __future__ import annotations

import re
from typing import Annotated, Any

import pytest
import typer

from refgen import cli_reference as reference
from refgen.text import MissingDescription
from registry_gen.cli import create_cli


def every_command() -> list[tuple[str, Any, Any]]:
    """(full name, click command, context) of the app the console script runs, walked here
    independently of the generator."""
    root = typer.main.get_command(create_cli(None))
    found, stack = [], [("registry-gen", root, root.context_class(root, info_name="registry-gen"))]
    while stack:
        name, command, context = stack.pop()
        found.append((name, command, context))
        for word, sub in getattr(command, "commands", {}).items():
            stack.append((f"{name} {word}", sub, sub.context_class(sub, info_name=word, parent=context)))
    return found


def section_of(page: str, name: str) -> str:
    """The text under a command's heading, up to the next heading."""
    if name == "registry-gen":
        heading = re.search(r"^## Global options$", page, re.MULTILINE)
    else:
        heading = re.search(rf"^#+ {re.escape(name)}$", page, re.MULTILINE)
    assert heading is not None, f"no heading for {name}"
    following = re.search(r"^#", page[heading.end() :], re.MULTILINE)
    return page[heading.end() : heading.end() + following.start() if following else len(page)]


def plain(markdown: str) -> str:
    return " ".join(re.sub(r"\\(.)", r"\1", markdown).split())


def test_every_command_and_option_has_an_entry_with_its_help() -> None:
    page = reference.cli_reference()
    commands = every_command()
    names = {name for name, _, _ in commands}
    # The entry points loaded: the user_api commands are there, and so are the core's.
    assert {"registry-gen user tokens revoke", "registry-gen api", "registry-gen owner claim", "registry-gen build"} <= names
    assert len(names) > 35
    for name, command, context in commands:
        section = plain(section_of(page, name))
        assert plain(" ".join(command.help.split())) in section, name
        for param in command.get_params(context):
            if param.hidden or param.name == "help":
                continue
            if param.param_type_name == "argument":  # shown by its metavar, or its name
                assert (param.metavar or param.name).lower() in section.lower(), f"{name}: {param.name}"
            else:
                for opt in (*param.opts, *param.secondary_opts):
                    assert opt in section, f"{name}: {opt}"
            assert plain(param.help) in section, f"{name}: {param.name}"


def test_the_overview_links_every_command_to_its_section() -> None:
    page = reference.cli_reference()
    overview = page[: page.index("\n## ")]  # the table above the first section (groups link their own too)
    for name, _, _ in every_command():
        if name != "registry-gen":
            assert f"[`{name}`](#{name.replace(' ', '-')})" in overview, name


def stub_app() -> typer.Typer:
    app = typer.Typer()

    @app.command("described")
    def described(flag: Annotated[bool, typer.Option("--flag", help="Said.")] = False) -> None:
        """A command with help."""

    @app.command("bare")
    def bare(silent: Annotated[str, typer.Option("--silent")] = "") -> None:
        pass

    return app


def test_a_command_or_option_without_help_stops_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reference, "root_command", lambda: typer.main.get_command(stub_app()))
    with pytest.raises(MissingDescription) as raised:
        reference.cli_reference()
    assert set(raised.value.names) == {"registry-gen", "registry-gen bare", "registry-gen bare --silent"}
