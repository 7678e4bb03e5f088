"""The rules of npm hooks, pure: what a hook watches, which events it gets, the envelope and its
signature, when a failed delivery is tried again, and which addresses a hook may reach."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final
from urllib.parse import urlsplit

from registry_gen.errors import RegistryError
from registry_gen.names import is_valid_name
from registry_gen.state.ledger import JournalEntry

HOOK_TYPES: Final = ("package", "scope", "owner")
SIGNATURE_HEADER: Final = "x-npm-signature"
DELIVERY_HEADER: Final = "x-registry-delivery"  # the same for every attempt of one delivery: receivers dedupe on it
EVENT_HEADER: Final = "x-npm-event"
MAX_SECRET: Final = 512
MAX_ENDPOINT: Final = 2048
MAX_DELAY_SECONDS: Final = 3600.0  # backoff stops doubling at an hour
EXCERPT_BYTES: Final = 512
_DELIVERY_NAMESPACE: Final = uuid.UUID("6f1c1f9e-3a53-4c1e-9f39-5d1b2a0c7e11")
_SCOPE: Final = re.compile(r"@[a-z0-9][a-z0-9._~-]*")
_USERNAME: Final = re.compile(r"[a-z0-9][a-z0-9._-]{0,213}")


class HookRefused(RegistryError):
    """A hook that cannot be made or changed as asked (a bad name, URL or secret, an address not
    allowed, too many hooks): the message says which and why (HTTP 400)."""


class HooksNotConfigured(RegistryError):
    """No key to encrypt hook secrets with: the operator must set one (HTTP 503)."""


@dataclass(frozen=True, slots=True)
class Hook:
    """A hook as its owner sees it (never its secret)."""

    id: str
    owner: str  # the owner's username
    owner_id: str
    type: str
    name: str
    endpoint: str
    created: str
    updated: str
    last_delivery: str | None = None
    response_code: int = 0

    def view(self) -> dict[str, Any]:
        """npm's hook object (libnpmhook; `npm hook ls` reads last_delivery and response_code)."""
        return {
            "id": self.id, "username": self.owner, "name": self.name, "type": self.type, "endpoint": self.endpoint,
            "created": self.created, "updated": self.updated, "deleted": False, "delivered": self.last_delivery is not None,
            "last_delivery": self.last_delivery, "response_code": self.response_code, "status": "active",
        }  # fmt: skip


def hook_target(type_: object, name: object) -> tuple[str, str]:
    """(type, name) of what a hook watches, as npm's client sends it (`~user` arrives as type owner,
    name user); HookRefused naming the field otherwise."""
    if type_ not in HOOK_TYPES:
        raise HookRefused(f"type must be one of {', '.join(HOOK_TYPES)}; got {type_!r}")
    if not isinstance(name, str) or not name:
        raise HookRefused("name must name a package, a @scope or an owner")
    if type_ == "scope" and not _SCOPE.fullmatch(name):
        raise HookRefused(f"a scope hook names a scope such as @team; got {name!r}")
    if type_ == "owner" and not _USERNAME.fullmatch(name.lower()):
        raise HookRefused(f"an owner hook names a username such as ~alice; got {name!r}")
    if type_ == "package" and not is_valid_name(name):
        raise HookRefused(f"not a package name: {name!r}")
    return str(type_), name.lower() if type_ == "owner" else name


def endpoint_problem(endpoint: object) -> str | None:
    """Why a URL cannot be a hook's endpoint (None: it can, as far as its spelling goes)."""
    if not isinstance(endpoint, str) or len(endpoint) > MAX_ENDPOINT:
        return f"endpoint must be an http(s) URL of at most {MAX_ENDPOINT} characters"
    try:
        parts = urlsplit(endpoint)
        parts.port  # noqa: B018 - raises for a port that is not a number
    except ValueError:
        return f"endpoint is not a URL: {endpoint!r}"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"endpoint must be an http:// or https:// URL with a host; got {endpoint!r}"
    if parts.username or parts.password:
        return "endpoint must not carry credentials (the secret signs each delivery)"
    return None


def secret_problem(secret: object) -> str | None:
    if not isinstance(secret, str) or not secret or len(secret) > MAX_SECRET:
        return f"secret must be a non-empty string of at most {MAX_SECRET} characters"
    return None


def matches(hook: Hook, package: str, maintainers: Iterable[str]) -> bool:
    """Whether an event of `package` (maintained by `maintainers`, usernames) goes to `hook`."""
    if hook.type == "package":
        return hook.name == package
    if hook.type == "scope":
        return package.startswith(hook.name + "/")
    return hook.name in {m.lower() for m in maintainers}


def event_maintainers(detail: Mapping[str, Any]) -> list[str]:
    """Owners an event itself names (an owner change names them before and after)."""
    owners = detail.get("owners")
    if not isinstance(owners, Mapping):
        return []
    return [str(n) for key in ("before", "after") for n in owners.get(key) or ()]


