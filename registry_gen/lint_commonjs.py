"""The specification's descriptor rules: `registry-gen check --profile commonjs`.

Stricter than npm (lowercase-only names, discouraged words, the specification's os/cpu/engine
lists, strict major.minor.revision versions, people as {name, email, web} objects...), so they
are an opt-in profile; the default profile is npm's (`lint_npm.py`). Each finding names the
field and a stable rule id. Rules follow part B, "Package descriptor", of the specification.
"""

from __future__ import annotations

import re
from typing import Any

from registry_gen.errors import FieldProblem
from registry_gen.manifest import CPU_TO_NPM, OS_TO_NPM

SPEC_OS = ("aix", "freebsd", "linux", "macos", "solaris", "vxworks", "windows")
SPEC_CPU = ("arm", "mips", "ppc", "sparc", "x86", "x86_64")
SPEC_ENGINES = ("ejs", "flusspferd", "gpsee", "jsc", "spidermonkey", "narwhal", "v8", "node")
# Words that only say "this is a JavaScript/runtime module", which the spec advises against.
DISCOURAGED_NAME_WORDS = ("js", "node", "javascript", "nodejs")
_NAME_CHARS = re.compile(r"^[a-z0-9._-]+$")
_STRICT_VERSION = re.compile(r"^\d+\.\d+\.\d+$")
_URL = re.compile(r"^https?://[^\s]+$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def _person_problems(field: str, value: Any) -> list[FieldProblem]:
    if not isinstance(value, list):
        return [FieldProblem(field, f"{field}-array", f"{field} must be an array of {{name, email, web}} objects")]
    problems = []
    for index, person in enumerate(value):
        where = f"{field}[{index}]"
        if not isinstance(person, dict):
            problems.append(FieldProblem(where, f"{field}-object", "each entry must be an object with name, email, web"))
            continue
        if not isinstance(person.get("name"), str) or not person["name"].strip():
            problems.append(FieldProblem(where, f"{field}-name", "entry needs a name"))
        if "email" in person and not (isinstance(person["email"], str) and _EMAIL.match(person["email"])):
            problems.append(FieldProblem(where, f"{field}-email", "email is not a mail address"))
        if "web" in person and not (isinstance(person["web"], str) and _URL.match(person["web"])):
            problems.append(FieldProblem(where, f"{field}-web", "web is not an http(s) address"))
    return problems


def _name_rules(name: Any) -> list[FieldProblem]:
    if not isinstance(name, str):
        return []
    bare = name.split("/", 1)[1] if name.startswith("@") and "/" in name else name
    problems = []
    if not _NAME_CHARS.match(bare):
        problems.append(FieldProblem("name", "name-characters", "use only lowercase letters, digits, . _ -"))
    words = re.split(r"[._-]", bare)
    found = sorted({w for w in words if w in DISCOURAGED_NAME_WORDS})
    if found:
        problems.append(
            FieldProblem("name", "name-discouraged-word", f"avoid words that only mark a runtime or language: {', '.join(found)}")
        )
    return problems


def _allowed_list(field: str, value: Any, allowed: tuple[str, ...], npm_spelling: dict[str, str]) -> list[FieldProblem]:
    if not isinstance(value, list):
        return []
    problems = []
    for item in value:
        if not isinstance(item, str):
            problems.append(FieldProblem(field, f"{field}-value", f"{item!r} is not one of {', '.join(allowed)}"))
            continue
        bare = item[1:] if item.startswith("!") else item
        if bare in allowed:
            continue
        inverse = {v: k for k, v in npm_spelling.items()}
        if bare in inverse:
            problems.append(
                FieldProblem(field, f"{field}-spelling", f"{bare!r} is npm's spelling; the specification says {inverse[bare]!r}")
            )
        else:
            problems.append(FieldProblem(field, f"{field}-value", f"{item!r} is not one of {', '.join(allowed)}"))
    return problems


def commonjs_problems(raw: dict[str, Any]) -> list[FieldProblem]:
    """Every rule of the specification's descriptor that `raw` breaks."""
    problems = _name_rules(raw.get("name"))
    if isinstance(raw.get("version"), str) and not _STRICT_VERSION.match(raw["version"]):
        problems.append(FieldProblem("version", "version-form", "the specification's form is major.minor.revision"))
    if not isinstance(raw.get("description"), str) or not raw.get("description", "").strip():
        problems.append(FieldProblem("description", "description-required", "a short description is required"))
    keywords = raw.get("keywords")
    if keywords is None:
        problems.append(FieldProblem("keywords", "keywords-required", "keywords (an array of strings) are required"))
    if "maintainers" not in raw:
        problems.append(FieldProblem("maintainers", "maintainers-required", "maintainers are required"))
    else:
        problems += _person_problems("maintainers", raw["maintainers"])
    if "contributors" not in raw:
        problems.append(FieldProblem("contributors", "contributors-required", "contributors are required; the first is the author"))
    else:
        problems += _person_problems("contributors", raw["contributors"])
    problems += _bugs_rules(raw)
    problems += _license_rules(raw)
    problems += _repository_rules(raw)
    if "dependencies" not in raw:
        problems.append(FieldProblem("dependencies", "dependencies-required", "dependencies are required (may be empty)"))
    if "homepage" in raw and not (isinstance(raw["homepage"], str) and _URL.match(raw["homepage"])):
        problems.append(FieldProblem("homepage", "homepage-url", "homepage must be an http(s) address"))
    problems += _allowed_list("os", raw.get("os"), SPEC_OS, OS_TO_NPM)
    problems += _allowed_list("cpu", raw.get("cpu"), SPEC_CPU, CPU_TO_NPM)
    problems += _engine_rules(raw)
    if "builtin" in raw and not isinstance(raw["builtin"], bool):
        problems.append(FieldProblem("builtin", "builtin-boolean", "builtin must be true or false"))
    if "implements" in raw and not (isinstance(raw["implements"], list) and all(isinstance(i, str) for i in raw["implements"])):
        problems.append(FieldProblem("implements", "implements-list", "implements must be a list of specification names"))
    return problems


def _bugs_rules(raw: dict[str, Any]) -> list[FieldProblem]:
    bugs = raw.get("bugs")
    if bugs is None:
        return [FieldProblem("bugs", "bugs-required", "bugs needs a web page or a mail address")]
    values = [bugs] if isinstance(bugs, str) else [bugs.get("url"), bugs.get("email")] if isinstance(bugs, dict) else []
    values = [v for v in values if v]
    if not values or not all(isinstance(v, str) and (_URL.match(v) or _EMAIL.match(v)) for v in values):
        return [FieldProblem("bugs", "bugs-address", "bugs must be an http(s) address or a mail address")]
    return []


def _license_rules(raw: dict[str, Any]) -> list[FieldProblem]:
    licenses = raw.get("licenses")
    if licenses is None:
        if isinstance(raw.get("license"), str):
            return []  # npm's SPDX `license` string carries the same information
        return [FieldProblem("licenses", "licenses-required", "licenses (array of {type, url}) or license is required")]
    if not isinstance(licenses, list) or not all(
        isinstance(item, dict) and isinstance(item.get("type"), str) and isinstance(item.get("url"), str) for item in licenses
    ):
        return [FieldProblem("licenses", "licenses-format", "licenses must be an array of {type, url} objects")]
    return []


def _repository_rules(raw: dict[str, Any]) -> list[FieldProblem]:
    if "repositories" in raw:
        if not isinstance(raw["repositories"], list) or not raw["repositories"]:
            return [FieldProblem("repositories", "repositories-list", "repositories must be a non-empty list of locations")]
        return []
    if "repository" in raw:
        return []  # npm's single `repository` is the common spelling
    return [FieldProblem("repositories", "repositories-required", "repositories (where the source lives) are required")]


def _engine_rules(raw: dict[str, Any]) -> list[FieldProblem]:
    engine = raw.get("engine")
    if engine is None:
        return []
    if not isinstance(engine, list):
        return [FieldProblem("engine", "engine-list", "engine must be a list of engine names")]
    return [
        FieldProblem("engine", "engine-value", f"{item!r} is not one of {', '.join(SPEC_ENGINES)}")
        for item in engine
        if str(item).split(" ")[0] not in SPEC_ENGINES
    ]
