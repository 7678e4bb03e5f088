"""The `uplinks:` of registry.yaml, in Verdaccio's shape (pure), and durations as Verdaccio writes them.

    uplinks:
      npmjs:
        url: https://registry.npmjs.org/
        timeout: 30s        # a request to the uplink that waits longer fails
        maxage: 2m          # a fetched document is fresh this long: the uplink is asked at most this often
        max_fails: 2        # failures in a row after which the uplink counts as down for fail_timeout
        fail_timeout: 5m    # how long a down uplink is left alone (stale copies are served, nothing is sent)
        retry: 2            # attempts after the first one, for what may mend (5xx, resets)
        auth: {type: bearer, token_env: NPM_TOKEN}
        untrusted: true     # release ages count from when this registry first saw a version, not the uplink's times

(The defaults are Verdaccio's.)

Verdaccio's keys this registry has no use for (`ca`, proxies, `agent_options`...) are refused
by name rather than ignored, so an operator never believes a setting holds that does not.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from registry_gen.errors import ConfigError

# Verdaccio's parseInterval: a bare number is seconds; `M` is 30 days, `y` 365.
DURATION_UNITS = {"": 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0,
                  "M": 2592000.0, "y": 31536000.0}  # fmt: skip
_TOKEN = re.compile(r"^((?:0|[1-9][0-9]*)(?:\.[0-9]+)?)(ms|s|m|h|d|w|M|y|)$")
KNOWN_KEYS = ("url", "timeout", "maxage", "max_fails", "fail_timeout", "retry", "auth", "headers", "untrusted", "cache")
UNSUPPORTED_KEYS = ("ca", "http_proxy", "https_proxy", "no_proxy", "strict_ssl", "agent_options")


def parse_duration(value: Any, where: str) -> float:
    """Seconds for `2m`, `12h`, `30d`, `1h 30m`, `100ms` or a bare number of seconds (Verdaccio's
    rules: space-separated parts, each unit smaller than the one before it)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where} must be a duration such as 2m, 12h or 30d; got {value!r}")
    total, last = 0.0, float("inf")
    for part in value.split():
        match = _TOKEN.match(part)
        unit = DURATION_UNITS.get(match.group(2), 0.0) if match else 0.0
        if match is None or unit >= last or (match.group(2) == "" and last != float("inf")):
            raise ConfigError(f"{where}: {value!r} is not a duration (write 2m, 12h, 30d or 1h 30m)")
        total += float(match.group(1)) * unit
        last = unit
    return total


def format_duration(seconds: float) -> str:
    """A duration the way an operator writes one (`3d`, `2h`, `90s`): for messages."""
    for unit in ("y", "w", "d", "h", "m", "s"):
        size = DURATION_UNITS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


@dataclass(frozen=True)
class Uplink:
    """One upstream registry. `token` is the Authorization value, sent to this uplink's origin only."""

    name: str
    url: str
    timeout: float = 30.0
    maxage: float = 120.0
    max_fails: int = 2
    fail_timeout: float = 300.0
    retry: int = 2
    untrusted: bool = False
    auth_scheme: str = "Bearer"
    token: str | None = field(default=None, repr=False)
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def origin(self) -> str:
        """What the import ledger records for what this uplink wrote (`importers.origins`)."""
        from registry_gen.importers.origins import registry_origin  # settings load this module: keep it light

        return registry_origin(self.url)


def parse_uplinks(data: Any, environ: Mapping[str, str] | None = None) -> dict[str, Uplink]:
    """The `uplinks:` mapping; ConfigError names the uplink and the key."""
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError("uplinks must be a mapping of names to {url: ...}")
    return {str(name): _uplink(str(name), spec, os.environ if environ is None else environ) for name, spec in data.items()}


def _uplink(name: str, spec: Any, environ: Mapping[str, str]) -> Uplink:
    where = f"uplinks.{name}"
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", name):
        raise ConfigError(f"uplinks: {name!r} is not an uplink name (letters, digits, . _ -)")
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{where} must be a mapping with at least url")
    for key in spec:
        if key in UNSUPPORTED_KEYS:
            raise ConfigError(f"{where}.{key} is a Verdaccio setting registry-gen does not support; remove it")
        if key not in KNOWN_KEYS:
            raise ConfigError(f"{where}: unknown key {key!r} (known: {', '.join(KNOWN_KEYS)})")
    url = spec.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ConfigError(f"{where}.url must be an http(s) URL; got {url!r}")
    if spec.get("cache", True) is not True:
        raise ConfigError(f"{where}.cache: registry-gen always keeps the tarballs it mirrors (they are immutable); remove the key")
    scheme, token = _auth(spec.get("auth"), where, environ)
    return Uplink(
        name, url if url.endswith("/") else url + "/",
        timeout=parse_duration(spec.get("timeout", "30s"), f"{where}.timeout"),
        maxage=parse_duration(spec.get("maxage", "2m"), f"{where}.maxage"),
        max_fails=_count(spec.get("max_fails", 2), f"{where}.max_fails"),
        fail_timeout=parse_duration(spec.get("fail_timeout", "5m"), f"{where}.fail_timeout"),
        retry=_count(spec.get("retry", 2), f"{where}.retry"),
        untrusted=_flag(spec.get("untrusted", False), f"{where}.untrusted"),
        auth_scheme=scheme, token=token, headers=_headers(spec.get("headers"), where),
    )  # fmt: skip


def _count(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"{where} must be a whole number (0 or more); got {value!r}")
    return value


def _flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where} must be true or false; got {value!r}")
    return value


def _auth(value: Any, where: str, environ: Mapping[str, str]) -> tuple[str, str | None]:
    """Verdaccio's `auth: {type: bearer|basic, token: ..., token_env: true|NAME}`."""
    if value is None:
        return "Bearer", None
    if not isinstance(value, Mapping) or str(value.get("type", "")).lower() not in ("bearer", "basic"):
        raise ConfigError(f"{where}.auth must be {{type: bearer or basic, token: ... or token_env: NAME}}")
    scheme = "Bearer" if str(value["type"]).lower() == "bearer" else "Basic"
    if "token" in value and isinstance(value["token"], str) and value["token"]:
        return scheme, value["token"]
    variable = value.get("token_env")
    variable = "NPM_TOKEN" if variable is True else variable
    if not isinstance(variable, str) or not variable:
        raise ConfigError(f"{where}.auth needs token or token_env (true reads NPM_TOKEN)")
    if not environ.get(variable):
        raise ConfigError(f"{where}.auth.token_env: the environment variable {variable} is not set")
    return scheme, environ[variable]


def _headers(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ConfigError(f"{where}.headers must be a mapping of header names to strings")
    for key, text in value.items():
        if not re.match(r"^[A-Za-z0-9-]+$", key) or any(ch in text for ch in "\r\n\0"):
            raise ConfigError(f"{where}.headers: {key!r} is not a header a request can carry")
    return tuple(value.items())
