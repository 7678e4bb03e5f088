"""What each kind of static host needs to serve the tree right (pure functions, no I/O).

* nginx: `nginx_site()` (an http-context snippet for conf.d/) and `nginx_config()` (a complete
  nginx.conf to run with `nginx -p DIR -c FILE`). Package documents as `application/json`, every
  scoped-name spelling, JSON error bodies, immutable tarballs, revalidated documents,
  precompressed `.gz` siblings, `Accept` negotiation of the abbreviated document, and writes
  routed by method to `registry-gen api`.
* Object stores (S3 and friends): `object_headers()` gives each file's Content-Type and
  Cache-Control, `upload_plan()` the keys to upload and in which order.
* Hosts without configuration (GitHub Pages): the build writes `.nojekyll` and a JSON `404.html`
  (see `STATIC_EXTRAS`); see docs/deploying/one-machine.md for what such hosts can and cannot do.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from registry_gen.layout import (
    ABBREVIATED_DOCUMENT,
    ABBREVIATED_TYPE,
    API_READ_PREFIXES,
    ERROR_CACHE,
    IMMUTABLE_CACHE,
    JSON_TYPE,
    NOJEKYLL,
    NOT_FOUND_DOCUMENT,
    PACKAGE_DOCUMENT,
    PAGES_NOT_FOUND,
    TARBALL_TYPE,
    USER_API_EXACT,
    USER_API_PREFIXES,
    WEB_ROOT,
)
from registry_gen.purge import SharedCache
from registry_gen.signing import KEYS_DOCUMENT

if TYPE_CHECKING:  # jinja2 and the nginx read check load with the first config written, not with the build
    import jinja2

    from registry_gen.nginx_access import ReadCheck

NOT_FOUND_BODY = b'{"error":"not found"}\n'
# Files the build writes for hosts that cannot be configured: relative path -> bytes.
STATIC_EXTRAS: dict[str, bytes] = {NOJEKYLL: b"", NOT_FOUND_DOCUMENT: NOT_FOUND_BODY, PAGES_NOT_FOUND: NOT_FOUND_BODY}
# The unfiltered search document lives away from /-/v1/search on purpose (registry_gen.layout).
LEGACY_SEARCH_FOLDER = "-/v1/search"  # where trees built before kept it; the build removes it
TEMPLATES = Path(__file__).resolve().parent / "templates"  # the nginx *.conf.j2 files
# Files of the tree below the API's prefixes: the registry's public signing keys (registry_gen.signing).
STATIC_UNDER_API = ("/" + KEYS_DOCUMENT,)


_TAG_FOLDER = re.compile(r"^[A-Za-z][A-Za-z0-9._~-]{0,127}$")


def tag_documents(packument: Mapping[str, Any]) -> dict[str, Any]:
    """`GET /<name>/<tag>` answers: tag -> the version object it points at.

    pnpm 12 resolves a bare `pnpm add <name>` (with minimumReleaseAge 0) by fetching
    `/<name>/latest` and gives up on a 404, so the tree carries `<name>/<tag>/index.html` for
    every dist-tag that can be a folder name beside the package's own files.
    """
    documents: dict[str, Any] = {}
    versions = packument.get("versions") or {}
    for tag, version in (packument.get("dist-tags") or {}).items():
        if not _TAG_FOLDER.match(tag) or tag in (PACKAGE_DOCUMENT, ABBREVIATED_DOCUMENT) or tag.endswith(".gz"):
            continue
        if version in versions:
            documents[tag] = versions[version]
    return documents


def document_cache(max_age: int = 0, shared: SharedCache | None = None) -> str:
    """Package documents change on every publish: clients cache briefly, then revalidate with the
    ETag; a shared cache that is purged keeps them until the purge (s-maxage)."""
    if max_age < 0:
        raise ValueError("max_age must not be negative")
    own = f"public, max-age={max_age}, must-revalidate"
    return own if shared is None else f"{own}, s-maxage={shared.max_age}"


# ---------------------------------------------------------------- objects in the tree


class ObjectKind(str, Enum):
    TARBALL = "tarball"
    PACKAGE_DOCUMENT = "package-document"
    ABBREVIATED_DOCUMENT = "abbreviated-document"
    REGISTRY_DOCUMENT = "registry-document"  # generator-owned JSON under -/ (dist-tags, ping, all, search, 404)
    WEB = "web"  # the HTML site under -/web/
    PRECOMPRESSED = "precompressed"  # .gz siblings: only a server that negotiates can use them
    PRIVATE = "private"  # an old in-tree .registry-gen/, temp files, dotfiles: never published
    OTHER = "other"  # not written by the build (robots.txt put there by hand, say)


@dataclass(frozen=True)
class ObjectHeaders:
    content_type: str
    cache_control: str


def classify(relative: str) -> ObjectKind:
    """The kind of a file, from its path relative to the tree's root (POSIX separators)."""
    parts = relative.split("/")
    if any(part.startswith(".") for part in parts) or not relative:
        return ObjectKind.PRIVATE
    if relative.endswith(".gz"):
        return ObjectKind.PRECOMPRESSED
    if parts[0] == "-":
        return ObjectKind.WEB if relative.startswith(WEB_ROOT + "/") else ObjectKind.REGISTRY_DOCUMENT
    if relative == PAGES_NOT_FOUND:
        return ObjectKind.REGISTRY_DOCUMENT
    if len(parts) >= 3 and parts[-2] == "-" and parts[-1].endswith(".tgz"):
        return ObjectKind.TARBALL
    if parts[-1] == ABBREVIATED_DOCUMENT:
        return ObjectKind.ABBREVIATED_DOCUMENT
    if parts[-1] == PACKAGE_DOCUMENT:
        return ObjectKind.PACKAGE_DOCUMENT
    # The build writes nothing else; a file someone added by hand is typed by its extension.
    return ObjectKind.OTHER


