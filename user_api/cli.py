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
from registry_gen.errors import RegistryError
from registry_gen.settings import Settings
from user_api import account_actions as actions
from user_api.errors import UserApiError

if TYPE_CHECKING:  # the store (SQL drivers) loads only when a command runs: `--help` stays fast
    from registry_gen.ownership import BindingReport
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
    """Add the `user` command group (add, list, remove, disable/enable, passwd, promote/demote, tokens) to `app`."""
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

    register_account_actions(users, opened_store, lambda config: load_settings_callable(config) if config else load_settings_callable())
    app.add_typer(users, name="user")
    register_owner(app, opened_store, load_settings_callable)


NameArg = Annotated[str, typer.Argument(help="Username.")]


def _revoked(count: int) -> str:
    return f" ({count} token{'s' if count != 1 else ''} revoked)" if count else ""


def register_account_actions(users: typer.Typer, opened_store: Callable[..., Any], settings_of: Callable[[Path | None], Settings]) -> None:
    """The administrator's actions on one account (user_api.account_actions; the API has the same)."""

    def change(username: str, config: Path | None, verb: str, field: str, value: str) -> None:
        with opened_store(config) as store:
            apply = actions.set_status if field == "status" else actions.set_role
            outcome = apply(store, username, value)
        if outcome.changed:
            typer.echo(f"{verb}d {username}{_revoked(outcome.tokens_revoked)}")
        else:
            typer.echo(f"{username} is already {'an ' if value == 'admin' else ''}{value}")

    for verb, value in actions.STATUS_ACTIONS.items():
        users.command(verb, help=f"Set the account's status to {value}" + (
            " (it can no longer log in; its tokens are revoked)." if value == "disabled" else " (it can log in again)."
        ))(_bound(change, verb, "status", value))
    for verb, value in actions.ROLE_ACTIONS.items():
        users.command(verb, help=f"Make the account {'an administrator' if value == 'admin' else 'a plain user'}.")(
            _bound(change, verb, "role", value)
        )

    @users.command("passwd")
    def passwd(
        username: NameArg,
        password_stdin: Annotated[bool, typer.Option("--password-stdin", help="Read the new password from stdin.")] = False,
        config: ConfigOption = None,
    ) -> None:
        """Set a new password (the account's tokens are revoked: every session ends)."""
        password = read_password(password_stdin)
        with opened_store(config) as store:
            outcome = actions.set_password(store, username, password)
        typer.echo(f"password of {username} changed{_revoked(outcome.tokens_revoked)}")

    register_removal_commands(users, opened_store, settings_of)
    register_token_commands(users, opened_store)


def register_removal_commands(users: typer.Typer, opened_store: Callable[..., Any], settings_of: Callable[[Path | None], Settings]) -> None:
    """`user remove NAME` and `user erase-email NAME|--all-removed`, which finishes what a removal
    could not erase (SECURITY.md, "Maintainer emails")."""

    @users.command("remove")
    def remove(
        username: NameArg,
        yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
        config: ConfigOption = None,
    ) -> None:
        """Delete an account: personal data erased, tokens revoked, the name stays reserved."""
        if not yes:
            typer.confirm(f"Remove the account {username}? Its name stays reserved", abort=True)
        with opened_store(config) as store:
            outcome = actions.remove(store, username)
        # As DELETE /user/{id} does (AUTH.md): the account's email leaves every package. The account
        # goes first, so its name can publish no email meanwhile; `user erase-email` finishes.
        typer.echo(f"removed {username}{_revoked(outcome.tokens_revoked)}")
        _erase_email(settings_of(config), username, "registry-gen user remove", frozenset({outcome.user.id}))

    @users.command("erase-email")
    def erase_email(
        username: Annotated[str | None, typer.Argument(help="A removed account's username.")] = None,
        all_removed: Annotated[bool, typer.Option(
            "--all-removed", help="Every removed account's email (after a removal that stopped half-way).")] = False,
        config: ConfigOption = None,
    ) -> None:
        """Finish a removed account's erasure: its email leaves every package meta that still names it
        (after a damaged meta was fixed by hand, or a removal that stopped half-way)."""
        with opened_store(config) as store:
            removed = _removed_accounts(store, username, all_removed)
        if removed:
            names = username if username is not None else frozenset(removed)
            _erase_email(settings_of(config), names, "registry-gen user erase-email", frozenset(filter(None, removed.values())))
        else:
            typer.echo("no removed account: nothing to erase")


def _removed_accounts(store: UserStore, username: str | None, all_removed: bool) -> dict[str, str]:
    """The removed accounts `user erase-email` works on (name -> id, from their tombstones: the id
    finds the entries recorded under a name the account had before a rename): NAME (never a live
    account's, "" its id when no tombstone has that name) or every removed one."""
    if (username is None) != all_removed:
        raise UserApiError("give a removed account's NAME, or --all-removed (not both)")
    removed = store.removed_accounts()
    if username is None:
        return removed
    if store.get_by_username(username) is not None:
        raise UserApiError(f"{username} is a live account: remove it first (`registry-gen user remove {username}`)")
    return {username: removed.get(username, "")}


