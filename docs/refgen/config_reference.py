"""The `registry.yaml` reference, read from the settings themselves.

Keys, types and defaults come from `registry_gen.settings` (the `Settings` dataclass and the
mapping keys' dataclasses: their fields, annotations and default values). Each key's description is
taken, in this order, from the dataclass docstring of a mapping key, from the comment beside the
key in the commented `registry.yaml` that `registry-gen init` writes, and last from
`config_descriptions.yaml` beside this module, for the keys the code describes nowhere. A key with
no description, or described both in code and in that file, stops the build.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from refgen.text import MissingDescription, code, escaped, table

DESCRIPTIONS_FILE = Path(__file__).with_name("config_descriptions.yaml")
# Settings fields that are no key of registry.yaml: the command line or the loader sets them.
NOT_IN_FILE = {
    "config_file": "the file the settings were read from (--config, $REGISTRY_GEN_CONFIG)",
    "signing_key_pem": "the key's PEM text from $REGISTRY_GEN_SIGNING_KEY",
    "base_url_given": "whether base_url was configured at all",
    "config_warnings": "the loader's warnings about the file",
}
# The rules a `packages:` entry holds (registry_gen.access.parse_rules reads them).
RULE_KEY = "packages.<pattern>.read"
RULE_PREFIX, UPLINK_PREFIX = "packages.<pattern>.", "uplinks.<name>."
TYPE_NAMES = {
    "str": "string",
    "int": "integer",
    "float": "number",
    "bool": "`true` or `false`",
    "Path": "path (relative to registry.yaml)",
    "tuple[str, ...]": "list of strings",
    "Limits": "mapping (the `limits.*` keys below)",
    "AuthLimits": "mapping (the `auth_limits.*` keys below)",
    "HookSettings": "mapping (the `hooks.*` keys below)",
    "AccessRules": "mapping of package-name patterns to rules (below)",
    "tuple[Uplink, ...]": "mapping of uplink names to the `uplinks.<name>.*` keys below",
    "PurgeSettings": "mapping (the `purge.*` keys below)",
}
# Keys whose null means something a reader would not guess from the type.
SHOWN_TYPES = {"storage_conditional_writes": "`auto`, `true` or `false`"}
SHOWN_DEFAULTS = {"storage_conditional_writes": "auto", "uplinks": "{}"}  # uplinks: a mapping, held as a tuple


@dataclass(frozen=True)
class Key:
    """One key of registry.yaml as the reference shows it."""

    name: str
    type: str
    default: str  # a YAML value that, written in registry.yaml, gives the default
    description: str


def yaml_value(value: Any) -> str:
    """`value` the way registry.yaml would spell it (flow style, one line)."""
    from registry_gen.access import AccessRules

    if isinstance(value, Path):
        value = str(value)
    elif isinstance(value, tuple):
        value = list(value)
    elif isinstance(value, AccessRules) or dataclasses.is_dataclass(value):
        value = {}  # an empty mapping: every default of the keys below
    text = yaml.safe_dump(value, default_flow_style=True, width=1_000_000)
    return text.removesuffix("\n...\n").strip()


def type_name(key: str, annotation: str) -> str:
    if key in SHOWN_TYPES:
        return SHOWN_TYPES[key]
    base, _, nullable = annotation.partition(" | ")
    if base not in TYPE_NAMES:
        raise ValueError(f"docs/refgen: no type name for {key}: {annotation} (add it to TYPE_NAMES)")
    return TYPE_NAMES[base] + (", or `null`" if nullable == "None" else "")


def template_comments(keys: Iterable[str]) -> dict[str, str]:
    """What the commented registry.yaml of `registry-gen init` says about each key: the comment
    on its line, or the comment block just above a line that has none."""
    from registry_gen.commands_init import config_text

    wanted, found, block = set(keys), {}, []
    for line in config_text("https://npm.example.com/").splitlines():
        match = re.match(r"^#? ?(?P<key>[a-z_]+):(?P<value>.*?)(?:\s+#\s*(?P<comment>.*))?$", line)
        if match and match["key"] in wanted:
            comment = match["comment"] or (" ".join(block) if not line.startswith("#") else "")
            if comment:
                found.setdefault(match["key"], comment)
            block = []
        elif line.startswith("#") and not line.startswith("#  "):
            block.append(line.lstrip("# ").strip())
        else:
            block = []
    return found


def hand_written() -> dict[str, str]:
    """config_descriptions.yaml: descriptions of the keys the code leaves undescribed."""
    data = yaml.safe_load(DESCRIPTIONS_FILE.read_text(encoding="utf-8")) or {}
    return {str(key): " ".join(str(text).split()) for key, text in data.items()}


def file_fields() -> list[dataclasses.Field[Any]]:
    from registry_gen.settings import Settings

    return [f for f in dataclasses.fields(Settings) if f.name not in NOT_IN_FILE]


def mapping_keys() -> tuple[str, ...]:
    """The top-level keys whose value is a mapping of keys of its own (a settings dataclass;
    `packages:` maps name patterns to rules instead, and has a section of its own)."""
    from registry_gen.access import AccessRules
    from registry_gen.settings import Settings

    defaults = Settings()
    groups = (getattr(defaults, f.name) for f in file_fields())
    return tuple(f.name for f, value in zip(file_fields(), groups) if dataclasses.is_dataclass(value) and not isinstance(value, AccessRules))


def raw_keys() -> list[tuple[str, str, Any, str | None]]:
    """(key, annotation, default, docstring of its mapping type) for every key, nested ones too."""
    from registry_gen.settings import Settings

    defaults = Settings()
    keys = []
    for field in file_fields():
        value = getattr(defaults, field.name)
        doc = inspect.getdoc(type(value)) if dataclasses.is_dataclass(value) else None
        keys.append((field.name, str(field.type), value, doc))
    for prefix in mapping_keys():
        group = getattr(defaults, prefix)
        keys += [(f"{prefix}.{f.name}", str(f.type), getattr(group, f.name), None) for f in dataclasses.fields(group)]
    return keys


def entry_keys() -> list[tuple[str, str, str, str | None]]:
    """(key, type, default, description in the code) of the keys inside one `packages:` entry
    and inside one uplink of `uplinks:` (their loaders: access.parse_rules, mirror.config)."""
    from registry_gen.mirror import config as uplinks
    from registry_gen.mirror.config import Uplink, format_duration
    from registry_gen.mirror.policy import POLICY_KEYS

    from registry_gen.advisories import SEVERITIES

    durations = {"timeout", "maxage", "fail_timeout"}
    severities = ", ".join(code(level) for level in SEVERITIES)
    rule_types = {"proxy": ("uplink name, or `null`", "null"), "min_release_age": ("duration (`3d`, `12h`...), or `null`", "null"),
                  "block": ("list of strings", "[]"), "hide_severity": (f"one of {severities}, or `null`", "null")}  # fmt: skip
    keys = [(RULE_PREFIX + key, *rule_types[key], None) for key in ("proxy", *POLICY_KEYS)]
    comments = docstring_comments(uplinks.__doc__ or "")
    defaults = {f.name: f.default for f in dataclasses.fields(Uplink)}
    shapes = {"url": ("http(s) URL", "(required)"), "auth": ("mapping `{type: bearer or basic, token or token_env}`, or `null`", "null"),
              "headers": ("mapping of header names to strings", "{}"), "cache": ("`true`", "true")}  # fmt: skip
    for key in uplinks.KNOWN_KEYS:
        if key in shapes:
            type_, default = shapes[key]
        else:
            value = defaults[key]
            type_ = "duration (`30s`, `2m`, `1h 30m`...)" if key in durations else TYPE_NAMES[type(value).__name__]
            default = format_duration(value) if key in durations else yaml_value(value)
        keys.append((UPLINK_PREFIX + key, type_, default, comments.get(key)))
    return keys


def docstring_comments(doc: str) -> dict[str, str]:
    """The comment beside each key of the YAML example in a module's docstring."""
    found = {}
    for line in doc.splitlines():
        match = re.match(r"^\s+(?P<key>[a-z_]+):.*?\s#\s*(?P<comment>.*)$", line)
        if match:
            found[match["key"]] = match["comment"].strip(" .")
    return found