def _web_type(relative: str) -> str:
    import mimetypes

    guessed, _ = mimetypes.guess_type(relative, strict=False)
    if guessed is None:
        return TARBALL_TYPE
    if guessed.startswith("text/") or guessed in ("application/javascript", "image/svg+xml"):
        return f"{guessed}; charset=utf-8"
    return guessed


def object_headers(relative: str, *, document_max_age: int = 0, shared: SharedCache | None = None) -> ObjectHeaders | None:
    """Content-Type and Cache-Control for one file, or None if it must not be published; `shared`:
    a purged cache in front (registry.yaml `purge:`) may keep documents until their purge."""
    kind = classify(relative)
    if kind in (ObjectKind.PRIVATE, ObjectKind.PRECOMPRESSED):
        return None
    if kind is ObjectKind.TARBALL:
        return ObjectHeaders(TARBALL_TYPE, IMMUTABLE_CACHE)
    if kind in (ObjectKind.WEB, ObjectKind.OTHER):
        return ObjectHeaders(_web_type(relative), document_cache(document_max_age, shared))
    if kind is ObjectKind.ABBREVIATED_DOCUMENT:
        return ObjectHeaders(ABBREVIATED_TYPE, document_cache(document_max_age, shared))
    return ObjectHeaders(JSON_TYPE, document_cache(document_max_age, shared))


@dataclass(frozen=True)
class Upload:
    """One object to put: `key` in the bucket, holding the bytes of `source` (a tree path)."""

    key: str
    source: str
    content_type: str
    cache_control: str
    phase: int  # 0 tarballs, 1 a package's own files, 2 the rest: a document never names a missing tarball


def _aliases(relative: str, kind: ObjectKind) -> list[str]:
    """Extra keys for one file, so a plain object store (no index documents) answers `/<name>`.

    An S3 REST endpoint (and moto, and CloudFront over a REST origin) never maps `/<name>` to
    `<name>/index.html`; its website endpoint does, but only with a redirect. Storing each JSON
    document under its folder's key as well makes both answer `/<name>` directly. S3 keys are
    flat, so the object `@scope/name` and the tarballs below `@scope/name/-/` coexist.
    """
    folder, _, filename = relative.rpartition("/")
    if filename != PACKAGE_DOCUMENT or not folder:
        return []
    if kind is ObjectKind.WEB:
        return [folder + "/"]  # pages link with explicit index.html; this is for typed-in folder URLs
    return [folder]


# A package's own files besides its documents: its dist-tags and its web pages.
_PACKAGE_OWN_PREFIXES = ("-/package/", f"{WEB_ROOT}/package/")


