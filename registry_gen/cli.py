"""The `registry-gen` command line: thin typer commands over the core.

Other distributions (the bundled `user_api` among them) add commands through the entry-point
group `registry_gen.commands`, so this package never imports them.
"""

from __future__ import annotations

import gc
import inspect
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.models import CommandInfo

from registry_gen import __version__
from registry_gen import cli_coercion
from registry_gen.cli_options import ConfigOption
from registry_gen.errors import RegistryError
from registry_gen.settings import Settings, default_base_url_warning, load_settings

if TYPE_CHECKING:
    from registry_gen.build.results import BuildResult

log = logging.getLogger(__name__)
PLUGIN_GROUP = "registry_gen.commands"
DEBUG_ENV = "REGISTRY_GEN_DEBUG"
COMPLETION_ENV = "_REGISTRY_GEN_COMPLETE"  # click's variable for prog_name registry-gen
CORE_COMMANDS = ("build", "check")  # the commands this module defines itself

ContentArg = Annotated[Path | None, typer.Argument(help="Folder of archives (default from config, else ./content).")]
OutOption = Annotated[Path | None, typer.Option("--out", "-o", help="Output folder (default from config, else ./public).")]
BaseUrlOption = Annotated[str | None, typer.Option("--base-url", help="Public URL the tree is served at.")]


def settings_from_options(config: Path | None = None, **overrides: Any) -> Settings:
    """The settings a command runs with; what is odd in the config file (a key set twice) is said
    on stderr, once, by every command that reads it."""
    settings = load_settings(config, **overrides)
    for warning in settings.config_warnings:
        typer.echo(warning, err=True)
    return settings


def _progress_reporter() -> tuple[Callable[[str, int, int], None] | None, Callable[[], None]]:
    """A rich progress bar when stderr is a terminal; nothing otherwise (logs and CI stay clean)."""
    if not sys.stderr.isatty():
        return None, lambda: None
    from rich.progress import Progress

    bar = Progress(transient=True)
    tasks: dict[str, Any] = {}
    bar.start()

    def report(phase: str, done: int, total: int) -> None:
        if total < 50:
            return
        if phase not in tasks:
            tasks[phase] = bar.add_task({"read": "Reading archives", "write": "Writing packages"}.get(phase, phase), total=total)
        bar.update(tasks[phase], completed=done)

    return report, bar.stop


def build_command(
    content_dir: ContentArg = None,
    out: OutOption = None,
    base_url: BaseUrlOption = None,
    strict: Annotated[
        bool | None, typer.Option("--strict/--no-strict", help="Also lint content/ as `check --strict` does; exit 1 on warnings.")
    ] = None,
    prune: Annotated[
        bool, typer.Option("--prune", help="Allow a build that removes most of the tree's packages (content/ really lost them).")
    ] = False,
    full: Annotated[bool, typer.Option("--full", help="Write every package again (re-signs everything after a key rotation).")] = False,
    config: ConfigOption = None,
) -> None:
    """Build the static registry tree from a folder of archives (incremental).

    Exits 1 when any archive was refused, any version is in conflict or a registry-meta.json is
    invalid (the rest of the tree is still built); see docs/reference/commands.md, "Exit codes"."""
    from registry_gen.build import run_build

    settings = settings_from_options(
        config, content_dir=content_dir, out_dir=out, base_url=base_url, strict=strict, prune=prune or None
    )
    warning = default_base_url_warning(settings)
    if warning:
        typer.echo(warning, err=True)
    report, stop = _progress_reporter()
    try:
        result = run_build(settings, progress=report, full=full)
    finally:
        stop()
    for issue in result.errors:
        typer.echo(f"error: {issue}", err=True)
    typer.echo(f"built {settings.out_dir}: {result.summary()}")
    _purge_caches(settings, result)
    if settings.strict and _lint_fails(settings):
        raise typer.Exit(1)
    if result.errors:
        raise typer.Exit(1)


def _purge_caches(settings: Settings, result: BuildResult) -> None:
    """With `purge:`, the caches in front learn what this build changed, as after an api's write:
    a build is done when the cache serves it (docs/deploying/caches.md). A failed purge is a
    warning (the tree is built), kept owed in the state's ledger."""
    from registry_gen.purge import purger_for

    purger = purger_for(settings)
    if purger is None:
        return
    named, total = list(result.written), getattr(result.written, "total", len(result.written))
    if total > len(named):
        typer.echo(
            f"warning: this build changed {total:,} files, more than a purge names: purge the whole cache in front, "
            "or it serves the old files until their shared lifetime (purge: shared_max_age) ends", err=True,
        )  # fmt: skip
        return
    failure = purger.send_owed_now([*named, *result.removed])
    if failure is not None:
        typer.echo(
            f"warning: the cache in front was not purged ({failure}); it serves the old files until the purge goes "
            "through: the purge is kept owed, sent by `registry-gen api` or the next `registry-gen build`", err=True,
        )  # fmt: skip