def described(name: str, in_code: str | None, notes: dict[str, str], missing: list[str]) -> str:
    """`name`'s one description: the code's, else config_descriptions.yaml's (both, or none: missing)."""
    if in_code and name in notes:
        missing.append(f"{name} (described in the code: remove it from {DESCRIPTIONS_FILE.name})")
    description = in_code or notes.get(name, "")
    if not description:
        missing.append(name)
    return description


def config_keys() -> list[Key]:
    """Every key of registry.yaml with its type, default and description; MissingDescription
    (naming them all) when one has none, or has two."""
    raw = raw_keys()
    from_template = template_comments(name for name, *_ in raw)
    notes = hand_written()
    keys: list[Key] = []
    missing: list[str] = []
    for name, annotation, default, doc in raw:
        description = described(name, doc or from_template.get(name), notes, missing)
        shown = SHOWN_DEFAULTS.get(name) or yaml_value(default)
        keys.append(Key(name, type_name(name, annotation), shown, description))
    keys.append(Key(RULE_KEY, "`all`, `authenticated`, or a list of group names", "all", described(RULE_KEY, None, notes, missing)))
    keys += [Key(name, type_, default, described(name, doc, notes, missing)) for name, type_, default, doc in entry_keys()]
    stale = sorted(set(notes) - {key.name for key in keys})
    missing += [f"{name} (no such key: remove it from {DESCRIPTIONS_FILE.name})" for name in stale]
    if missing:
        raise MissingDescription("registry.yaml keys", missing)
    return keys