def _package_own(relative: str, kind: ObjectKind) -> bool:
    """Whether a file belongs to one package (phase 1): its documents, dist-tags and web pages name
    its versions, whose tarballs go first, so they go together (one wave of a publish's upload, not
    two). The registry-wide files (-/all, the search document, front, browse and search pages) name
    other packages, whose documents may be in the same upload: they wait for phase 1 to be stored."""
    return kind in (ObjectKind.PACKAGE_DOCUMENT, ObjectKind.ABBREVIATED_DOCUMENT) or relative.startswith(_PACKAGE_OWN_PREFIXES)


def upload_plan(
    relatives: Iterable[str], *, prefix: str = "", document_max_age: int = 0, shared: SharedCache | None = None, folder_keys: bool = True
) -> list[Upload]:
    """Every object to upload for the given tree files, tarballs first, sorted within a phase.
    `folder_keys`: each JSON document under its folder's key too (`_aliases`), for readers that do
    not map a folder to its index.html; False where only the emitted nginx config reads the bucket
    (registry.yaml `tree_readers: nginx`)."""
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    uploads: list[Upload] = []
    for relative in relatives:
        headers = object_headers(relative, document_max_age=document_max_age, shared=shared)
        if headers is None:
            continue
        kind = classify(relative)
        phase = 0 if kind is ObjectKind.TARBALL else 1 if _package_own(relative, kind) else 2
        for key in [relative, *(_aliases(relative, kind) if folder_keys else [])]:
            uploads.append(Upload(prefix + key, relative, headers.content_type, headers.cache_control, phase))
    return sorted(uploads, key=lambda u: (u.phase, u.key))


def website_configuration(prefix: str = "") -> dict[str, dict[str, str]]:
    """The bucket website settings: folder index documents, and the JSON 404 as error document."""
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return {"IndexDocument": {"Suffix": PACKAGE_DOCUMENT}, "ErrorDocument": {"Key": prefix + NOT_FOUND_DOCUMENT}}


def public_read_policy(bucket: str, prefix: str = "") -> str:
    """A bucket policy letting anyone GET the objects under the prefix (and nothing else)."""
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    statement = {
        "Sid": "RegistryGenPublicRead",
        "Effect": "Allow",
        "Principal": "*",
        "Action": "s3:GetObject",
        "Resource": f"arn:aws:s3:::{bucket}/{prefix}*",
    }
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]})


# ---------------------------------------------------------------- nginx


def _quoted(value: str) -> str:
    """An nginx string literal; refuses characters that would end or split the directive."""
    if any(ch in value for ch in '"\\;{}\n\r$') or not value:
        raise ValueError(f"unsafe value for an nginx config: {value!r}")
    return f'"{value}"'


def _plain(value: str, what: str) -> str:
    """A bare directive argument (listen, server_name, upstream, sizes): no quoting, no injection."""
    if not value or any(ch in value for ch in '"\';{}#$\\\n\r'):
        raise ValueError(f"unsafe {what} for an nginx config: {value!r}")
    return value


# Where a request nginx cannot parse is answered (error_page 400): never a file of the tree.
BAD_REQUEST_PATH = "/-/registry-gen/bad-request"
_ERRORS = {
    400: "bad request",
    401: "authentication required: log in (npm login) and send the token",
    403: "forbidden",
    404: "not found",
    405: "method not allowed: this registry is read-only",
    413: "request body too large",
    500: "internal server error",
    502: "the registry API is not running",
    503: "service unavailable",
    504: "the registry API did not answer in time",
}


@dataclass(frozen=True)
class BucketOrigin:
    """Reads from the tree bucket: `endpoint` (http(s)://HOST[:PORT], path-style), the bucket, the
    tree's prefix; `private`: the bucket refuses anonymous reads, so nginx reads each key with the
    presigned URL its read decision hands it (the API's READ_CHECK_PATH, registry_gen.nginx_access)."""

    endpoint: str
    bucket: str
    prefix: str
    private: bool = False


# The characters a served path may hold to be read from the bucket as the key it spells: no
# character a key would need encoded (?, #, %, space, control characters), which would change
# what the bucket is asked. npm names, versions and tags never hold one.
TREE_KEY_CHARACTERS = "A-Za-z0-9@._~!*'()+,=:/-"
_BUCKET_PART = re.compile(r"^[A-Za-z0-9._~!*'()+,=:@-]+(?:/[A-Za-z0-9._~!*'()+,=:@-]+)*$")


