"""The command-line reference, read from the `registry-gen` command itself.

The app is built the way the console script builds it (`registry_gen.cli.create_cli`, which loads
every `registry_gen.commands` entry point: the `user_api` commands among them), then turned into
the click command typer runs; each command's help, usage line and each parameter's help record are
exactly what `--help` prints.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from refgen.text import MissingDescription, code, escaped, paragraphs, slug, table

PROGRAM = "registry-gen"


@dataclass(frozen=True)
class Command:
    """One command of the tree: its words (`("user", "add")`), the click command and its context."""

    words: tuple[str, ...]
    command: Any
    context: Any

    @property
    def name(self) -> str:
        return " ".join((PROGRAM, *self.words))

    @property
    def parameters(self) -> list[Any]:
        """Its arguments and options as `--help` lists them (hidden ones and --help left out)."""
        return [p for p in self.command.get_params(self.context) if not getattr(p, "hidden", False) and p.name != "help"]

    @property
    def subcommands(self) -> list[str]:
        return sorted(name for name, sub in getattr(self.command, "commands", {}).items() if not sub.hidden)


def root_command() -> Any:
    """The click command `registry-gen` runs, with every installed plugin's commands."""
    import typer

    from registry_gen.cli import create_cli

    return typer.main.get_command(create_cli(None))


def commands(root: Any | None = None) -> list[Command]:
    """The program itself, then every command, depth first, in name order."""
    root = root if root is not None else root_command()
    return list(_walk(root, root.context_class(root, info_name=PROGRAM), ()))


def _walk(command: Any, context: Any, words: tuple[str, ...]) -> Iterator[Command]:
    here = Command(words, command, context)
    yield here
    for name in here.subcommands:
        sub = command.commands[name]
        yield from _walk(sub, sub.context_class(sub, info_name=name, parent=context), (*words, name))


def missing_descriptions(found: list[Command]) -> list[str]:
    """Commands without a help text, and parameters without one, by their full name."""
    missing = [c.name for c in found if not (c.command.help or "").strip()]
    for command in found:
        missing += [f"{command.name} {'/'.join(p.opts) or p.name}" for p in command.parameters if not (p.help or "").strip()]
    return missing


def heading(command: Command) -> str:
    """`## registry-gen build`; a subcommand one level below its group; the program's own
    options under "Global options"."""
    if not command.words:
        return "## Global options"
    return "#" * (1 + len(command.words)) + " " + command.name


def anchor(command: Command) -> str:
    return slug(heading(command).lstrip("# "))


def overview(found: list[Command]) -> str:
    rows = [
        (f"[{code(c.name)}](#{anchor(c)})", escaped(c.command.get_short_help_str(limit=160)))
        for c in found
        if c.words
    ]
    return table(("Command", "What it does"), rows)


def section(command: Command) -> str:
    """A command's heading, help text, usage line and its table of arguments and options."""
    parts = [heading(command), *paragraphs(command.command.help or "")]
    parts.append("```text\n" + command.command.get_usage(command.context) + "\n```")
    if command.words and command.subcommands:
        links = [f"[{code(command.name + ' ' + name)}](#{slug(command.name + ' ' + name)})" for name in command.subcommands]
        parts.append("Commands: " + ", ".join(links) + ".")
    records = [p.get_help_record(command.context) for p in command.parameters]
    rows = [(code(term), escaped(text or "")) for term, text in filter(None, records)]
    if rows:
        parts.append(table(("Argument or option", "What it does"), rows))
    return "\n\n".join(parts)


def cli_reference() -> str:
    """The generated part of reference/cli.md; MissingDescription when help is missing."""
    found = commands()
    missing = missing_descriptions(found)
    if missing:
        raise MissingDescription("commands or options (add help= to them)", missing)
    return "\n\n".join([overview(found), *(section(c) for c in found)]) + "\n"
