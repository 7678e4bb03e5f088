"""Entry points of installed distributions, read without `importlib.metadata`.

`importlib.metadata` imports the `email` package to parse METADATA files (~0.1 s of a CLI start-up
that must stay under 0.12 s in all), yet an entry point needs only `entry_points.txt`. This reads
those files the way importlib.metadata finds them: every `*.dist-info` / `*.egg-info` folder on
`sys.path`, the first distribution of a (normalised) name winning, as its `entry_points()` does.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

_METADATA_SUFFIXES = (".dist-info", ".egg-info")
_NAME_SEPARATORS = re.compile(r"[-_.]+")


@dataclass(frozen=True)
class EntryPoint:
    """One `name = module:attribute` line of a distribution's entry_points.txt."""

    name: str
    value: str
    group: str

    def load(self) -> Any:
        reference = self.value.split("[", 1)[0]  # `module:attr [extra]`: extras only matter to installers
        module_name, _, attribute = reference.partition(":")
        loaded: Any = importlib.import_module(module_name.strip())
        for part in attribute.strip().split(".") if attribute.strip() else ():
            loaded = getattr(loaded, part)
        return loaded


def distribution_key(folder_name: str) -> str:
    """`My_Dist-1.0.dist-info` -> `my-dist`: the name importlib.metadata deduplicates on."""
    stem = folder_name.rsplit(".", 1)[0]
    return _NAME_SEPARATORS.sub("-", stem.split("-", 1)[0]).lower()


def metadata_folders(paths: Iterable[str]) -> list[str]:
    """Each distribution's metadata folder, first on the path first, one per distribution."""
    seen: set[str] = set()
    found = []
    for entry in paths:
        try:
            names = sorted(os.listdir(entry or "."))
        except OSError:
            continue
        for name in names:
            if name.endswith(_METADATA_SUFFIXES) and distribution_key(name) not in seen:
                seen.add(distribution_key(name))
                found.append(os.path.join(entry or ".", name))
    return found


def entry_points(group: str, paths: Iterable[str] | None = None) -> list[EntryPoint]:
    """Every installed entry point of `group`."""
    found = []
    for folder in metadata_folders(sys.path if paths is None else paths):
        try:
            with open(os.path.join(folder, "entry_points.txt"), encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError):
            continue  # no entry points, or a broken distribution: neither takes the CLI down
        if f"[{group}]" in text:  # parsing only the few files that name the group keeps start-up fast
            found.extend(parse_group(text, group))
    return found


def parse_group(text: str, group: str) -> list[EntryPoint]:
    import configparser  # only a command line that lists or loads plugins reads them

    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # names are case-sensitive
    try:
        parser.read_string(text)
    except configparser.Error:
        return []
    return [EntryPoint(name, value, group) for name, value in parser.items(group)] if parser.has_section(group) else []