def _lint_fails(settings: Settings) -> bool:
    """`build --strict`: `registry-gen check --strict` over content/, its findings on stderr."""
    from registry_gen.check import check_content

    report = check_content(settings)
    for finding in report.findings:
        if finding.severity != "info":
            typer.echo(f"lint: {finding}", err=True)
    typer.echo(f"lint: {report.summary()}", err=True)
    return report.failed(strict=True)


class CheckFormat(str, Enum):
    text = "text"
    json = "json"


class CheckProfile(str, Enum):
    npm = "npm"
    commonjs = "commonjs"


def check_command(
    content_dir: ContentArg = None,
    strict: Annotated[bool, typer.Option("--strict", help="Exit non-zero on warnings too (errors always do).")] = False,
    profile: Annotated[
        CheckProfile | None,
        typer.Option("--profile", help="npm (default: npm's documented rules) or commonjs (the specification's too)."),
    ] = None,
    ignore: Annotated[list[str] | None, typer.Option("--ignore", help="Rule id to leave out (repeatable).")] = None,
    output_format: Annotated[CheckFormat, typer.Option("--format", help="text, or json for tools.")] = CheckFormat.text,
    config: ConfigOption = None,
) -> None:
    """Lint every archive's package.json: errors, warnings and info, with a summary by rule."""
    from registry_gen.check import check_content

    settings = settings_from_options(config, content_dir=content_dir, check_profile=profile.value if profile else None)
    report = check_content(settings, ignore=ignore or ())
    if output_format is CheckFormat.json:
        typer.echo(json.dumps(report.to_json(), indent=2, ensure_ascii=False))
    else:
        for finding in report.findings:
            typer.echo(str(finding))
        if report.findings:
            typer.echo("by rule:")
        for row in report.by_rule():
            typer.echo(f"{row.count:>7}  {row.severity:<7}  {row.rule}")
        typer.echo(report.summary())
    for rule in report.unmatched_ignores:
        typer.echo(f"note: ignored rule {rule!r} matched no finding (is the rule id spelt right?)", err=True)
    if report.failed(strict):
        raise typer.Exit(1)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"registry-gen {__version__}")
        raise typer.Exit()


def global_options(
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit.")
    ] = False,
    debug: Annotated[
        bool, typer.Option("--debug", envvar=DEBUG_ENV, help="Show the full traceback of an error (main() reads it).")
    ] = False,
) -> None:
    """Static npm registry generator with a tiny user and write API."""


def create_cli(invoked: str | None = None) -> typer.Typer:
    """A fresh typer app with the built-in commands and every installed plugin's; only with
    `build` and `check` when `invoked` names one of them (the other modules need not load)."""
    app = typer.Typer(
        name="registry-gen",
        help="Static npm registry generator with a tiny user and write API.",
        no_args_is_help=True,
        add_completion=True,  # --install-completion / --show-completion (docs/reference/commands.md: "Shell completion")
        pretty_exceptions_enable=False,
        # Plain help text: rich's help formatter alone costs ~80 ms of start-up (goal: 0.12 s in all).
        rich_markup_mode=None,
    )
    app.callback()(global_options)
    app.command("build")(build_command)
    app.command("check")(check_command)
    if invoked in CORE_COMMANDS:
        return app
    # Here, not at the top: `build` and `check` (returned above) need none of them.
    from registry_gen import (
        commands_advisory,
        commands_audit,
        commands_host_config,
        commands_import,
        commands_init,
        commands_keys,
        commands_migrate,
        commands_stats,
        commands_mirror,
        commands_verify,
        commands_watch,
    )
    from registry_gen.plugins import entry_points

    for module in (
        commands_init, commands_watch, commands_verify, commands_host_config, commands_import, commands_keys, commands_advisory,
        commands_audit, commands_stats, commands_mirror, commands_migrate,
    ):  # fmt: skip
        module.register(app, settings_from_options)
    for entry in entry_points(group=PLUGIN_GROUP):
        try:
            register = entry.load()
        except ImportError as exc:
            # A broken plugin must not take the core commands down with it.
            log.warning("plugin %s not loaded: %s", entry.name, exc)
            continue
        register(app, settings_from_options)
    return app


def invoked_name(args: Sequence[str]) -> str | None:
    """The command a command line runs: its first word after the global options, if any."""
    for arg in args:
        if not arg.startswith("-"):
            return arg
        if arg in ("--help", "--version"):
            return None
    return None


def command_names(app: typer.Typer) -> list[str]:
    names = [info.name or typer.main.get_command_name(info.callback.__name__) for info in app.registered_commands if info.callback]
    return names + [str(info.name) for info in app.registered_groups]


