"""`registry-gen host-config …` (configuration for the host serving the tree) and `registry-gen deploy`.

Thin typer layers over `registry_gen.hosting` (pure generators) and `registry_gen.deploy`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import typer

from registry_gen.cli_options import ConfigOption
from registry_gen.errors import ConfigError
from registry_gen.settings import Settings

SettingsFactory = Callable[..., Settings]
TreeOption = Annotated[Path | None, typer.Option("--tree", help="The built tree (default: out_dir from the config, else ./public).")]
MaxAgeOption = Annotated[
    int, typer.Option("--document-max-age", min=0, help="Seconds clients may reuse a package document before revalidating.")
]
FromBucketOption = Annotated[
    bool,
    typer.Option(
        "--from-bucket",
        help="Serve reads from the tree bucket (`tree:`, else `storage:`/_tree; endpoint from storage_endpoint_url or $AWS_ENDPOINT_URL) instead of the tree folder. The tree prefix must be public-read, unless --private-bucket.",
    ),
]
PrivateBucketOption = Annotated[
    bool,
    typer.Option(
        "--private-bucket",
        help="With --from-bucket: the tree bucket refuses anonymous reads; nginx reads each file with a URL the API presigns for exactly that key in its read decision (needs --api-upstream; --read-cache-seconds at most 60).",
    ),
]


def default_listen(base_url: str) -> str:
    """'http://127.0.0.1:4873/' -> '127.0.0.1:4873'; anything without an explicit http port -> '80'."""
    parts = urlsplit(base_url)
    if parts.scheme == "http" and parts.port:
        return f"{parts.hostname}:{parts.port}"
    return "80"


def default_max_body_size(settings: Settings) -> str:
    """A publish body is the tarball in base64 (4/3 of its size) plus the JSON around it."""
    megabytes = settings.limits.max_archive_bytes * 4 // 3 // (1024 * 1024) + 2
    return f"{megabytes}m"


def _write_text(text: str, out: Path | None) -> None:
    if out is None or str(out) == "-":
        sys.stdout.write(text)
        return
    from registry_gen.writer import atomic_write_bytes

    atomic_write_bytes(out, text.encode("utf-8"))
    typer.echo(f"wrote {out}", err=True)


def private_packages(settings: Settings) -> list[str]:
    """Packages in the built tree that the read rules do not let everyone read."""
    from registry_gen.state import open_state

    if not settings.packages.in_force or not settings.state_file.exists():
        return []
    with open_state(settings).view() as state:
        return sorted(name for name in state.present_names() if not settings.packages.is_public(name))


def refuse_private_upload(settings: Settings, include_private: bool) -> None:
    """An object store cannot run the read check: private packages would become public."""
    private = private_packages(settings)
    if private and not include_private:
        shown = ", ".join(private[:5]) + (f" and {len(private) - 5} more" if len(private) > 5 else "")
        raise ConfigError(
            f"deploy: {len(private)} package(s) are private under the read rules ({shown}); a bucket would serve them to "
            "anyone. Serve the tree with nginx or registry-gen serve, or pass --include-private if the bucket itself is private"
        )


def register(app: typer.Typer, settings_from_options: SettingsFactory) -> None:
    host = typer.Typer(help="Configuration for the web server or object store that serves the tree.", no_args_is_help=True)
    _register_nginx(host, settings_from_options)
    _register_object_store(host, settings_from_options)
    app.add_typer(host, name="host-config")
    _register_deploy(app, settings_from_options)


def _register_nginx(host: typer.Typer, settings_from_options: SettingsFactory) -> None:
    @host.command("nginx")
    def nginx_command(
        out: Annotated[Path | None, typer.Option("--out", "-o", help="Write the config here (default: stdout).")] = None,
        listen: Annotated[str | None, typer.Option("--listen", help="nginx `listen` value (default: from base_url, else 80).")] = None,
        api_upstream: Annotated[
            list[str] | None,
            typer.Option(
                "--api-upstream",
                help="HOST:PORT of `registry-gen api`; writes go there. Repeat it for several instances (one upstream, a dead one skipped). Without it the tree is read-only.",
            ),
        ] = None,
        server_name: Annotated[str, typer.Option("--server-name", help="nginx `server_name`.")] = "_",
        standalone: Annotated[
            bool, typer.Option("--standalone", help="A complete nginx.conf for `nginx -p RUNTIME_DIR -c FILE` (default: a conf.d/ snippet).")
        ] = False,
        user: Annotated[str | None, typer.Option("--user", help="With --standalone under root: the workers' user.")] = None,
        workers: Annotated[str, typer.Option("--workers", help="With --standalone: worker_processes.")] = "auto",
        access_log: Annotated[
            bool, typer.Option("--access-log", help="With --standalone: log requests to access.log in the runtime folder (combined format, what `registry-gen stats` counts).")
        ] = False,
        document_max_age: MaxAgeOption = 0,
        read_cache_seconds: Annotated[
            int, typer.Option("--read-cache-seconds", min=0, help="With read rules: seconds nginx reuses a read decision.")
        ] = 10,
        read_cache_path: Annotated[
            str | None,
            typer.Option("--read-cache-path", help="With read rules: folder of cached decisions (default: read_cache in the runtime folder with --standalone, else /var/cache/nginx/registry-gen-read)."),
        ] = None,
        from_bucket: FromBucketOption = False,
        private_bucket: PrivateBucketOption = False,
        tree: TreeOption = None,
        config: ConfigOption = None,
    ) -> None:
        """nginx config: JSON documents for every scoped-name spelling, JSON errors, caching, gzip, writes to the API."""
        from registry_gen.hosting import nginx_config, nginx_site

        settings = settings_from_options(config, out_dir=tree)
        if urlsplit(settings.base_url).path not in ("", "/"):
            typer.echo(
                f"note: base_url {settings.base_url} has a path; this config serves the tree at /, so put it behind a proxy that strips the path",
                err=True,
            )
        read_cache = (read_cache_path or ("read_cache" if standalone else "/var/cache/nginx/registry-gen-read"), read_cache_seconds)
        common = _nginx_common(settings, server_name, document_max_age, read_cache)
        common.update(bucket_reads(settings, from_bucket, private_bucket, read_cache))
        listen_value = listen or default_listen(settings.base_url)
        try:
            if standalone:
                text = nginx_config(
                    settings.out_dir, listen_value, api_upstream, worker_processes=workers, user=user, access_log=access_log, **common
                )
            else:
                text = nginx_site(settings.out_dir, listen_value, api_upstream, **common)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        _write_text(text, out)


def _nginx_common(settings: Settings, server_name: str, document_max_age: int, read_cache: tuple[str, int]) -> dict[str, Any]:
    """The nginx config's arguments that a snippet and a standalone config share."""
    common: dict[str, Any] = {
        "server_name": server_name,
        "document_max_age": document_max_age,
        "max_body_size": default_max_body_size(settings),
    }
    if settings.packages.proxies:
        common["proxied"] = [(rule.regex, rule.proxy is not None) for rule in settings.packages.rules]
    if settings.purge.enabled:
        from registry_gen.purge import shared_cache

        common["shared_cache"] = shared_cache(settings.purge)
    if settings.packages.in_force:
        from registry_gen.nginx_access import ReadCheck

        common["read_check"] = ReadCheck(*read_cache)
    return common


