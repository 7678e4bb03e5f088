"""`registry-gen serve` and `registry-gen api`: thin typer commands around waitress.

`serve` is the one-process registry (`make run`): it binds first (so `--port 0` works and the
real port is known), builds content/ into the tree for that address, then serves the tree for
GET/HEAD and the APIs for everything else. `api` serves only the APIs, for a static host (nginx)
that routes GET/HEAD to the files and every other method here.
"""

from __future__ import annotations

import errno
import json
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer

from registry_gen.cli_options import ConfigOption
from registry_gen.errors import AddressUnavailable, ConfigError, ContentMissing
from registry_gen.layout import SEARCH_DOCUMENT
from registry_gen.settings import Settings, default_base_url_warning, loopback_address

if TYPE_CHECKING:  # boto3 loads only with a bucket configured
    from registry_gen.objectstore import ObjectStore

DEFAULT_BASE_URL = Settings().base_url  # "not configured": serve derives it from the bound address
DEFAULT_THREADS = 8

HostOption = Annotated[str | None, typer.Option("--host", help="Address to listen on (default from config, else 127.0.0.1).")]
PortOption = Annotated[
    int | None, typer.Option("--port", min=0, max=65535, help="Port (0 picks a free one; default from config, else 4873).")
]
BaseUrlOption = Annotated[
    str | None, typer.Option("--base-url", help="Public URL clients use (default: from config, else http://<host>:<port>/).")
]
ThreadsOption = Annotated[int, typer.Option("--threads", min=1, max=64, help="Worker threads.")]


def _public_url(host: str, port: int) -> str:
    shown = "127.0.0.1" if host in ("", "0.0.0.0") else "[::1]" if host == "::" else host
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    return f"http://{shown}:{port}/"


def _example_package(out_dir: Path) -> str:
    """A package the tree holds, for the "try" line (the built search document lists them)."""
    try:
        document = json.loads((out_dir / SEARCH_DOCUMENT).read_bytes())
        return str(document["objects"][0]["package"]["name"])
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return "<package>"


def _stop_on_sigterm() -> None:
    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def listen_problem(host: str, port: int, error: OSError | None = None) -> str | None:
    """Why the server cannot listen on host:port, with the fix, as one line (None: nothing wrong)."""
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if not 0 <= port <= 65535:
        return f"port {port} is not a port (0-65535; 0 picks a free one); choose another with --port or PORT=... make run"
    if error is None:
        return None
    if error.errno == errno.EADDRINUSE:
        return f"address {address} is in use; choose another with --port or PORT=... make run"
    if error.errno == errno.EACCES:
        return f"port {port} needs privileges on {host}; choose one above 1023 with --port or PORT=... make run"
    if error.errno == errno.EADDRNOTAVAIL or isinstance(error, socket.gaierror):
        return f"{host} is not an address of this machine; choose another with --host or HOST=... make run"
    return f"cannot listen on {address}: {error.strerror or error}"


def _bind(application: Callable[..., Any], options: dict[str, Any]) -> Any:
    import waitress

    problem = listen_problem(options["host"], options["port"])
    if problem:
        raise AddressUnavailable(problem)
    try:
        return waitress.create_server(application, **options)
    except OSError as exc:
        raise AddressUnavailable(listen_problem(options["host"], options["port"], exc) or str(exc)) from exc


def _greet(settings: Settings, listening: str, threads: int, static: bool) -> None:
    """The address listened on, the public URL when it is another, and what to try: against
    this address when the URL names this machine anyway, else against the public name."""
    if static:
        typer.echo(f"registry-gen: serving {settings.out_dir} and the API at {listening}")
        if settings.base_url != listening:
            typer.echo(f"  public URL {settings.base_url}: tarball URLs and the site's links point there")
        registry = listening if loopback_address(settings.base_url) else settings.base_url
        account = "adduser" if settings.signup == "open" else "login"  # else only an admin makes accounts
        typer.echo(f"listening on {listening} ({threads} threads); try:")
        typer.echo(f"  npm install --registry {registry} {_example_package(settings.out_dir)}")
        typer.echo(f"  npm {account} --registry {registry}")
    else:
        typer.echo(f"registry-gen: API listening on {listening} ({threads} threads), public URL {settings.base_url}")
        typer.echo(f"  serve {settings.out_dir} for GET/HEAD and send every other method here")


