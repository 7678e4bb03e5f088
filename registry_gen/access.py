"""Who may read which package: the `packages:` rules of registry.yaml (pure functions).

    packages:
      '@internal/*': {read: authenticated}   # any logged-in account
      'secret-*':    {read: [group-a]}       # accounts in one of these groups (admins always)
      '**':          {read: all, proxy: npmjs}   # the default read when no pattern matches

Patterns match the whole package name: `*` stands for any run of characters but `/`, `**` for
any run at all; the first pattern that matches decides, in the order written, both who may read
and whether a name is proxied to an uplink (`proxy:`, with the mirror's policy keys beside it:
registry_gen.mirror.policy). A pattern without `read` reads as the default does (everyone).
Writes keep the owner rules of the write API.
"""

from __future__ import annotations

import re
from collections.abc import Container, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from registry_gen.errors import ConfigError
from registry_gen.mirror.policy import POLICY_KEYS, MirrorPolicy, name_regex, parse_policy

ALL = "all"
AUTHENTICATED = "authenticated"


@dataclass(frozen=True)
class Caller:
    """Who asks: nobody (no token), or an account with its groups."""

    username: str | None = None
    groups: frozenset[str] = frozenset()
    admin: bool = False

    @property
    def authenticated(self) -> bool:
        return self.username is not None


ANONYMOUS = Caller()


@dataclass(frozen=True)
class Rule:
    pattern: str
    read: str | frozenset[str]  # ALL, AUTHENTICATED, or the groups that may read
    proxy: str | None = None  # the uplink names matching this pattern are mirrored from
    policy: MirrorPolicy = field(default_factory=MirrorPolicy)

    @property
    def regex(self) -> str:
        """The pattern as an anchored regular expression (also used in the nginx config)."""
        return name_regex(self.pattern)

    def matches(self, name: str) -> bool:
        return re.match(self.regex, name) is not None

    def allows(self, caller: Caller) -> bool:
        if self.read == ALL:
            return True
        if not caller.authenticated:
            return False
        if self.read == AUTHENTICATED or caller.admin:
            return True
        return bool(caller.groups & self.read)  # type: ignore[operator]


@dataclass(frozen=True)
class AccessRules:
    rules: tuple[Rule, ...] = field(default_factory=tuple)

    @property
    def in_force(self) -> bool:
        """Whether any package is not readable by everyone (then reads need checking)."""
        return any(rule.read != ALL for rule in self.rules)

    def rule_for(self, name: str) -> Rule | None:
        return next((rule for rule in self.rules if rule.matches(name)), None)

    @property
    def proxies(self) -> bool:
        """Whether any pattern is proxied to an uplink (nothing is unless configured)."""
        return any(rule.proxy for rule in self.rules)

    def proxy_rule(self, name: str) -> Rule | None:
        """The rule that proxies `name` to an uplink, or None (local only: the default)."""
        rule = self.rule_for(name)
        return rule if rule is not None and rule.proxy else None

    def is_public(self, name: str) -> bool:
        rule = self.rule_for(name)
        return rule is None or rule.read == ALL

    def is_public_path(self, path: str) -> bool:
        """Whether anyone may read what `path` names (no caller needed to decide)."""
        name = package_of_path(path)
        return name is None or self.is_public(name)

    def may_read(self, name: str, caller: Caller) -> bool:
        rule = self.rule_for(name)
        return rule is None or rule.allows(caller)

    def public_only(self, names: Container[str]) -> Container[str]:
        """`names` as a static page may name them: a page is the same file for every reader, so it
        lists or links only what anyone may read."""
        return PublicNames(names, self) if self.in_force else names


@dataclass(frozen=True)
class PublicNames:
    """The names of `names` that anyone may read (AccessRules.public_only)."""

    names: Container[str]
    rules: AccessRules

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.names and self.rules.is_public(name)


def _read_value(pattern: str, value: Any) -> str | frozenset[str]:
    if value in (ALL, "$all"):
        return ALL
    if value in (AUTHENTICATED, "$authenticated"):
        return AUTHENTICATED
    if isinstance(value, list) and value and all(isinstance(g, str) and g.strip() for g in value):
        return frozenset(g.strip() for g in value)
    raise ConfigError(f"packages.{pattern!r}.read must be all, authenticated or a list of group names; got {value!r}")


RULE_KEYS = ("read", "proxy", *POLICY_KEYS)


def parse_rules(data: Any) -> AccessRules:
    """The `packages:` mapping of registry.yaml; ConfigError names the pattern and the field."""
    if data is None:
        return AccessRules()
    if not isinstance(data, Mapping):
        raise ConfigError("packages must be a mapping of name patterns to {read: ..., proxy: ...}")
    rules = []
    for pattern, spec in data.items():
        if not isinstance(pattern, str) or not pattern or any(ch in pattern for ch in " \"'\\;{}$"):
            raise ConfigError(f"packages: {pattern!r} is not a package name pattern")
        rules.append(_rule(pattern, spec))
    return AccessRules(tuple(rules))