def _erase_email(settings: Settings, username: str | frozenset[str], actor: str, account_ids: frozenset[str]) -> None:
    """Erases the account's (or accounts') email from every package; one `error:` line per damaged
    meta it could not read (each names the fix), and exit status 1 when any is left."""
    from registry_gen.ownership import erase_maintainer_email  # loads the build: only when used

    finish = f"registry-gen user erase-email {username if isinstance(username, str) else '--all-removed'}"
    try:
        erasure = erase_maintainer_email(settings, username, actor, account_ids=account_ids)
    except RegistryError as error:
        typer.echo(f"error: {_message(error)}; finish with `{finish}`", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"email erased from {len(erasure.erased)} package file(s)")
    for line in erasure.left:
        typer.echo(f"error: {line}", err=True)
    if erasure.left:
        raise typer.Exit(1)


def _bound(change: Callable[..., None], verb: str, field: str, value: str) -> Callable[..., None]:
    def command(username: NameArg, config: ConfigOption = None) -> None:
        change(username, config, verb, field, value)

    return command


def register_token_commands(users: typer.Typer, opened_store: Callable[..., Any]) -> None:
    """`registry-gen user tokens list|revoke NAME`."""
    tokens = typer.Typer(help="List or revoke an account's tokens.", no_args_is_help=True)

    @tokens.command("list")
    def list_tokens(username: NameArg, config: ConfigOption = None) -> None:
        """One line per token: key, created, read-only or read-write, its first characters, description."""
        with opened_store(config) as store:
            infos = store.list_tokens(actions.user_named(store, username).id)
        for info in infos:
            view = actions.token_json(info)
            mode = "read-only " if info.readonly else "read-write"
            typer.echo(f"{view['key']}  {view['created']}  {mode}  {info.token_prefix}…  {info.description or ''}".rstrip())
        typer.echo(f"{len(infos)} token{'s' if len(infos) != 1 else ''} of {username}")

    @tokens.command("revoke")
    def revoke(
        username: NameArg,
        key: Annotated[str | None, typer.Argument(help="The token's key (from `user tokens list` or `npm token list`).")] = None,
        every: Annotated[bool, typer.Option("--all", help="Revoke every token of the account.")] = False,
        config: ConfigOption = None,
    ) -> None:
        """Revoke one token by its key, or every token with --all."""
        if (key is None) == (not every):
            raise typer.BadParameter("give a token KEY, or --all (not both)", param_hint="KEY")
        with opened_store(config) as store:
            count = actions.revoke_tokens(store, actions.user_named(store, username), key)
        if key is not None and not count:
            typer.echo(f"error: {username} has no token with key {key!r} (`registry-gen user tokens list {username}`)", err=True)
            raise typer.Exit(1)
        typer.echo(f"revoked {count} token{'s' if count != 1 else ''} of {username}")

    users.add_typer(tokens, name="tokens")


def register_owner(app: typer.Typer, opened_store: Callable[..., Any], load_settings_callable: Callable[..., Settings]) -> None:
    """`registry-gen owner claim PACKAGE USER` and `owner bind-recorded`: bind maintainer names to accounts (admin actions)."""
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
            from user_api.admin import claim_for  # loads the build: only when used

            changed = claim_for(settings, store, package, username)
        typer.echo(f"{username} is {'now' if changed else 'already'} a bound maintainer of {package}")

    @owners.command("bind-recorded")
    def bind_recorded(
        dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would be bound; change nothing.")] = False,
        force: Annotated[
            bool, typer.Option("--force", help="Bind even though no upgrade is pending (the accounts' database was migrated before this step existed).")
        ] = False,
        config: ConfigOption = None,
    ) -> None:
        """Once, after upgrading from a release before maintainers were bound to accounts: bind every
        maintainer name recorded without an account to the account of that name. An account created
        after the package's first publish is held back and listed (`owner claim` binds it)."""
        with opened_store(config) as store:
            settings = load_settings_callable(config) if config else load_settings_callable()
            from user_api.admin import bind_recorded_for  # loads the build: only when used

            report = bind_recorded_for(settings, store, apply=not dry_run, force=force)
        for line in binding_summary(report, dry_run=dry_run):
            typer.echo(line)

    app.add_typer(owners, name="owner")


def binding_summary(report: BindingReport, *, dry_run: bool) -> list[str]:
    """`owner bind-recorded`'s output: one line per recorded name, then the counts."""
    from registry_gen.ownership import BOUND, HELD_BACK, describe_binding

    lines = [describe_binding(decision, dry_run=dry_run) for decision in report.decisions]
    lines += [f"unreadable: content/{key} does not parse; its maintainers stay unbound (fix it, then run this again)" for key in report.unreadable]
    counts = {outcome: sum(d.outcome == outcome for d in report.decisions) for outcome in (BOUND, HELD_BACK)}
    verb = "would bind" if dry_run else "bound"
    lines.append(f"{verb} {counts[BOUND]}, held back {counts[HELD_BACK]} (of {len(report.decisions)} names recorded without an account)")
    return lines
