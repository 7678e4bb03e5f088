"""The configuration reference has an entry, with its type, a true default and a description, for
every key the loader of registry.yaml accepts; a key without a description stops it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from refgen import config_reference as reference
from refgen.text import MissingDescription
from registry_gen.errors import ConfigError
from registry_gen.settings import AuthLimits, Limits, Settings, load_settings

from tests.docs.conftest import edit_descriptions


def loader_known_keys(tmp_path: Path, document: dict[str, Any]) -> set[str]:
    """The keys the loader names as known when it meets an unknown one (its own list)."""
    config = tmp_path / "registry.yaml"
    config.write_text(yaml.safe_dump(document), encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        load_settings(config)
    known = re.search(r"\(known: ([^)]*)\)", str(raised.value))
    assert known is not None, str(raised.value)
    return set(known.group(1).split(", "))


def nested_known_keys(tmp_path: Path, key: str) -> set[str]:
    """The keys the loader knows below `key`, if it is a mapping of its own keys (else none)."""
    config = tmp_path / "registry.yaml"
    config.write_text(yaml.safe_dump({key: {"no_such_key": 1}}), encoding="utf-8")
    try:
        load_settings(config)
    except ConfigError as error:
        known = re.search(rf"unknown key {key}\.no_such_key \(known: ([^)]*)\)", str(error))
        return set(known.group(1).split(", ")) if known else set()
    return set()


def entry_known_keys(tmp_path: Path) -> set[str]:
    """The keys the loader knows inside one `packages:` entry and inside one uplink."""
    config = tmp_path / "registry.yaml"
    config.write_text(yaml.safe_dump({"packages": {"x": {"no_such_key": 1}}}), encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        load_settings(config)
    in_rule = re.search(r"must be a mapping of ([^(]*) \(", str(raised.value))
    assert in_rule is not None, str(raised.value)
    in_uplink = loader_known_keys(tmp_path, {"uplinks": {"u": {"url": "https://up.example/", "no_such_key": 1}}})
    return {reference.RULE_PREFIX + key for key in in_rule.group(1).split(", ")} | {reference.UPLINK_PREFIX + key for key in in_uplink}


def every_key(tmp_path: Path) -> set[str]:
    top = loader_known_keys(tmp_path, {"no_such_key": 1})
    nested = {f"{group}.{key}" for group in sorted(top) for key in nested_known_keys(tmp_path, group)}
    entries = entry_known_keys(tmp_path)
    assert {"base_url", "limits", "packages", "storage", "uplinks"} <= top and "limits.max_members" in nested
    assert {reference.RULE_KEY, "packages.<pattern>.proxy", "uplinks.<name>.maxage"} <= entries
    return top | nested | entries


def rows(page: str) -> dict[str, list[str]]:
    """The tables' rows by key: [type, default, description]."""
    found = {}
    for line in page.splitlines():
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 4 and cells[0].startswith("`") and cells[0] != "`Key`":
            found[cells[0].strip("`")] = cells[1:]
    return found


def test_every_key_the_loader_accepts_has_an_entry_with_type_default_and_description(tmp_path: Path) -> None:
    page = reference.config_reference()
    entries = rows(page)
    assert every_key(tmp_path) == set(entries)
    for key, (type_name, default, description) in entries.items():
        assert type_name and default.startswith("`") and len(description) > 10, key


def setting_of(settings: Settings, key: str) -> Any:
    value: Any = settings
    for part in key.split("."):
        value = getattr(value, part)
    return value


def test_each_default_shown_is_the_default_the_loader_uses(tmp_path: Path) -> None:
    defaults = Settings()
    config = tmp_path / "registry.yaml"
    for key in reference.config_keys():
        if key.name.startswith((reference.RULE_PREFIX, reference.UPLINK_PREFIX)):
            continue  # one entry's keys: test_each_default_shown_inside_an_entry_changes_nothing
        group, _, name = key.name.rpartition(".")
        value = yaml.safe_load(key.default)
        config.write_text(yaml.safe_dump({group: {name: value}} if group else {name: value}), encoding="utf-8")
        loaded = setting_of(load_settings(config), key.name)
        expected = setting_of(defaults, key.name)
        if isinstance(expected, Path):  # a path in the file is relative to the file
            expected = tmp_path / expected
        assert loaded == expected, key.name
    assert {k.name: k.default for k in reference.config_keys()}["limits.max_members"] == str(Limits().max_members)
    assert {k.name: k.default for k in reference.config_keys()}["auth_limits.signup_burst"] == str(AuthLimits().signup_burst)