def key_table(keys: Iterable[Key]) -> str:
    rows = [(code(k.name), k.type, code(k.default), escaped(k.description)) for k in keys]
    return table(("Key", "Type", "Default", "What it does"), rows)


def environment_table() -> str:
    from registry_gen.cli import DEBUG_ENV
    from registry_gen.hooks.secrets import KEY_ENV as HOOKS_KEY_ENV
    from registry_gen.settings import CONFIG_ENV, DATABASE_URL_ENV, SIGNING_KEY_ENV, STORAGE_ENV

    rows = [
        (CONFIG_ENV, "the config file to read instead of ./registry.yaml (`--config` wins over it)"),
        (DATABASE_URL_ENV, "overrides `database_url`"),
        (STORAGE_ENV, "overrides `storage`"),
        (SIGNING_KEY_ENV, "the signing key's PEM text itself; wins over the file `signing_key` names"),
        (HOOKS_KEY_ENV, "overrides `hooks.secret_key`"),
        (DEBUG_ENV, "any value but empty or 0: an error shows its full traceback (as `--debug`)"),
    ]
    return table(("Variable", "What it does"), [(code(name), text) for name, text in rows])


def config_reference() -> str:
    """The generated part of reference/configuration.md."""
    from registry_gen import access

    keys = config_keys()
    groups = [("Top-level keys", [k for k in keys if "." not in k.name])]
    groups += [(f"`{prefix}:`", [k for k in keys if k.name.startswith(f"{prefix}.")]) for prefix in mapping_keys()]
    parts = [f"## {title}\n\n{key_table(group)}" for title, group in groups]
    rules = (inspect.getdoc(access) or "").partition("\n\n")[2]  # past its one-line summary
    in_rules = key_table(k for k in keys if k.name.startswith(RULE_PREFIX))
    parts.append(f"## `packages:`\n\n{in_rules}\n\n{rules}")
    parts.append(f"## `uplinks:`\n\n{key_table(k for k in keys if k.name.startswith(UPLINK_PREFIX))}")
    parts.append(f"## Environment variables\n\n{environment_table()}")
    return "\n\n".join(parts) + "\n"
