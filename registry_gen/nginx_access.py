"""The nginx pieces that enforce the read rules (registry_gen.access) in front of a static tree.

nginx asks `registry-gen api` (READ_CHECK_PATH, an `auth_request` subrequest carrying the
client's Authorization header and the original URI) whether the caller may read, and caches
each answer for a few seconds per package and credential, so a cold install asks once per
package rather than once per file. The API answers 200, 401 or 403; a 403 is served as the same
JSON 404 as a missing package, so names do not leak.
"""

from __future__ import annotations

from dataclasses import dataclass

READ_CHECK_PATH = "/-/registry-gen/read-access"
CACHE_ZONE = "registry_gen_read"


@dataclass(frozen=True)
class ReadCheck:
    cache_path: str  # where nginx keeps cached decisions (their keys hold the credentials: keep it private)
    cache_seconds: int = 10


def http_part(check: ReadCheck) -> str:
    """http-context lines: the decision cache and the package a request URI names (the cache key;
    `/@scope%2fname` and `/@scope/name/-/…` share it, so a document and its tarball ask once)."""
    if check.cache_seconds < 0:
        raise ValueError("the read decision cache time must not be negative")
    if any(ch in check.cache_path for ch in ' "\';{}$\\\n\r') or not check.cache_path:
        raise ValueError(f"unsafe read cache path for an nginx config: {check.cache_path!r}")
    name = r"(@[^/?%]+(?:/|%2[fF])[^/?]+|[^/?@][^/?]*)"
    return f"""
# Read rules: nginx asks `registry-gen api` whether the caller may read (auth_request) and keeps
# each answer {check.cache_seconds}s per package and credential. The cache keys hold the
# Authorization header: keep this folder private.
proxy_cache_path {check.cache_path} levels=1:2 keys_zone={CACHE_ZONE}:2m max_size=64m inactive=10m use_temp_path=off;
map $request_uri $registry_gen_read_key {{
    "~^/-/web/package/{name}" $1;
    "~^/-/package/{name}" $1;
    "~^/-/" "-";
    "~^/(@[^/?%]+)%2[fF]([^/?]+)" $1/$2;
    "~^/{name}" $1;
    default $request_uri;
}}
"""


def server_part(check: ReadCheck) -> str:
    """server-context lines: every read goes through the check; the check's own location."""
    return f"""    # Read rules (registry.yaml `packages:`): see the comment at the top of this file.
    auth_request {READ_CHECK_PATH};
    location = {READ_CHECK_PATH} {{
        internal;
        auth_request off;
        proxy_pass http://registry_gen_api;
        proxy_pass_request_body off;
        proxy_set_header Content-Length "";
        proxy_set_header Connection "";
        proxy_set_header Host $http_host;
        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;  # for tokens limited to networks
        proxy_set_header X-Original-URI $request_uri;
        proxy_cache {CACHE_ZONE};
        proxy_cache_key "$registry_gen_read_key $http_authorization";
        proxy_cache_valid 200 401 403 {check.cache_seconds}s;
        proxy_cache_lock on;
        proxy_ignore_headers Cache-Control Expires Set-Cookie Vary;
    }}
"""