def _derived_base_url(settings: Settings, port: int) -> Settings:
    """No URL configured: the tree is built for the address bound (and a line says so)."""
    settings = settings.with_updates(base_url=_public_url(settings.host, port))
    if not settings.base_url_given:
        typer.echo(
            f"warning: no base_url configured: tarball URLs point at {settings.base_url} (the address listened on); "
            "for clients that reach it by another name, pass --base-url URL or set base_url in registry.yaml "
            "(`registry-gen init` writes one)",
            err=True,
        )
    return settings


def port_mismatch_warning(settings: Settings, port: int) -> str | None:
    """One line when base_url names this machine on another port than serve's: npm would fetch
    every tarball where nothing answers. (A public name in front, nginx, has its own port: no line.)"""
    local = loopback_address(settings.base_url)
    if local is None or local[1] == port:
        return None
    return (
        f"warning: base_url {settings.base_url} is this machine on port {local[1]}, but serve listens on {port}: "
        f"tarball URLs point where nothing answers; serve with --port {local[1]}, or pass --base-url "
        f"{_public_url(settings.host, port)} (or change port/base_url in registry.yaml)"
    )


def tree_exists(settings: Settings) -> bool:
    """Whether a registry was built here before: a non-empty tree, or the build's state."""
    out = settings.out_dir
    return settings.state_folder.exists() or (out.is_dir() and any(out.iterdir())) or (out.exists() and not out.is_dir())


def is_new_registry(settings: Settings) -> bool:
    """True when the content folder is missing and no tree was built yet (nothing to lose: the
    registry starts empty). Beside an existing tree a missing one is refused before anything is
    written, as `build` refuses it: a wrong path must not empty a served registry."""
    if settings.content_dir.is_dir():
        return False
    if settings.content_dir.exists():
        raise ContentMissing(f"content folder {settings.content_dir} is a file, not a folder; nothing was changed")
    if tree_exists(settings):
        raise ContentMissing(
            f"content folder {settings.content_dir} does not exist, but the tree {settings.out_dir} does; nothing was changed "
            "(check the path or --config: an empty content folder would unpublish every package)"
        )
    return True


def start_empty(settings: Settings) -> None:
    settings.content_dir.mkdir(parents=True, exist_ok=True)
    typer.echo(
        f"registry-gen: a new registry: created the empty content folder {settings.content_dir} "
        "(publish with `npm publish`, or put archives into it)"
    )


def _public_settings(settings: Settings, port: int, static: bool, explicit_base_url: bool) -> Settings:
    """The settings with the URL the tree is built for, and a line for what is odd about it."""
    if static and not explicit_base_url and settings.base_url == DEFAULT_BASE_URL:
        settings = _derived_base_url(settings, port)
    elif not static and default_base_url_warning(settings):
        typer.echo(default_base_url_warning(settings), err=True)  # `api` rebuilds the tree for that URL
    mismatch = port_mismatch_warning(settings, port) if static else None  # `api` sits behind a proxy's port
    if mismatch:
        typer.echo(mismatch, err=True)
    return settings


def _object_store(settings: Settings, static: bool) -> ObjectStore | None:
    """`storage:` for `api` (content and tree in buckets); `serve` serves a local tree and refuses it."""
    from registry_gen.objectstore import open_object_store

    if settings.storage is not None and static:
        raise ConfigError(
            f"storage: {settings.storage}: `registry-gen serve` serves a local tree; with content in a bucket run "
            "`registry-gen api` (the tree goes to the bucket too) behind nginx or a CDN, or remove storage:"
        )
    return open_object_store(settings)


def _prepare_tree(settings: Settings, static: bool, objects: ObjectStore | None = None) -> None:
    """Sweeps what an interrupted write left behind, then (serving the tree) brings it up to date;
    with `objects`, syncs the work folder from the content bucket, builds and publishes the tree."""
    from registry_gen.build import run_build

    swept = _sweep_temp_files(settings)
    if swept:
        typer.echo(f"removed {len(swept)} temp file(s) left by an interrupted write")
    if static:
        result = run_build(settings)
        for issue in result.errors:
            typer.echo(f"error: {issue}", err=True)
        typer.echo(f"built {settings.out_dir}: {result.summary()}")
    if objects is not None:
        result = objects.start(settings)
        typer.echo(f"synced {settings.content_dir} from {objects.content.location}, published to {objects.tree.bucket.location}: {result.summary()}")


