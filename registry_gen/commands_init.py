"""`registry-gen init [FOLDER]`: a commented registry.yaml and an empty content/ to start from
(README "A first registry").

The file lists every key with its default and what it does, so an operator edits values instead
of reading the source; only the public URL is asked for (or taken from --base-url), because it is
the one value a default cannot guess and every tarball URL is built from it. A URL naming this
machine also gives the address `serve` listens on: tarballs are fetched where the URL says.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from registry_gen.errors import ConfigError
from registry_gen.settings import DEFAULT_CONFIG_FILE, Settings, load_settings, loopback_address
from registry_gen.writer import atomic_write_bytes

DEFAULT_URL = Settings().base_url

TEMPLATE = """\
# registry-gen configuration (written by `registry-gen init`). Every key is optional; paths are
# relative to this file. Command-line options override these values; REGISTRY_DATABASE_URL
# overrides database_url. README.md explains each part.

# The public URL clients use: every tarball URL in the tree is built from it. Change it when the
# tree moves (then run `registry-gen build`).
{base_url_line}

content_dir: content          # archives (.tgz, .tar.gz, .zip) and registry-meta.json files
out_dir: public               # the static tree to deploy, as it is
# state_dir: public.state     # the build's state beside the tree (default: OUT_DIR.state); back it up, never deploy it
site_title: Private npm registry
template_dir: null            # your own jinja2 templates (default: the bundled ones)
strict: false                 # build also lints content/ (check --strict) and exits 1 on warnings
gzip: true                    # write .gz siblings of the JSON files (nginx gzip_static)
signing_key: null             # PEM key that signs every version (`registry-gen keys generate`)

# The write and user API (`registry-gen serve`, `registry-gen api`).
host: {host}# address to listen on (0.0.0.0: every interface)
port: {port}# serve's port; a base_url on this machine names the same one
data_dir: data                # SQLite user database
database_url: null            # e.g. postgresql://user@host/db to keep users in PostgreSQL
signup: admin                 # open | closed | admin: who may create accounts (`registry-gen user add NAME --admin` makes the first admin)
connection_limit: 1000        # open connections at most (idle ones included)
idle_timeout: 10              # seconds a silent connection stays open
index_refresh_seconds: 10     # serve/api/watch rewrite -/all and -/search.json this long after a write (0: in the write)

check_profile: npm            # registry-gen check: npm | commonjs (the specification's rules too)
check_ignore: []              # rule ids registry-gen check leaves out, e.g. [engines-array]
audit_keep_days: null         # days the audit log keeps an entry (`registry-gen audit-prune` drops older ones); null: for good
uplinks: {{}}                   # registries to mirror, e.g. npmjs: {{url: https://registry.npmjs.org/}} (docs/mirror.md)
packages: {{}}                  # read rules and mirrored names, e.g. '@internal/*': {{read: authenticated}}, '**': {{proxy: npmjs}}
# limits:                     # caps on archives (SECURITY.md); the defaults:
#   max_archive_bytes: 209715200
#   max_unpacked_bytes: 1073741824
#   max_members: 100000
#   max_manifest_bytes: 1048576
#   max_readme_bytes: 1048576
#   max_compression_ratio: 200
# auth_limits:                # login, sign-up and web-login limits (SECURITY.md); the defaults:
#   login_per_account_per_minute: 10
#   login_per_account_burst: 10
#   login_per_address_per_minute: 30
#   login_per_address_burst: 30
#   signup_per_minute: 5
#   signup_burst: 5
#   web_login_sessions: 1000
#   web_login_per_address: 5
#   web_login_seconds: 600
"""


def listen_address(base_url: str | None) -> tuple[str, int]:
    """Where `serve` listens: the address a URL of this machine names (an IP literal as it is,
    localhost as 127.0.0.1), else the defaults (a public URL reaches it through a proxy)."""
    defaults = Settings()
    local = loopback_address(base_url or DEFAULT_URL)
    if local is None:
        return defaults.host, defaults.port
    host, port = local
    return (defaults.host if "localhost" in host else host), port


def config_text(base_url: str | None) -> str:
    """The commented file; without a URL the key stays commented out (build then warns)."""
    if base_url is None:
        line = f"# base_url: https://npm.example.com/   # not set yet: builds use {DEFAULT_URL} and warn"
    else:
        line = f"base_url: {base_url}"
    host, port = listen_address(base_url)
    shown_host = f"'{host}'" if ":" in host else host  # an IPv6 address is not a plain YAML scalar
    return TEMPLATE.format(base_url_line=line, host=f"{shown_host:<24}", port=f"{port:<24}")


def checked_url(url: str) -> str:
    """The URL as Settings will take it, or one line saying what is wrong with it."""
    try:
        return Settings(base_url=url.strip()).base_url
    except ConfigError as exc:
        raise ConfigError(f"--base-url: {exc}; e.g. --base-url https://npm.example.com/") from None


def _ask_url() -> str | None:
    """Asks on a terminal; elsewhere (scripts, CI) leaves the key for the operator to fill in."""
    if not sys.stdin.isatty():
        return None
    while True:
        answer = str(typer.prompt("Public URL of the registry (tarball URLs are built from it)", default=DEFAULT_URL))
        try:
            return checked_url(answer)
        except ConfigError as exc:
            typer.echo(str(exc).removeprefix("--base-url: "), err=True)


def init_command(
    folder: Annotated[Path, typer.Argument(help="Folder to write registry.yaml into (default: the current one).")] = Path("."),
    base_url: Annotated[str | None, typer.Option("--base-url", help="Public URL the tree will be served at.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing registry.yaml.")] = False,
) -> None:
    """Write a commented registry.yaml for FOLDER (asks for the public URL on a terminal)."""
    target = folder / DEFAULT_CONFIG_FILE
    if target.exists() and not force:
        raise ConfigError(f"{target} already exists; edit it, or pass --force to replace it")
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{folder} is not a folder; give the folder registry.yaml goes into")
    url = checked_url(base_url) if base_url is not None else _ask_url()
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(target, config_text(url).encode())
    content = load_settings(target).content_dir
    content.mkdir(parents=True, exist_ok=True)  # serve and build start from it, empty or not
    typer.echo(f"wrote {target}" + (f" for {url}" if url else " (base_url not set yet: edit it before deploying)") + f", and {content}/")
    typer.echo(
        "next: `registry-gen user add NAME --admin`, then `registry-gen serve` there "
        f"(publish with npm, or put archives into {content})"
    )


def register(app: typer.Typer, settings_from_options: Callable[..., Settings]) -> None:
    app.command("init")(init_command)