def only_what_runs(app: typer.Typer, args: Sequence[str]) -> typer.Typer:
    """`app` cut down to what `args` can reach, before typer turns it into click commands.

    Converting a command reads its signature and evaluates its annotations (~1 ms each, ~50 ms
    for all), so only the invoked command is converted; a line naming no known command (`--help`,
    a typo) gets every command as a stub with its help and no parameters: enough for the list in
    the help text and the "did you mean" hint. Cut down in place: `app` is this invocation's own."""
    if COMPLETION_ENV in os.environ:  # shell completion reads its words from the environment
        return app
    name = invoked_name(args)
    if name in command_names(app):
        app.registered_commands = [c for c in app.registered_commands if c.callback and (c.name or typer.main.get_command_name(c.callback.__name__)) == name]
        app.registered_groups = [g for g in app.registered_groups if g.name == name]
        return app
    stubs = [stub_command(c.name or typer.main.get_command_name(c.callback.__name__), c.help or inspect.getdoc(c.callback) or "", c.hidden) for c in app.registered_commands if c.callback]
    stubs += [stub_command(str(g.name), typer.main.solve_typer_info_help(g), bool(g.hidden)) for g in app.registered_groups]
    app.registered_commands, app.registered_groups = stubs, []
    return app


def stub_command(name: str, help_text: str, hidden: bool) -> Any:
    """A command that only shows up in a list: its name and help, no parameters, never run."""
    return CommandInfo(name=name, help=help_text, hidden=hidden, callback=never_run)


def never_run() -> None:
    raise RuntimeError("a stub command ran: only_what_runs() keeps the real one for the command named")


def wants_debug(args: Sequence[str]) -> bool:
    """`--debug` before the command name, or REGISTRY_GEN_DEBUG set to anything but 0/empty."""
    options = []
    for arg in args:
        if not arg.startswith("-"):
            break
        options.append(arg)
    return "--debug" in options or os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


def one_line(exc: BaseException) -> str:
    """The error as the single line a user sees (a message spanning lines is folded)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def is_usage_error(exc: BaseException) -> bool:
    """The CLI library's own errors (typer carries its own copy of click, so they are told apart
    by what they offer rather than by class)."""
    return callable(getattr(exc, "format_message", None)) and isinstance(getattr(exc, "exit_code", None), int)


def tell_usage_error(exc: Any) -> int:
    """A usage mistake (unknown option, bad value) as one line pointing at the command's help;
    a bare `registry-gen` shows the help itself."""
    context = getattr(exc, "ctx", None)
    if type(exc).__name__ == "NoArgsIsHelpError" and context is not None:
        typer.echo(context.get_help())
        return int(exc.exit_code)
    message = " ".join(str(exc.format_message()).split())
    where = f" (see `{context.command_path} --help`)" if context is not None else ""
    typer.echo(f"error: {message}{where}", err=True)
    return int(exc.exit_code)


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI's one edge for errors: every mistake is one `error:` line and exit 1, never a
    traceback (unless --debug asks for it). Without `argv` (the console script), the command
    line is sys.argv and the process exits next."""
    if argv is not None:
        return run_command(list(argv))
    code = run_command(sys.argv[1:])
    # The interpreter's last garbage collection would walk every object the imports made (~10 ms
    # of a ~0.1 s command, issue 15): frozen, they are left to the plain teardown.
    gc.freeze()
    return code


def said_as_error_line(message: Any) -> Any:
    """typer's prompts tell a mistake as `Error: The two entered values do not match.`; this CLI
    says `error: …` everywhere else, so their lines are told the same way."""
    if isinstance(message, str) and message.startswith("Error: "):
        rest = message.removeprefix("Error: ")
        return "error: " + rest[:1].lower() + rest[1:]
    return message


def lower_case_prompt_errors() -> None:
    """typer's prompt and confirm print their mistakes through the `echo` of their own module
    (typer is pinned to an exact version): that one goes through `said_as_error_line` first."""
    from typer._click import termui

    plain = termui.echo
    if getattr(plain, "__name__", "") == "echo_error_lines":
        return

    def echo_error_lines(message: Any = None, *args: Any, **kwargs: Any) -> None:
        plain(said_as_error_line(message), *args, **kwargs)

    termui.echo = echo_error_lines  # type: ignore[assignment]


def run_command(args: list[str]) -> int:
    debug = wants_debug(args)
    logging.basicConfig(level=logging.DEBUG if debug else logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if not debug:  # the account commands print their own line; the store's INFO lines are the server log's
        logging.getLogger("user_api.sqlstore").setLevel(logging.WARNING)
    try:
        cli_coercion.install()  # parsed values skip typer's pydantic adapters where they need none
        lower_case_prompt_errors()
        invoked = None if COMPLETION_ENV in os.environ else invoked_name(args)
        command = typer.main.get_command(only_what_runs(create_cli(invoked), args))
        # Not standalone: usage mistakes come back here as exceptions, to be told in one line.
        code = command.main(args=args, prog_name="registry-gen", standalone_mode=False)
        return code if isinstance(code, int) else 0
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except typer.Abort:
        return 1
    except RegistryError as exc:
        if debug:
            raise
        typer.echo(f"error: {one_line(exc)}", err=True)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a usage mistake; else a bug, or a problem nobody turned into a RegistryError yet
        if is_usage_error(exc):
            return tell_usage_error(exc)
        if debug:
            raise
        typer.echo(f"error: {type(exc).__name__}: {one_line(exc)} (run `registry-gen --debug ...` for the traceback)", err=True)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
