"""`registry-gen groups NAME [--add G] [--remove G]`: an account's groups (for the read rules).

Run by an administrator on the registry's machine, like `registry-gen user add`; the groups are
kept in the user store with the accounts (SQLite or PostgreSQL), so every API process sees them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from registry_gen.errors import ConfigError
from registry_gen.settings import Settings


def register(app: typer.Typer, load_settings_callable: Callable[..., Settings]) -> None:
    @app.command("groups")
    def groups_command(
        name: Annotated[str, typer.Argument(help="The account's username.")],
        add: Annotated[list[str] | None, typer.Option("--add", help="Put the account in this group (repeatable).")] = None,
        remove: Annotated[list[str] | None, typer.Option("--remove", help="Take the account out of this group (repeatable).")] = None,
        config: Annotated[Path | None, typer.Option("--config", "-c", help="Config file (default: registry.yaml).")] = None,
    ) -> None:
        """Show or change an account's groups (registry.yaml `packages:` rules name them)."""
        from user_api.groups import check_group_name
        from user_api.store import open_user_store

        for group in (*(add or ()), *(remove or ())):
            check_group_name(group)  # one line naming the group, before anything is opened
        settings = load_settings_callable(config) if config else load_settings_callable()
        store = open_user_store(settings)
        try:
            user = store.get_by_username(name)
            if user is None:
                raise ConfigError(f"groups: no account named {name!r} (see registry-gen user list)")
            current = store.change_groups(user.id, add=add or (), remove=remove or ())
        finally:
            store.close()
        typer.echo(f"{user.username}: {', '.join(sorted(current)) or '(no groups)'}")