def test_each_default_shown_inside_an_entry_changes_nothing(tmp_path: Path) -> None:
    """A `packages:` entry or an uplink with a key written at its shown default loads as one without it."""
    config = tmp_path / "registry.yaml"

    def loaded(rule: dict[str, Any], uplink: dict[str, Any]) -> tuple[Any, Any]:
        document = {"uplinks": {"up": {"url": "https://up.example/", **uplink}}, "packages": {"**": {"read": "all", **rule}}}
        config.write_text(yaml.safe_dump(document), encoding="utf-8")
        settings = load_settings(config)
        return settings.packages.rules, settings.uplinks

    plain = loaded({}, {})
    shown = [key for key in reference.config_keys() if key.name.startswith((reference.RULE_PREFIX, reference.UPLINK_PREFIX))]
    assert len(shown) == 15
    for key in shown:
        if key.default == "(required)":
            continue
        group, _, name = key.name.rpartition(".")
        value = yaml.safe_load(key.default)
        written = loaded({name: value}, {}) if group + "." == reference.RULE_PREFIX else loaded({}, {name: value})
        assert written == plain, key.name
    assert {k.name: k.default for k in shown}["uplinks.<name>.maxage"] == "2m"


def test_descriptions_come_from_the_code_where_it_has_them() -> None:
    described = {key.name: key.description for key in reference.config_keys()}
    # The comment beside the key in init's registry.yaml, the comment block above base_url, the
    # dataclass docstring of a mapping.
    assert described["gzip"].startswith("write .gz siblings")
    assert described["base_url"].startswith("The public URL clients use")
    assert described["limits"].startswith("Caps on what an archive may hold")
    assert described["state_dir"].startswith("the build's state beside the tree")
    assert described["uplinks.<name>.maxage"].startswith("a fetched document is fresh this long")  # mirror.config's example


@pytest.mark.parametrize(
    ("drop", "add", "named"),
    [
        ("site_title", None, "site_title"),
        ("limits.max_members", None, "limits.max_members"),
        ("", {"no_such_key": "gone"}, "no_such_key (no such key"),
        ("", {"gzip": "said twice"}, "gzip (described in the code"),
    ],
)
def test_a_key_without_one_description_stops_the_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, drop: str, add: dict[str, str] | None, named: str
) -> None:
    edit_descriptions(tmp_path, monkeypatch, reference, "DESCRIPTIONS_FILE", drop, add)
    with pytest.raises(MissingDescription) as raised:
        reference.config_reference()
    assert any(name.startswith(named) for name in raised.value.names), raised.value.names


def test_a_new_settings_field_needs_a_description(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A key added to the settings without a comment in init's file or an entry here: named."""
    plain = reference.raw_keys()
    monkeypatch.setattr(reference, "raw_keys", lambda: [*plain, ("new_key", "int", 3, None)])
    with pytest.raises(MissingDescription) as raised:
        reference.config_keys()
    assert raised.value.names == ("new_key",)


def test_environment_variables_are_listed_and_do_what_they_say(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page = reference.config_reference()
    for variable in ("REGISTRY_GEN_CONFIG", "REGISTRY_DATABASE_URL", "REGISTRY_STORAGE", "REGISTRY_GEN_SIGNING_KEY", "REGISTRY_GEN_DEBUG"):
        assert f"`{variable}`" in page
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("REGISTRY_DATABASE_URL", "postgresql://u@h/db")
    monkeypatch.setenv("REGISTRY_STORAGE", "s3://bucket/prefix")
    settings = load_settings()
    assert (settings.database_url, settings.storage) == ("postgresql://u@h/db", "s3://bucket/prefix")