def _run(
    settings: Settings, *, static: bool, threads: int, explicit_base_url: bool, trusted_proxy: str | None, watch: bool = False
) -> None:
    from user_api.access_log import configure_server_logging
    from user_api.profiling import dump_profile
    from user_api.guard import guarded_channel, store_token_check
    from user_api.registry_routes import publish_body_limit
    from user_api.server import starting

    configure_server_logging()
    objects = _object_store(settings, static)  # or refused, before anything is bound or written
    new_registry = is_new_registry(settings)  # or refused, before anything is bound or written
    holder: dict[str, Any] = {"app": starting}

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        return holder["app"](environ, start_response)

    server = _bind(application, _server_options(settings, threads, trusted_proxy))  # binds now: the real port is known
    # Per-route body caps and the smuggling check run in waitress's parser, before a body is read.
    server.channel_class = guarded_channel(publish_body_limit(settings), store_token_check(lambda: holder.get("store")))
    port = int(getattr(server, "effective_port", settings.port))
    settings = _public_settings(settings, port, static, explicit_base_url)
    if new_registry:
        start_empty(settings)
    if static:  # one process, nothing to fail over to: requests wait in the queue until the build is done
        _start(settings, holder, objects, static=static, threads=threads, watch=watch, port=port)
    _stop_on_sigterm()
    try:
        if not static:  # an instance among others: it answers 503 until it is ready, so a client retries (or another instance)
            _start_in_background(settings, holder, objects, threads=threads, port=port)
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        _shut_down(server, holder)
        dump_profile(holder.get("app"))
    if "failed" in holder:
        raise holder["failed"]


def _start(
    settings: Settings, holder: dict[str, Any], objects: ObjectStore | None, *, static: bool, threads: int, watch: bool, port: int
) -> None:
    """Brings the tree up to date, opens the stores and starts the background parts, then puts the
    server's app in `holder` (which answers `starting` until then); the parts go there too, for
    the shutdown."""
    from registry_gen.leader import start_leader
    from user_api.access_log import AccessLog
    from user_api.hooks_service import start_deliverer
    from user_api.profiling import profiled
    from user_api.server import create_server_app
    from user_api.store import open_user_store

    _prepare_tree(settings, static, objects)
    holder["store"] = store = open_user_store(settings)
    _remind_upgrade_steps(store)
    holder["leader"] = leader = start_leader(settings, objects)
    holder["refresher"] = refresher = _refresher(settings, leader, objects)
    holder["deliverer"] = deliverer = start_deliverer(settings, store)  # hooks: a background thread, never in a request
    app = create_server_app(settings, store, static=static, refresher=refresher, after_write=deliverer.wake, objects=objects)
    holder["app"] = profiled(AccessLog(app))
    _greet(settings, _public_url(settings.host, port), threads, static)
    if watch:
        from registry_gen.watch import start_watcher

        # Development mode: archives dropped into content/ show up without a restart.
        holder["watcher"] = start_watcher(settings, initial_build=False)
        typer.echo(f"  watching {settings.content_dir} for new, changed and removed archives")
    sys.stdout.flush()


def _start_in_background(settings: Settings, holder: dict[str, Any], objects: ObjectStore | None, *, threads: int, port: int) -> None:
    """`_start` in a thread while the server answers; if it fails, the error ends the process as
    it would have in the foreground (the main thread is interrupted, then raises it)."""
    import _thread
    import threading

    def start() -> None:
        try:
            _start(settings, holder, objects, static=False, threads=threads, watch=False, port=port)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which reports it
            holder["failed"] = exc
            _thread.interrupt_main()

    threading.Thread(target=start, name="registry-gen-start", daemon=True).start()


