"""Which package a source may write (pure): only the one it was asked for.

An upstream's document, a Verdaccio storage entry and a tarball's own package.json all name a
package and a version. An import asked for `innocent-tool` writes `innocent-tool` and nothing else:
a document, a version entry or a tarball naming another package (or, for a version entry and a
tarball, another version) is refused, so no source decides which local package it lands in.
The build reads a package's name from its tarball, so the tarball's manifest is checked too."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from registry_gen.errors import InvalidVersion
from registry_gen.versions import clean_version


def document_problem(document: Mapping[str, Any], name: str) -> str | None:
    """Why a package document fetched or read for `name` cannot be imported as `name`."""
    found = document.get("name")
    if found != name:
        return f"the document is named {_shown(found)}, not {name!r}: refused, nothing of it is imported"
    return None


def manifest_problem(manifest: Mapping[str, Any], name: str, version: str, what: str) -> str | None:
    """Why a version entry or a tarball's package.json (`what`) is not `name`@`version`."""
    found_name, found_version = manifest.get("name"), manifest.get("version")
    if found_name != name:
        return f"its {what} names package {_shown(found_name)}, not {name!r}: refused"
    if not _same_version(found_version, version):
        return f"its {what} says version {_shown(found_version)}, not {version!r}: refused"
    return None


def _same_version(found: object, wanted: str) -> bool:
    """Equal as the build reads them (node-semver's loose clean: `v1.0.0` is `1.0.0`)."""
    if found == wanted:
        return True  # the usual case, without parsing either
    try:
        return clean_version(found) == clean_version(wanted)
    except InvalidVersion:
        return found == wanted


def _shown(value: object) -> str:
    return repr(value)[:120] if value is not None else "nothing"