def bucket_reads(settings: Settings, from_bucket: bool, private: bool, read_cache: tuple[str, int]) -> dict[str, Any]:
    """The nginx config's arguments for `--from-bucket` (and `--private-bucket`: a read check that signs)."""
    if private and not from_bucket:
        raise ConfigError("--private-bucket: the tree is read from a bucket only with --from-bucket; add it or drop --private-bucket")
    if not from_bucket:
        return {}
    return {"bucket": bucket_origin(settings, private)} | ({"read_check": signed_read_check(read_cache)} if private else {})


def bucket_origin(settings: Settings, private: bool = False) -> Any:
    """Where `registry-gen api` with `storage:` puts the built tree, as an nginx origin."""
    from registry_gen.hosting import BucketOrigin
    from registry_gen.objectstore import reader_endpoint, tree_location

    if settings.storage is None:
        raise ConfigError("--from-bucket: the config has no storage: (s3://BUCKET/PREFIX), so the tree is in no bucket; set it or drop --from-bucket")
    if settings.packages.in_force and not private:
        typer.echo(
            "note: read rules guard nginx only; a public-read tree bucket serves private packages to anyone asking it directly "
            "(keep the bucket private and add --private-bucket)",
            err=True,
        )
    if settings.tree_readers == "any":
        typer.echo(
            "note: tree_readers is any, so each package document is uploaded twice (also under <name>, for readers without "
            "this config); if only this config reads the tree bucket, set tree_readers: nginx (docs/deploying/object-store.md)",
            err=True,
        )
    location = tree_location(settings)
    return BucketOrigin(reader_endpoint(settings), location.bucket, location.prefix, private)


