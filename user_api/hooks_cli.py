"""`registry-gen hooks ls|deliveries|redeliver`: an administrator's view of the hooks and their
delivery log, on the registry's machine (the hooks live in the user store, like the accounts)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from registry_gen.errors import ConfigError
from registry_gen.settings import Settings
from user_api.store_hooks import SqlHookStore

ConfigOption = Annotated[Path | None, typer.Option("--config", "-c", help="Config file (default: registry.yaml).")]


def register(app: typer.Typer, load_settings_callable: Callable[..., Settings]) -> None:
    hooks = typer.Typer(help="Webhooks (npm hook) and their deliveries.", no_args_is_help=True)
    app.add_typer(hooks, name="hooks")

    @contextmanager
    def opened(config: Path | None) -> Iterator[SqlHookStore]:
        from user_api.hooks_service import hook_store
        from user_api.store import open_user_store

        store = open_user_store(load_settings_callable(config) if config else load_settings_callable())
        try:
            yield hook_store(store)
        finally:
            store.close()

    @hooks.command("ls")
    def list_command(config: ConfigOption = None) -> None:
        """Every hook: id, owner, what it watches, endpoint, last delivery and its answer."""
        with opened(config) as store:
            found, _ = store.list_hooks(None, package=None, offset=0, limit=10_000)
        for hook in found:
            watched = ("~" if hook.type == "owner" else "") + hook.name
            typer.echo(f"{hook.id}  {hook.owner}  {watched}  {hook.endpoint}  last: {hook.last_delivery or 'never'} ({hook.response_code})")

    @hooks.command("deliveries")
    def deliveries_command(
        hook: Annotated[str | None, typer.Argument(help="A hook id (default: every hook).")] = None,
        limit: Annotated[int, typer.Option("--limit", min=1, help="How many, newest first.")] = 50,
        config: ConfigOption = None,
    ) -> None:
        """The delivery log: id, event, status, attempts, last answer or error, latency."""
        with opened(config) as store:
            found = store.deliveries(hook, offset=0, limit=limit)
        for d in found:
            answer = d.last_error or (f"answered {d.response_code}" if d.response_code else "-")
            typer.echo(f"{d.id}  #{d.seq} {d.event.get('kind')} {d.package}  {d.status}  attempts={d.attempts}  {answer}  {d.latency_ms or '-'} ms")

    @hooks.command("redeliver")
    def redeliver_command(delivery: Annotated[str, typer.Argument(help="A delivery id (see hooks deliveries).")], config: ConfigOption = None) -> None:
        """Queue a delivery again (a parked one too), due now, with the same delivery id."""
        with opened(config) as store:
            if not store.redeliver(delivery, now=time.time()):
                raise ConfigError(f"hooks redeliver: no delivery {delivery!r} (see registry-gen hooks deliveries)")
        typer.echo(f"queued {delivery} again; a running server delivers it within seconds")