def _origin_values(api: bool, read_check: bool, bucket: BucketOrigin | None, proxied: Sequence[tuple[str, bool]]) -> dict[str, Any]:
    """The origins, checked together: read rules and a private bucket need the API; the mirror needs the folder."""
    if read_check and not api:
        raise ValueError("read rules need the API to check reads: give the API address (--api-upstream)")
    if bucket is not None and bucket.private and not (api and read_check):
        raise ValueError("a private tree bucket is read with the URLs the API signs: give the API address (--api-upstream) and a read check")
    if bucket is not None and any(proxies for _, proxies in proxied):
        raise ValueError("proxied packages (proxy: in packages:) are answered from the API's own folder: serve the tree from the folder, not the bucket")
    return _bucket_values(bucket)


def _bucket_values(origin: BucketOrigin | None) -> dict[str, Any]:
    """The template's values for a bucket origin: the upstream server, the Host header, the path
    before each key (`/BUCKET/PREFIX`), whether it is private; all None for the folder."""
    if origin is None:
        return {"bucket_server": None, "bucket_scheme": None, "bucket_host": None, "bucket_path": None, "bucket_private": False}
    from urllib.parse import urlsplit

    parts = urlsplit(origin.endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/") or parts.query:
        raise ValueError(f"the bucket endpoint must be http(s)://HOST[:PORT]; got {origin.endpoint!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    path = "/".join(p for p in (origin.bucket, origin.prefix) if p)
    if not _BUCKET_PART.match(path):
        raise ValueError(f"the tree bucket and prefix cannot be written into an nginx config: {path!r}")
    return {
        "bucket_server": _plain(f"{parts.hostname}:{port}", "bucket endpoint"),
        "bucket_scheme": parts.scheme,
        "bucket_host": _quoted(parts.netloc),
        "bucket_path": "/" + path,
        "bucket_private": origin.private,
        "key_characters": TREE_KEY_CHARACTERS,
    }


def nginx_site(
    out_dir: Path | str,
    listen: str,
    api_upstream: str | Sequence[str] | None = None,
    *,
    server_name: str = "_",
    document_max_age: int = 0,
    max_body_size: str = "300m",
    read_check: ReadCheck | None = None,
    proxied: Sequence[tuple[str, bool]] = (),
    shared_cache: SharedCache | None = None,
    bucket: BucketOrigin | None = None,
) -> str:
    """An http-context snippet (maps, upstream, server) for /etc/nginx/conf.d/, serving `out_dir`
    (or, with `bucket`, the tree bucket: path-style proxy_pass). `listen`: what nginx's takes.
    `api_upstream` ("127.0.0.1:4874", or several: one upstream block, a dead instance skipped) is
    where `registry-gen api` listens: every method but GET and HEAD, and the GET endpoints that
    depend on the caller, go there, so one URL serves reads and writes. Without it the tree is
    read-only and writes get a JSON 405.
    `shared_cache`: a purged cache in front (registry.yaml `purge:`): its lifetime and key header.
    `read_check`: the read rules are in force; every read is checked by the API (nginx_access).
    `proxied`: the `packages:` patterns in order, as (anchored regex, whether it proxies): the
    documents of proxied names go through the API (the mirror), and their missing tarballs.
    Every value reaching the template is checked here (no directive can be split or injected).
    """
    servers = _api_servers(api_upstream)
    origin = _origin_values(bool(servers), read_check is not None, bucket, proxied)
    root = Path(out_dir).resolve()
    from registry_gen.nginx_access import http_part, server_part

    return _templates().get_template("nginx_site.conf.j2").render(
        root=root,
        root_literal=_quoted(str(root)),
        root_alias=_quoted(str(root) + "/"),
        proxied=_proxied_patterns(proxied, servers[0] if servers else None),
        listen=_plain(listen, "listen"),
        server_name=_plain(server_name, "server_name"),
        max_body_size=_plain(max_body_size, "size"),
        api_upstream=bool(servers),
        api_servers=servers,
        api_matches=[f"^~ {p}" for p in (*API_READ_PREFIXES, *USER_API_PREFIXES)] + [f"= {p}" for p in USER_API_EXACT],
        errors=_ERRORS,
        bad_request_path=BAD_REQUEST_PATH,
        # With read rules, the API's 403 (a token without access) is served as the 404 of a missing package.
        denied={403} if read_check is not None else set(),
        read_check=read_check is not None,
        http_part=http_part(read_check) if read_check is not None else "",
        server_part=server_part(read_check, signed=origin["bucket_private"]) if read_check is not None else "",
        static_json_paths=STATIC_UNDER_API,
        **_cache_values(document_max_age, shared_cache),
        **origin,
        package_document=PACKAGE_DOCUMENT,
        abbreviated_document=ABBREVIATED_DOCUMENT,
        abbreviated_type=ABBREVIATED_TYPE,
        json_type=JSON_TYPE,
        tarball_type=TARBALL_TYPE,
        web_root=WEB_ROOT,
        pages_not_found=PAGES_NOT_FOUND,
        not_found_document=NOT_FOUND_DOCUMENT,
    )


def _cache_values(document_max_age: int, shared_cache: SharedCache | None) -> dict[str, str | None]:
    """The caching headers of the nginx config: each kind of answer's Cache-Control, and the
    surrogate-key header a purged cache in front reads (None: none)."""
    key_header = None if shared_cache is None or shared_cache.key_header is None else _plain(shared_cache.key_header, "key header")
    return {
        "document_cache": document_cache(document_max_age, shared_cache),
        "static_cache": document_cache(0, shared_cache),
        "immutable_cache": IMMUTABLE_CACHE,
        "error_cache": ERROR_CACHE,
        "cache_key_header": key_header,
    }


def _api_servers(api_upstream: str | Sequence[str] | None) -> list[str]:
    """The API instances, checked: one address, several, or none."""
    given = [api_upstream] if isinstance(api_upstream, str) else list(api_upstream or ())
    servers = [_plain(server, "API address") for server in given]
    if len(set(servers)) != len(servers):
        raise ValueError(f"an API address is given twice: {', '.join(servers)}")
    return servers


def _proxied_patterns(proxied: Sequence[tuple[str, bool]], api_upstream: str | None) -> list[tuple[str, bool]]:
    """The patterns for the proxied-name map, checked (none when nothing is proxied)."""
    if not any(proxies for _, proxies in proxied):
        return []
    if api_upstream is None:
        raise ValueError("proxied packages (proxy: in packages:) need the API to fetch them: give the API address (--api-upstream)")
    if any(ch in regex for regex, _ in proxied for ch in '"\';{}\n\r '):
        raise ValueError(f"a packages: pattern cannot be written into an nginx config: {proxied!r}")
    return list(proxied)


def nginx_config(
    out_dir: Path | str,
    listen: str,
    api_upstream: str | Sequence[str] | None = None,
    *,
    server_name: str = "_",
    document_max_age: int = 0,
    max_body_size: str = "300m",
    worker_processes: str = "auto",
    user: str | None = None,
    access_log: bool = False,
    read_check: ReadCheck | None = None,
    proxied: Sequence[tuple[str, bool]] = (),
    shared_cache: SharedCache | None = None,
    bucket: BucketOrigin | None = None,
) -> str:
    """A complete nginx.conf around `nginx_site()`, for `nginx -p RUNTIME_DIR -c FILE`.

    pid file, error log and temp folders are relative, so they land in RUNTIME_DIR: one
    instance per folder, no root needed (unless `listen` is a port below 1024). `user` only
    matters when the master runs as root: workers then run as that user instead of nobody.
    """
    site = nginx_site(
        out_dir, listen, api_upstream,
        server_name=server_name, document_max_age=document_max_age, max_body_size=max_body_size,
        read_check=read_check, proxied=proxied, shared_cache=shared_cache, bucket=bucket,
    )
    return _templates().get_template("nginx.conf.j2").render(
        site=site,
        user=_plain(user, "user") if user else None,
        worker_processes=_plain(worker_processes, "worker_processes"),
        access_log=access_log,
    )


@functools.cache
def _templates() -> jinja2.Environment:
    import jinja2

    """The nginx templates shipped in the package (registry_gen/templates/*.conf.j2). Not HTML:
    no autoescape; the values are checked by _plain/_quoted before they reach a template."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