def signed_read_check(read_cache: tuple[str, int]) -> Any:
    """The read check of a private tree bucket: asked for every read (it signs the URL), its
    answers kept less long than the URLs they carry stay valid."""
    from registry_gen.nginx_access import ReadCheck
    from registry_gen.objectstore import PRESIGN_SECONDS

    path, seconds = read_cache
    if seconds > PRESIGN_SECONDS // 2:
        raise ConfigError(
            f"--read-cache-seconds {seconds}: with --private-bucket a kept decision carries URLs valid {PRESIGN_SECONDS} s; "
            f"keep it at most {PRESIGN_SECONDS // 2}"
        )
    return ReadCheck(path, seconds)


def _register_object_store(host: typer.Typer, settings_from_options: SettingsFactory) -> None:
    @host.command("object-store")
    def object_store_command(
        out: Annotated[Path | None, typer.Option("--out", "-o", help="Write the list here (default: stdout).")] = None,
        prefix: Annotated[str, typer.Option("--prefix", help="Key prefix in the bucket.")] = "",
        document_max_age: MaxAgeOption = 0,
        tree: TreeOption = None,
        config: ConfigOption = None,
    ) -> None:
        """JSON lines {key, source, content_type, cache_control} for uploading the tree with any tool."""
        from registry_gen.deploy import tree_files
        from registry_gen.hosting import upload_plan

        settings = settings_from_options(config, out_dir=tree)
        plan = upload_plan(tree_files(settings.out_dir), prefix=prefix, document_max_age=document_max_age)
        lines = [
            json.dumps({"key": u.key, "source": u.source, "content_type": u.content_type, "cache_control": u.cache_control})
            for u in plan
        ]
        _write_text("".join(line + "\n" for line in lines), out)


def _register_deploy(app: typer.Typer, settings_from_options: SettingsFactory) -> None:
    @app.command("deploy")
    def deploy_command(
        url: Annotated[str, typer.Argument(help="s3://BUCKET or s3://BUCKET/PREFIX")],
        endpoint_url: Annotated[
            str | None, typer.Option("--endpoint-url", help="S3-compatible endpoint (MinIO, R2, moto…); default AWS.")
        ] = None,
        region: Annotated[str | None, typer.Option("--region", help="Bucket region (default from the AWS config).")] = None,
        delete: Annotated[bool, typer.Option("--delete", help="Delete objects under the prefix that the tree no longer has.")] = False,
        force: Annotated[bool, typer.Option("--force", help="Upload every object, even unchanged ones (refreshes headers).")] = False,
        website: Annotated[
            bool, typer.Option("--website/--no-website", help="Configure static website hosting (index and JSON error document).")
        ] = True,
        public_read: Annotated[
            bool,
            typer.Option("--public-read", help="Set a bucket policy letting anyone read the objects (the bucket must allow public policies)."),
        ] = False,
        jobs: Annotated[int, typer.Option("--jobs", min=1, max=64, help="Parallel uploads.")] = 8,
        document_max_age: MaxAgeOption = 0,
        include_private: Annotated[
            bool,
            typer.Option("--include-private", help="Upload even packages the read rules keep private (the bucket cannot check reads)."),
        ] = False,
        tree: TreeOption = None,
        config: ConfigOption = None,
    ) -> None:
        """Upload the built tree to an S3-style bucket with the right Content-Type and Cache-Control per object."""
        from registry_gen.build import build_lock
        from registry_gen.deploy import deploy_tree, make_client, parse_s3_url
        from registry_gen.errors import LockTimeout

        settings = settings_from_options(config, out_dir=tree)
        refuse_private_upload(settings, include_private)
        target = parse_s3_url(url)
        client = make_client(endpoint_url=endpoint_url, region=region)
        lock = build_lock(settings)
        try:
            with lock.acquire(timeout=600):  # a build or a publish must not change the tree mid-upload
                result = deploy_tree(
                    settings.out_dir,
                    target,
                    client,
                    delete=delete,
                    force=force,
                    website=website,
                    public_read=public_read,
                    document_max_age=document_max_age,
                    jobs=jobs,
                )
        except TimeoutError as exc:
            raise LockTimeout(f"another build holds {settings.lock_file}") from exc
        typer.echo(f"deployed {settings.out_dir} to {target}: {result.summary()}")