def _server_options(settings: Settings, threads: int, trusted_proxy: str | None) -> dict[str, Any]:
    """waitress's options: the address, threads, the largest body (a publish's) and the limits."""
    from user_api.guard import waitress_options
    from user_api.registry_routes import publish_body_limit

    options: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "threads": threads,
        "max_request_body_size": publish_body_limit(settings),
        "ident": "registry-gen",
        "clear_untrusted_proxy_headers": True,
        **waitress_options(settings.connection_limit, settings.idle_timeout),
    }
    if trusted_proxy:
        options.update(trusted_proxy=trusted_proxy, trusted_proxy_headers={"x-forwarded-for"})
    return options


def _refresher(settings: Settings, leader: Any, objects: ObjectStore | None = None) -> Any:
    """Who rewrites -/all and -/search.json after writes: the leader of the instances on PostgreSQL
    (registry_gen.leader), else this process's IndexRefresher; None: each write rewrites them."""
    from registry_gen.refresher import IndexRefresher

    if not settings.index_refresh_seconds:
        return None
    return leader if leader is not None else IndexRefresher(settings, objects)


def _shut_down(server: Any, holder: dict[str, Any]) -> None:
    """Stops what `_start` started (all of it, or what it got to before it failed)."""
    if holder.get("watcher") is not None:
        holder["watcher"].stop()
    server.close()
    if holder.get("deliverer") is not None:
        holder["deliverer"].stop()
    if holder.get("refresher") is not None:
        holder["refresher"].flush()  # what the last writes deferred, before the process goes
    if holder.get("leader") is not None:
        holder["leader"].stop()  # its term ends with its session: another instance leads within a tick
    if holder.get("store") is not None:
        holder["store"].close()


def _remind_upgrade_steps(store: Any) -> None:
    """Until an operator runs it, every start says which upgrade step is still to do (docs/operating/upgrades.md)."""
    from user_api.sqlstore import BIND_RECORDED_MAINTAINERS

    if BIND_RECORDED_MAINTAINERS in store.pending_upgrade_steps():
        typer.echo(
            "warning: the accounts come from a release before maintainers were bound to accounts: their "
            "packages' maintainers cannot publish until an administrator runs `registry-gen owner bind-recorded` "
            "(docs/operating/upgrades.md)",
            err=True,
        )


def _sweep_temp_files(settings: Settings) -> list[Path]:
    from registry_gen.build import build_lock
    from registry_gen.writer import sweep_temp_files

    with build_lock(settings):
        return sweep_temp_files(settings.content_dir, settings.out_dir, settings.state_folder)


def register(app: typer.Typer, settings_from_options: Callable[..., Settings]) -> None:
    """Adds `serve` and `api` to the registry-gen CLI (entry point user_api_server)."""

    @app.command("serve")
    def serve(
        content_dir: Annotated[Path | None, typer.Argument(help="Folder of archives (default from config, else ./content).")] = None,
        out: Annotated[Path | None, typer.Option("--out", "-o", help="Output folder (default from config, else ./public).")] = None,
        host: HostOption = None,
        port: PortOption = None,
        base_url: BaseUrlOption = None,
        threads: ThreadsOption = DEFAULT_THREADS,
        watch: Annotated[bool, typer.Option("--watch", help="Also rebuild when archives are dropped into or removed from CONTENT_DIR.")] = False,
        config: ConfigOption = None,
    ) -> None:
        """Build content/ and serve the registry (files and API) on one address."""
        settings = settings_from_options(config, content_dir=content_dir, out_dir=out, host=host, port=port, base_url=base_url)
        _run(settings, static=True, threads=threads, explicit_base_url=base_url is not None, trusted_proxy=None, watch=watch)

    @app.command("api")
    def api(
        out: Annotated[Path | None, typer.Option("--out", "-o", help="Output folder the static host serves.")] = None,
        host: HostOption = None,
        port: PortOption = None,
        base_url: BaseUrlOption = None,
        threads: ThreadsOption = DEFAULT_THREADS,
        trusted_proxy: Annotated[
            str | None,
            typer.Option("--trusted-proxy", help="Address of the reverse proxy whose X-Forwarded-For is believed (rate limits, token CIDRs)."),
        ] = None,
        config: ConfigOption = None,
    ) -> None:
        """Serve only the write/user API (behind a static host that serves the tree)."""
        settings = settings_from_options(config, out_dir=out, host=host, port=port, base_url=base_url)
        _run(settings, static=False, threads=threads, explicit_base_url=base_url is not None, trusted_proxy=trusted_proxy)