def delivery_id(hook_id: str, seq: int) -> str:
    """One id per (hook, journal entry), the same on every attempt and after a crash."""
    return str(uuid.uuid5(_DELIVERY_NAMESPACE, f"{hook_id}:{seq}"))


def entry_event(entry: JournalEntry) -> dict[str, Any]:
    """What a delivery keeps of its journal entry (no actor id, no email)."""
    return {"seq": entry.seq, "time": entry.time, "kind": entry.kind, "package": entry.package,
            "versions": list(entry.versions), "detail": dict(entry.detail)}  # fmt: skip


def envelope(event: Mapping[str, Any], hook: Hook, payload: Mapping[str, Any]) -> bytes:
    """npm's delivery body: event, name, type, version, hookOwner, payload (the package document),
    change, time (milliseconds since the epoch)."""
    versions = list(event.get("versions") or ())
    change = {**dict(event.get("detail") or {}), "version": versions[0] if versions else None, "versions": versions}
    body = {
        "event": event["kind"], "name": event["package"], "type": hook.type, "version": versions[0] if versions else None,
        "hookOwner": {"username": hook.owner}, "payload": dict(payload), "change": change,
        "time": int(datetime.fromisoformat(str(event["time"]).replace("Z", "+00:00")).timestamp() * 1000),
    }  # fmt: skip
    return json.dumps(body, separators=(",", ":"), sort_keys=True).encode("utf-8")


def signature(secret: str, body: bytes) -> str:
    """The x-npm-signature value: sha256=<HMAC-SHA256 of the body with the hook's secret, hex>."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def retry_delay(attempts: int, base: float, jitter: float) -> float:
    """Seconds before attempt `attempts + 1`, after `attempts` failures: base doubling up to an
    hour, times a jitter factor from [0.5, 1) (`jitter` in [0, 1)) so failed endpoints' retries spread."""
    return min(base * 2 ** max(attempts - 1, 0), MAX_DELAY_SECONDS) * (0.5 + jitter / 2)


# NAT64's well-known prefix (RFC 6052) carries an IPv4 address in its last 32 bits; its local-use
# prefix (RFC 8215) may carry any. 6to4 (2002::/16), IPv4-mapped and the deprecated IPv4-compatible
# (::/96, which a SIT tunnel still routes) addresses carry one too.
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
NAT64_WELL_KNOWN = ipaddress.ip_network("64:ff9b::/96")
NAT64_LOCAL_USE = ipaddress.ip_network("64:ff9b:1::/48")


def embedded_ipv4(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address reaches through a translator or tunnel, if any: a hook to
    [2002:a9fe:a9fe::] or [64:ff9b::a9fe:a9fe] reaches 169.254.169.254 on a host that routes them."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return None
    if ip.ipv4_mapped is not None or ip.sixtofour is not None:
        return ip.ipv4_mapped or ip.sixtofour
    if any(ip in prefix for prefix in (IPV4_COMPATIBLE, NAT64_WELL_KNOWN, NAT64_LOCAL_USE)):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def address_allowed(address: str, allow_networks: Sequence[str]) -> bool:
    """Whether a hook may connect to `address`: a public unicast address, or one inside a range the
    operator allowed. Loopback, link-local (cloud metadata at 169.254.169.254), private (and
    fd00:ec2::254), shared, reserved, multicast and unspecified addresses are refused by default,
    also when written inside an IPv6 address (IPv4-mapped, 6to4, NAT64): the IPv4 one decides."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    inner = embedded_ipv4(ip)
    allowed = [ipaddress.ip_network(network) for network in allow_networks]
    if any(candidate in network for network in allowed for candidate in (ip, inner) if candidate is not None):
        return True
    if ip in NAT64_LOCAL_USE:
        return False  # a site's own translator: where it leads is the site's, not the Internet
    checked = inner or ip
    return checked.is_global and not checked.is_multicast


def excerpt(body: bytes) -> str:
    """What a delivery log keeps of an answer: its first EXCERPT_BYTES, as text."""
    return body[:EXCERPT_BYTES].decode("utf-8", "replace")


@dataclass(frozen=True, slots=True)
class Breaker:
    """One endpoint's circuit (host:port): open after `threshold` failures in a row, for `cool`
    seconds; while open, its deliveries wait without spending an attempt."""

    failures: int = 0
    open_until: float = 0.0

    def allows(self, now: float) -> bool:
        return now >= self.open_until

    def after(self, ok: bool, now: float, threshold: int = 5, cool: float = 60.0) -> Breaker:
        if ok:
            return Breaker()
        failures = self.failures + 1
        return Breaker(failures, now + cool if failures >= threshold else self.open_until)


def endpoint_key(endpoint: str) -> str:
    parts = urlsplit(endpoint)
    return f"{parts.scheme}://{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"
