"""`registry-gen watch`: a first build, then rebuilds whenever content/ changes (until Ctrl-C)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import typer

from registry_gen.cli import BaseUrlOption, ConfigOption, ContentArg, OutOption
from registry_gen.settings import Settings, default_base_url_warning


def _echo_report(report: Any) -> None:
    """One line per build on stdout (the counter tests and people read), problems on stderr."""
    if report.failure:
        typer.echo(f"build {report.number} failed: {report.failure}", err=True)
        return
    result = report.result
    for issue in report.new_errors:
        typer.echo(f"error: {issue}", err=True)
    for issue in report.resolved_errors:
        typer.echo(f"resolved: {issue.path}", err=True)
    changed = ", ".join(result.rebuilt_packages[:10]) + (" ..." if result.rebuilt > 10 else "")
    typer.echo(
        f"build {report.number} ({report.reason}): {result.summary()}" + (f"; rebuilt {changed}" if changed else ""),
    )


STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})  # Ctrl-C, and a service manager's stop


@contextlib.contextmanager
def stop_signals_held() -> Iterator[None]:
    """Holds SIGINT and SIGTERM pending, in this thread and every thread started inside (threads
    inherit the mask), until `wait_for_stop_signal` takes one. A stop that arrives during start-up
    is thus kept, not fatal. A Python handler that set a threading.Event could hang the process:
    it runs in the main thread, which may hold that very Event's lock when the signal lands
    (a clean run saw watch hang once on SIGTERM)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def wait_for_stop_signal() -> int:
    """Blocks until SIGINT or SIGTERM is pending (inside stop_signals_held); which one it was."""
    return signal.sigwait(STOP_SIGNALS)


def register(app: typer.Typer, settings_from_options: Callable[..., Settings]) -> None:
    def watch_command(
        content_dir: ContentArg = None,
        out: OutOption = None,
        base_url: BaseUrlOption = None,
        settle: Annotated[
            float, typer.Option("--settle", min=0.05, help="Seconds a file must stay unchanged before it is read.")
        ] = 1.0,
        max_wait: Annotated[
            float, typer.Option("--max-wait", min=1, help="Build anyway after this many seconds of continuous changes.")
        ] = 30.0,
        poll: Annotated[
            bool, typer.Option("--poll", help="Poll the folder instead of using file system events (network shares).")
        ] = False,
        config: ConfigOption = None,
    ) -> None:
        """Build, then rebuild the changed packages whenever CONTENT_DIR changes (Ctrl-C stops)."""
        from registry_gen.watch import Watcher

        settings = settings_from_options(config, content_dir=content_dir, out_dir=out, base_url=base_url)
        warning = default_base_url_warning(settings)
        if warning:
            typer.echo(warning, err=True)
        watcher = Watcher(settings, settle_seconds=settle, max_wait_seconds=max_wait, poll=poll, on_build=_echo_report)
        try:
            with stop_signals_held():
                watcher.start()
                typer.echo(f"watching {settings.content_dir} -> {settings.out_dir} (Ctrl-C to stop)")
                wait_for_stop_signal()
        finally:
            watcher.stop()  # signals are taken again here: a second Ctrl-C ends a slow stop
        typer.echo(f"stopped after {watcher.stats.builds} builds")

    app.command("watch")(watch_command)
