"""`registry-gen user ...`: account commands, plugged into registry_gen's CLI by entry point.

registry_gen.cli calls `register(app, load_settings)` for the `registry_gen.commands` group, so
registry_gen never imports user_api. The commands only parse options and call the store.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from registry_gen.cli_options import ConfigOption
from registry_gen.errors import NotFound, RegistryError
from registry_gen.settings import Settings
from user_api.errors import UserApiError

if TYPE_CHECKING:  # the store (SQL drivers) loads only when a command runs: `--help` stays fast
    from user_api.store import UserStore



def _message(error: RegistryError) -> str:
    text = error.detail if isinstance(error, UserApiError) else str(error)
    for problem in getattr(error, "errors", ()):
        where = (problem.pointer or "").removeprefix("#/") or problem.parameter or ""
        text += f"\n  {where}: {problem.detail}" if where else f"\n  {problem.detail}"
    return text


def read_password(from_stdin: bool) -> str:
    """From stdin (one line, its newline dropped) or an interactive prompt that asks twice."""
    if from_stdin:
        line = sys.stdin.readline()
        return line[:-1] if line.endswith("\n") else line
    return str(typer.prompt("Password", hide_input=True, confirmation_prompt=True))


def register(app: typer.Typer, load_settings_callable: Callable[..., Settings]) -> None:
    """Add the `user` command group (`user add`, `user list`) to `app`."""
    users = typer.Typer(help="Manage registry accounts.", no_args_is_help=True)

    @contextmanager
    def opened_store(config: Path | None) -> Iterator[UserStore]:
        try:
            from user_api.store import open_user_store

            settings = load_settings_callable(config) if config else load_settings_callable()
            store = open_user_store(settings)
        except RegistryError as error:
            typer.echo(f"error: {_message(error)}", err=True)
            raise typer.Exit(1) from None
        try:
            yield store
        except RegistryError as error:
            typer.echo(f"error: {_message(error)}", err=True)
            raise typer.Exit(1) from None
        finally:
            store.close()

    @users.command("add")
    def add(
        name: Annotated[str, typer.Argument(help="Username (lower-case, URL-safe).")],
        admin: Annotated[bool, typer.Option("--admin", help="Make the account an administrator.")] = False,
        email: Annotated[str | None, typer.Option("--email", help="Email address.")] = None,
        full_name: Annotated[str | None, typer.Option("--full-name", help="Full name.")] = None,
        password_stdin: Annotated[
            bool, typer.Option("--password-stdin", help="Read the password from stdin instead of prompting.")
        ] = False,
        config: ConfigOption = None,
    ) -> None:
        """Create an account (the way to make the first administrator)."""
        password = read_password(password_stdin)
        with opened_store(config) as store:
            user = store.create_user(name, password, email, full_name, "admin" if admin else "user")
        typer.echo(f"created {user.role} {user.username} (id {user.id})")

    @users.command("list")
    def list_(
        page: Annotated[int, typer.Option(min=1, help="Page number.")] = 1,
        size: Annotated[int, typer.Option(min=1, max=100, help="Users per page.")] = 50,
        config: ConfigOption = None,
    ) -> None:
        """List accounts in sign-up order."""
        with opened_store(config) as store:
            result = store.list_users(offset=(page - 1) * size, limit=size)
        for user in result.items:
            typer.echo(f"{user.id}  {user.username:<24} {user.role:<5} {user.status}")
        typer.echo(f"{len(result.items)} of {result.total} users")

    app.add_typer(users, name="user")
    register_owner(app, opened_store, load_settings_callable)


def register_owner(app: typer.Typer, opened_store: Callable[..., Any], load_settings_callable: Callable[..., Settings]) -> None:
    """`registry-gen owner claim PACKAGE USER`: bind a maintainer name to an account (admin action)."""
    owners = typer.Typer(help="Bind package maintainers to accounts.", no_args_is_help=True)

    @owners.command("claim")
    def claim(
        package: Annotated[str, typer.Argument(help="Package name.")],
        username: Annotated[str, typer.Argument(help="The account that becomes (or is confirmed as) a maintainer.")],
        config: ConfigOption = None,
    ) -> None:
        """Make USER a maintainer of PACKAGE, bound to USER's account (names without one grant nothing)."""
        with opened_store(config) as store:
            settings = load_settings_callable(config) if config else load_settings_callable()
            changed = claim_for(settings, store, package, username)
        typer.echo(f"{username} is {'now' if changed else 'already'} a bound maintainer of {package}")

    app.add_typer(owners, name="owner")


def claim_for(settings: Settings, store: UserStore, package: str, username: str) -> bool:
    """The admin action behind the CLI (and the admin API function in user_api.admin_owner)."""
    from registry_gen.ownership import claim_package

    user = store.get_by_username(username)
    if user is None or user.status != "active":
        raise NotFound(f"there is no active user named {username!r} on this registry")
    return claim_package(settings, package, user.username, user.email, user.id)