def _rule(pattern: str, spec: Any) -> Rule:
    if not isinstance(spec, Mapping) or not spec or set(spec) - set(RULE_KEYS):
        raise ConfigError(f"packages.{pattern!r} must be a mapping of {', '.join(RULE_KEYS)} (writes keep the owner rules)")
    proxy = spec.get("proxy")
    if proxy is not None and (not isinstance(proxy, str) or not proxy):
        raise ConfigError(f"packages.{pattern!r}.proxy must name one uplink; got {proxy!r}")
    policy = parse_policy(pattern, spec)
    if proxy is None and policy != MirrorPolicy():
        raise ConfigError(f"packages.{pattern!r}: {', '.join(POLICY_KEYS)} apply to mirrored packages only: add proxy: UPLINK")
    return Rule(pattern, _read_value(pattern, spec.get("read", ALL)), proxy, policy)


# Request paths refused before any read is decided, searched in the path as the client sent it
# (before the query). Each makes the path served differ from the path written, or could carry a
# header into nginx's read check; no npm client asks this way. The nginx config refuses them with
# the same patterns (registry_gen.nginx_access), the API's read check again behind it.
REFUSED_SPELLINGS: tuple[str, ...] = (
    r"(?:/|%2[fF])(?:\.|%2[eE])",  # a segment starting with a dot: `.`, `..`, `%2e`, `.%2E`, dotfiles
    r"(?:/|%2[fF])(?:/|%2[fF])",  # an empty segment: nginx merges it away
    r"%2[fF][^?]*%2[fF]",  # a second encoded slash (a scoped name has one)
    r"%[01][0-9a-fA-F]|%7[fF]",  # a control character: CR LF would split the check's headers
    r"#",  # a fragment: nginx serves the path before it
)
# The one encoded slash a request may hold: the one of a scoped name (`/@scope%2fname`,
# `/-/package/@scope%2fname/dist-tags`, `/-/web/package/@scope%2fname/`).
SCOPED_NAME_SLASH = r"^/(?:-/(?:web/)?package/)?(?:@|%40)[^/%?]+%2[fF]"


def is_plain_request_path(uri: str) -> bool:
    """Whether a request URI (as sent, query allowed) names its file plainly: none of the
    REFUSED_SPELLINGS, and no encoded slash but a scoped name's."""
    path = uri.partition("?")[0]
    if any(re.search(pattern, path) for pattern in REFUSED_SPELLINGS):
        return False
    return "%2f" not in path.lower() or re.match(SCOPED_NAME_SLASH, path) is not None


def _name_from(segments: list[str]) -> str | None:
    if not segments or not segments[0]:
        return None
    if segments[0].startswith("@"):
        return f"{segments[0]}/{segments[1]}" if len(segments) > 1 and segments[1] else None
    return segments[0]


def package_of_served_path(path: str) -> str | None:
    """The package a decoded path reads, segment by segment as a file system resolves it (the
    path `serve` or nginx serves: `/<name>`, `/@scope/name`, their tarballs, tag and dist-tags
    documents, HTML pages); None for a path that belongs to no package. Nothing is decoded,
    and `?` or `#` are parts of a segment here."""
    segments = [s for s in path.split("/") if s != ""]
    if not segments:
        return None
    if segments[0] != "-":
        return _name_from(segments)
    if segments[1:2] == ["package"]:
        return _name_from(segments[2:])
    if segments[1:3] == ["web", "package"]:
        return _name_from(segments[3:])
    return None


def decoded_path(uri: str) -> str:
    """The path of a request URI as sent, decoded once; like nginx, it ends at `?` or `#`."""
    return unquote(re.split(r"[?#]", uri, maxsplit=1)[0])


def package_of_path(uri: str) -> str | None:
    """The package a request URI reads (as sent: `/@scope%2fname`, a query), or None."""
    return package_of_served_path(decoded_path(uri))


def has_dot_segment(path: str) -> bool:
    """Whether a decoded path holds a `.` or `..` segment (a static host would resolve it)."""
    return any(segment in (".", "..") for segment in path.split("/"))


def read_status(rules: AccessRules, path: str, caller: Caller) -> int:
    """200 when `caller` may read what the request URI `path` names (see name_status)."""
    return name_status(rules, package_of_path(path), caller)


def name_status(rules: AccessRules, name: str | None, caller: Caller) -> int:
    """200 when `caller` may read package `name` (None: no package); else 401 (no valid token:
    log in) or 404 (a token without access: the package's existence is not revealed)."""
    if name is None or rules.may_read(name, caller):
        return 200
    return 404 if caller.authenticated else 401
