"""The nginx pieces that enforce the read rules (registry_gen.access) in front of a static tree.

nginx asks `registry-gen api` (READ_CHECK_PATH, an `auth_request` subrequest carrying the
client's Authorization header) whether the caller may read the path nginx is about to serve
(`$uri`: decoded, dot segments resolved, slashes merged) and caches each answer for a few
seconds per package, client address (tokens may be limited to networks) and credential, so a
cold install asks once per package rather than once per file. Request URIs spelled so that the path served is not the path written
(registry_gen.access.REFUSED_SPELLINGS) are refused before anything is asked or read. The API
answers 200, 401 or 403; a 403 is served as the same JSON 404 as a missing package, so names do
not leak.
"""

from __future__ import annotations

from dataclasses import dataclass

from registry_gen.access import REFUSED_SPELLINGS, SCOPED_NAME_SLASH

READ_CHECK_PATH = "/-/registry-gen/read-access"
SERVED_PATH_HEADER = "X-Registry-Gen-Path"  # the check's question: the path nginx serves ($uri)
# A private tree bucket (`--from-bucket --private-bucket`): the check is also asked for the URLs
# nginx reads the bucket with. It names the package document the Accept header picks; the answer
# carries three presigned paths (`/BUCKET/KEY?X-Amz-…`, registry_gen.objectstore.read_keys): the
# folder's document, its full document (where an abbreviated one is missing) and the path's own key.
SIGN_DOCUMENT_HEADER = "X-Registry-Gen-Document"
SIGNED_DOCUMENT_HEADER = "X-Registry-Gen-Signed-Document"
SIGNED_FULL_HEADER = "X-Registry-Gen-Signed-Full"
SIGNED_FILE_HEADER = "X-Registry-Gen-Signed-File"
# The variables nginx keeps them in, in read_keys' order.
SIGNED_VARIABLES = (
    ("$registry_gen_signed_document", SIGNED_DOCUMENT_HEADER),
    ("$registry_gen_signed_full", SIGNED_FULL_HEADER),
    ("$registry_gen_signed_file", SIGNED_FILE_HEADER),
)
CACHE_ZONE = "registry_gen_read"
# The characters of a package name (registry_gen.names: URL-safe, as old packages may be).
NAME_PART = "[A-Za-z0-9._~!*'()-]+"


@dataclass(frozen=True)
class ReadCheck:
    cache_path: str  # where nginx keeps cached decisions (their keys hold the credentials: keep it private)
    cache_seconds: int = 10


def http_part(check: ReadCheck) -> str:
    """http-context lines: the decision cache, the refused spellings, and the package the served
    path names (the cache key; `/@scope%2fname` and `/@scope/name/-/…` share it, so a document
    and its tarball ask once)."""
    if check.cache_seconds < 0:
        raise ValueError("the read decision cache time must not be negative")
    if any(ch in check.cache_path for ch in ' "\';{}$\\\n\r') or not check.cache_path:
        raise ValueError(f"unsafe read cache path for an nginx config: {check.cache_path!r}")
    name = f"(@{NAME_PART}/{NAME_PART}|{NAME_PART})(?:/|$)"
    refused = "".join(f'    "~^[^?]*(?:{pattern})" 1;\n' for pattern in REFUSED_SPELLINGS)
    return f"""
# Read rules: nginx asks `registry-gen api` whether the caller may read (auth_request) and keeps
# each answer {check.cache_seconds}s per package, client address and credential. The cache keys
# hold the Authorization header: keep this folder private.
proxy_cache_path {check.cache_path} levels=1:2 keys_zone={CACHE_ZONE}:2m max_size=64m inactive=10m use_temp_path=off;
# Request URIs refused before anything is read: spelled so that the path served would not be the
# path written (dot segments, empty segments, encoded slashes but a scoped name's one, control
# characters, a fragment). No npm client asks this way.
map $request_uri $registry_gen_refused {{
{refused}    "~{SCOPED_NAME_SLASH}" "";
    "~^[^?]*%2[fF]" 1;
    default "";
}}
# The package the served path reads, and the decision's cache key ("-": no package). Empty (the
# request is refused): the package part is not a package name, which no key could stand for.
map $registry_gen_read_path $registry_gen_read_key {{
    volatile;
    "~^/-/(?:web/)?package/{name}" $1;
    "~^/-/(?:web/)?package/." "";
    "~^/-/" "-";
    "~^/{name}" $1;
    "~^/." "";
    default "-";
}}
"""


def server_part(check: ReadCheck, *, signed: bool = False) -> str:
    """server-context lines: refusals, the path to decide on, the check and its own location;
    `signed`: the check also answers the presigned URLs of a private tree bucket."""
    cache_key = "$registry_gen_read_key $remote_addr $http_authorization"
    signing = ""
    if signed:
        # Each path (and document) has URLs of its own: the cached answer is the path's, not the package's.
        cache_key = "$registry_gen_read_path $registry_gen_document $remote_addr $http_authorization"
        signing = f"        proxy_set_header {SIGN_DOCUMENT_HEADER} $registry_gen_document;\n"
    return f"""    # Read rules (registry.yaml `packages:`): see the comments at the top of this file.
    if ($registry_gen_refused) {{
        return 404;
    }}
    # The path this request serves, kept for the check: its subrequest shares the variables but
    # has a $uri of its own (and runs these lines too). Set again after an internal redirect.
    if ($uri != {READ_CHECK_PATH}) {{
        set $registry_gen_read_path $uri;
    }}
    if ($registry_gen_read_key = "") {{
        return 404;
    }}
    auth_request {READ_CHECK_PATH};
{_signed_variables() if signed else ""}    location = {READ_CHECK_PATH} {{
        internal;
        auth_request off;
        proxy_pass http://registry_gen_api;
        proxy_pass_request_body off;
        proxy_set_header Content-Length "";
        proxy_set_header Connection "";
        proxy_set_header Host $http_host;
        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;  # for tokens limited to networks
        proxy_set_header {SERVED_PATH_HEADER} $registry_gen_read_path;
        proxy_set_header X-Original-URI $request_uri;
{signing}        proxy_cache {CACHE_ZONE};
        # The key and the address hold no space, so no other key and credential can spell this one.
        proxy_cache_key "{cache_key}";
        proxy_cache_valid 200 401 403 {check.cache_seconds}s;
        proxy_cache_lock on;
        proxy_ignore_headers Cache-Control Expires Set-Cookie Vary;
    }}
"""


def _signed_variables() -> str:
    """The presigned paths of the check's answer, for the bucket locations' proxy_pass. They stay
    in nginx: an auth_request answer's headers never reach the client."""
    return "".join(
        f"    auth_request_set {variable} $upstream_http_{header.lower().replace('-', '_')};\n"
        for variable, header in SIGNED_VARIABLES
    )
