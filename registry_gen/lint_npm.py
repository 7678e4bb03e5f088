"""npm's own package.json rules: the default profile of `registry-gen check`.

Pure functions over the raw descriptor. Nothing npm's package.json documentation defines as valid
is reported. A finding is a `warning` when npm documents the value as invalid or a client drops or
misreads it, and `info` when it is a legacy shape that npm (and this registry) normalise, so there
is nothing to fix. Refusals (errors) come from `manifest.manifest_problems`, not from here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from registry_gen.errors import InvalidName, InvalidVersion
from registry_gen.manifest import CPU_TO_NPM, DEPENDENCY_FIELDS, OS_TO_NPM
from registry_gen.names import validate_name
from registry_gen.ranges import INVALID, parse_spec
from registry_gen.versions import clean_version

WARNING, INFO = "warning", "info"

# Node's process.platform and process.arch values (npm's docs list the common ones).
NPM_OS = frozenset({"aix", "android", "darwin", "freebsd", "haiku", "linux", "netbsd", "openbsd", "sunos", "win32", "cygwin"})
NPM_CPU = frozenset({
    "arm", "arm64", "ia32", "loong64", "mips", "mipsel", "ppc", "ppc64", "riscv64", "s390", "s390x", "x64",
})
NPM_LIBC = frozenset({"glibc", "musl"})
MODULE_TYPES = ("module", "commonjs")
_URL_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+$")
# An SPDX expression: identifiers (LicenseRef-, DocumentRef-x:LicenseRef- too), "+", WITH, AND,
# OR and parentheses. Identifiers are checked for form, not against the SPDX list.
_SPDX_TOKEN = re.compile(r"\s*(\(|\)|[A-Za-z0-9][A-Za-z0-9.\-:]*\+?)")
_SPDX_OPERATORS = ("AND", "OR")

Found = tuple[str, str, str, str]  # field, rule, severity, message
Rule = Callable[[str, Any], list[Found]]


def _shape(rule: str, ok: Callable[[Any], bool], expected: str) -> Rule:
    """A rule that warns when the value is not of a documented shape."""

    def check(field: str, value: Any) -> list[Found]:
        return [] if ok(value) else [(field, rule, WARNING, f"{field} must be {expected}; clients ignore this value")]

    return check


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _is_str_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


def _is_person(value: Any) -> bool:
    """npm: a person is "Name <email> (url)" or an object with a name (email, url optional)."""
    return isinstance(value, str) or (isinstance(value, dict) and isinstance(value.get("name"), str))


def _is_funding(value: Any) -> bool:
    one = lambda v: isinstance(v, str) or (isinstance(v, dict) and isinstance(v.get("url"), str))  # noqa: E731
    return one(value) or (isinstance(value, list) and all(one(v) for v in value))


def _is_browser(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, dict) and all(isinstance(v, (str, bool)) for v in value.values()))


def _is_workspaces(value: Any) -> bool:
    return _is_str_list(value) or (isinstance(value, dict) and _is_str_list(value.get("packages", [])))


def _is_repository(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, dict) and isinstance(value.get("url"), str))


def is_spdx_expression(text: str) -> bool:
    """True for an SPDX license expression such as "MIT", "(MIT OR Apache-2.0)", "GPL-2.0+ WITH X"."""
    tokens, position = [], 0
    while position < len(text.rstrip()):
        match = _SPDX_TOKEN.match(text, position)
        if match is None:
            return False
        tokens.append(match.group(1))
        position = match.end()
    rest = _spdx_expression(tokens)
    return rest == []


def _spdx_expression(tokens: list[str]) -> list[str] | None:
    """Consumes one expression (term (AND|OR term)*); the tokens left, or None when malformed."""
    rest = _spdx_term(tokens)
    while rest and rest[0] in _SPDX_OPERATORS:
        rest = _spdx_term(rest[1:])
    return rest


def _spdx_term(tokens: list[str] | None) -> list[str] | None:
    if not tokens:
        return None
    if tokens[0] == "(":
        rest = _spdx_expression(tokens[1:])
        return rest[1:] if rest and rest[0] == ")" else None
    if tokens[0] in ("(", ")", "WITH", *_SPDX_OPERATORS):
        return None
    rest = tokens[1:]
    if rest and rest[0] == "WITH":
        return rest[2:] if len(rest) > 1 and rest[1] not in ("(", ")", "WITH", *_SPDX_OPERATORS) else None
    return rest


def _license(field: str, value: Any) -> list[Found]:
    if isinstance(value, dict) or field == "licenses":
        return [(field, "license-legacy", INFO, "a license object or list is the deprecated form; npm reads it, SPDX is preferred")]
    if not isinstance(value, str):
        return [(field, "license-type", WARNING, "license must be an SPDX expression string")]
    text = value.strip()
    if text in ("UNLICENSED", "UNLICENCED") or text.startswith("SEE LICEN") or is_spdx_expression(text):
        return []
    return [(field, "license-spdx", WARNING, f"{value!r} is not an SPDX expression, UNLICENSED or 'SEE LICENSE IN <file>'")]


def _people(field: str, value: Any) -> list[Found]:
    if field == "author":
        ok = _is_person(value) or value == ""  # npm init writes "author": ""
        return [] if ok else [(field, "person-invalid", WARNING, "author must be \"Name <email> (url)\" or {name, email, url}")]
    if not isinstance(value, list):
        if _is_person(value):
            return [(field, "people-not-array", INFO, f"{field} is one person, not an array of people")]
        return [(field, "people-invalid", WARNING, f"{field} must be an array of people")]
    return [
        (f"{field}[{index}]", "person-invalid", WARNING, "each person must be \"Name <email> (url)\" or {name, email, url}")
        for index, person in enumerate(value)
        if not _is_person(person)
    ]


def _bugs(field: str, value: Any) -> list[Found]:
    if isinstance(value, str):
        ok = bool(_URL_SCHEME.match(value) or _EMAIL.match(value))
    elif isinstance(value, dict):
        ok = all(isinstance(value[key], str) for key in ("url", "email") if key in value)
    else:
        ok = False
    return [] if ok else [(field, "bugs-invalid", WARNING, "bugs must be a URL, a mail address or {url, email}; npm drops it")]


def _keywords(field: str, value: Any) -> list[Found]:
    if _is_str_list(value):
        return []
    if isinstance(value, str):
        return [(field, "keywords-string", INFO, "keywords is a string; npm splits it into a list")]
    return [(field, "keywords-type", WARNING, "keywords must be an array of strings")]


def _engines(field: str, value: Any) -> list[Found]:
    if _is_str_map(value):
        return []
    if isinstance(value, list):
        return [(field, "engines-array", INFO, "engines as an array is a legacy form; clients ignore it")]
    return [(field, "engines-type", WARNING, "engines must be an object of engine -> range")]


def _platforms(allowed: frozenset[str], renamed: dict[str, str]) -> Rule:
    """os, cpu, libc: a list (npm also reads one string) of values, each may be negated with '!'."""

    def check(field: str, value: Any) -> list[Found]:
        if isinstance(value, str):
            return [(field, f"{field}-string", INFO, f"{field} is a string; npm reads it as a one-item list")] + check(field, [value])
        if not _is_str_list(value):
            return [(field, f"{field}-type", WARNING, f"{field} must be an array of strings")]
        found = []
        for item in value:
            bare = item[1:] if item.startswith("!") else item
            if bare in allowed:
                continue
            if bare.lower() in renamed:
                found.append((field, f"{field}-renamed", INFO, f"{bare!r} is published as npm's {renamed[bare.lower()]!r}"))
            else:
                found.append((field, f"{field}-unknown", WARNING, f"{item!r} is none of {', '.join(sorted(allowed))}; it never matches"))
        return found

    return check


def _dependencies(field: str, value: Any) -> list[Found]:
    if isinstance(value, (list, str)):
        return [(field, "dependencies-legacy", INFO, f"{field} as a list is a legacy form; published as an object")]
    if not isinstance(value, dict):
        return [(field, "dependencies-type", WARNING, f"{field} must be an object of name -> spec; it is dropped")]
    found = []
    for name, spec in value.items():
        if not isinstance(spec, str):
            found.append((f"{field}.{name}", "dependency-spec-type", WARNING, "the spec must be a string; the entry is dropped"))
        elif parse_spec(name, spec).kind == INVALID:
            found.append((f"{field}.{name}", "dependency-spec-invalid", WARNING, f"{spec!r} is no range, tag, URL, git or file spec"))
    return found


def _bundled(field: str, value: Any) -> list[Found]:
    ok = isinstance(value, bool) or _is_str_list(value)
    return [] if ok else [(field, "bundle-dependencies-type", WARNING, f"{field} must be true/false or an array of names")]


def _main(field: str, value: Any) -> list[Found]:
    if isinstance(value, str):
        return []
    return [(field, "main-type", INFO, "main is not a path; Node ignores it and resolves exports or index.js")]


def _private(field: str, value: Any) -> list[Found]:
    return [] if isinstance(value, bool) else [(field, "private-type", INFO, "private should be true or false")]


def _module_type(field: str, value: Any) -> list[Found]:
    ok = value in MODULE_TYPES
    return [] if ok else [(field, "type-value", WARNING, f"type must be one of {', '.join(MODULE_TYPES)}")]


_is_str = lambda v: isinstance(v, str)  # noqa: E731
_is_dict = lambda v: isinstance(v, dict)  # noqa: E731

RULES: dict[str, Rule] = {
    "description": _shape("description-type", _is_str, "a string"),
    "keywords": _keywords,
    "homepage": _shape("homepage-type", _is_str, "a URL string"),
    "bugs": _bugs,
    "license": _license,
    "licenses": _license,
    "author": _people,
    "contributors": _people,
    "maintainers": _people,
    "funding": _shape("funding-type", _is_funding, "a URL, {type, url}, or an array of them"),
    "files": _shape("files-type", _is_str_list, "an array of file patterns"),
    "main": _main,
    "browser": _shape("browser-type", _is_browser, "a path or an object of path -> path or false"),
    "bin": _shape("bin-type", lambda v: _is_str(v) or _is_str_map(v), "a path or an object of command -> path"),
    "man": _shape("man-type", lambda v: _is_str(v) or _is_str_list(v), "a path or an array of paths"),
    "directories": _shape("directories-type", _is_dict, "an object"),
    "repository": _shape("repository-type", _is_repository, "a URL, a shorthand such as github:user/repo, or {type, url}"),
    "scripts": _shape("scripts-type", _is_str_map, "an object of name -> command"),
    "config": _shape("config-type", _is_dict, "an object"),
    **{field: _dependencies for field in DEPENDENCY_FIELDS},
    "peerDependenciesMeta": _shape("peer-dependencies-meta-type", lambda v: _is_dict(v) and all(map(_is_dict, v.values())), "an object of name -> {optional}"),
    "bundleDependencies": _bundled,
    "bundledDependencies": _bundled,
    "overrides": _shape("overrides-type", _is_dict, "an object"),
    "engines": _engines,
    "os": _platforms(NPM_OS, OS_TO_NPM),
    "cpu": _platforms(NPM_CPU, CPU_TO_NPM),
    "libc": _platforms(NPM_LIBC, {}),
    "devEngines": _shape("dev-engines-type", _is_dict, "an object"),
    "private": _private,
    "publishConfig": _shape("publish-config-type", _is_dict, "an object"),
    "workspaces": _shape("workspaces-type", _is_workspaces, "an array of folder patterns or {packages: [...]}"),
    "type": _module_type,
    "exports": _shape("exports-type", lambda v: v is None or isinstance(v, (str, list, dict)), "a path, an array or an object of conditions"),
    "imports": _shape("imports-type", _is_dict, "an object of #specifier -> target"),
    "types": _shape("types-type", _is_str, "a path"),
    "typings": _shape("types-type", _is_str, "a path"),
}


def _name_and_version(raw: dict[str, Any]) -> list[Found]:
    """Hosted but legacy: a name only old packages may have, a version npm cleans on publish."""
    found: list[Found] = []
    try:
        validate_name(raw.get("name"), legacy=True)
        try:
            validate_name(raw.get("name"))
        except InvalidName:
            found.append(("name", "name-legacy", INFO, "an old-style name (capitals...); only new publishes need npm's current rule"))
    except InvalidName:
        pass  # a refusal, reported as an error by manifest_problems
    version = raw.get("version")
    try:
        cleaned = clean_version(version)
        if cleaned != version:
            found.append(("version", "version-cleaned", INFO, f"{version!r} is published as {cleaned!r}, as npm cleans it"))
    except InvalidVersion:
        pass
    return found


def npm_findings(raw: dict[str, Any]) -> list[Found]:
    """What npm's documentation calls invalid, and the legacy shapes it normalises, in `raw`."""
    found = _name_and_version(raw)
    for field, value in raw.items():
        rule = RULES.get(field)
        if rule is not None and not (field == "licenses" and "license" in raw):
            found += rule(field, value)  # a `licenses` list next to `license` is extra data npm never reads
    if "repositories" in raw and "repository" not in raw:
        found.append(("repositories", "repositories-plural", INFO, "'repositories' is a legacy field; npm reads 'repository'"))
    return found
