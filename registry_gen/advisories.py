"""Security advisories the operator records, in the shape npm's bulk audit endpoint answers.

The source is a folder, `<content>/advisories/`, of JSON files in either format the operator is
likely to have: OSV (what the GitHub advisory database and osv.dev publish) or the GitHub REST
advisory object. Parsing and the bulk answer are pure functions; reading the folder and adding a
file (atomically, after parsing it) are the only I/O.

No folder means no advisory source: the audit endpoints then answer 404 with a message, so npm says
the audit failed instead of reporting "found 0 vulnerabilities" (see SECURITY.md).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from registry_gen.errors import RegistryError
from registry_gen.names import validate_name
from registry_gen.ranges import is_valid_range
from registry_gen.settings import Settings
from registry_gen.writer import atomic_write_bytes

ADVISORY_FOLDER = "advisories"
SEVERITIES = ("info", "low", "moderate", "high", "critical")
_SEVERITY_ALIASES = {"medium": "moderate", "none": "info"}
MALWARE_CWE = "CWE-506"  # Embedded Malicious Code
_SAFE_ID = re.compile(r"[^A-Za-z0-9._-]+")


class InvalidAdvisory(RegistryError, ValueError):
    """An advisory file that is neither OSV nor a GitHub advisory, or names no npm package."""


@dataclass(frozen=True)
class Advisory:
    """One advisory for one npm package, as npm's bulk endpoint reports it."""

    source_id: str  # GHSA-..., CVE-..., or the operator's own id
    name: str
    title: str
    url: str
    severity: str
    vulnerable_versions: str
    cwe: tuple[str, ...] = ()
    cvss_score: float | None = None
    cvss_vector: str | None = None
    # Malware rather than a flaw: OSV's malicious-packages entries (`MAL-...`), GitHub's `type:
    # malware`, or CWE-506 (embedded malicious code). The mirror's `block: [$malicious]` reads it.
    malicious: bool = False

    @property
    def number(self) -> int:
        """npm wants a numeric id: a stable one from the source id."""
        return int(hashlib.sha256(self.source_id.encode()).hexdigest()[:12], 16)

    def to_bulk(self) -> dict[str, Any]:
        return {
            "id": self.number, "url": self.url, "title": self.title, "severity": self.severity,
            "vulnerable_versions": self.vulnerable_versions, "cwe": list(self.cwe),
            "cvss": {"score": self.cvss_score or 0, "vectorString": self.cvss_vector},
            "github_advisory_id": self.source_id,
        }


def _severity(value: object, where: str) -> str:
    text = str(value or "").strip().lower()
    text = _SEVERITY_ALIASES.get(text, text)
    if text not in SEVERITIES:
        raise InvalidAdvisory(f"{where}: severity must be one of {', '.join(SEVERITIES)} (or medium); got {value!r}")
    return text


def _checked_range(text: str, where: str) -> str:
    if not text or not is_valid_range(text):
        raise InvalidAdvisory(f"{where}: {text!r} is not a semver range npm can read")
    return text


def _osv_range(events: Iterable[Mapping[str, str]]) -> list[str]:
    """OSV events (introduced / fixed / last_affected) as node-semver ranges."""
    parts: list[str] = []
    start: str | None = None
    for event in events:
        if "introduced" in event:
            start = str(event["introduced"])
        elif start is not None and ("fixed" in event or "last_affected" in event):
            low = "" if start == "0" else f">={start} "
            high = f"<{event['fixed']}" if "fixed" in event else f"<={event['last_affected']}"
            parts.append(low + high)
            start = None
    if start is not None:
        parts.append("*" if start == "0" else f">={start}")
    return parts


def _osv_severity(data: Mapping[str, Any], where: str) -> str:
    specific = data.get("database_specific")
    if isinstance(specific, Mapping) and specific.get("severity"):
        return _severity(specific["severity"], where)
    return "high"  # npm's own default for an advisory that names no severity


def _first_url(data: Mapping[str, Any], source_id: str) -> str:
    for reference in data.get("references") or []:
        if isinstance(reference, Mapping) and isinstance(reference.get("url"), str):
            return str(reference["url"])
    return f"urn:advisory:{source_id}"


def parse_osv(data: Mapping[str, Any], where: str) -> list[Advisory]:
    source_id = str(data.get("id") or "")
    if not source_id:
        raise InvalidAdvisory(f"{where}: an OSV advisory needs an id")
    severity, url = _osv_severity(data, where), _first_url(data, source_id)
    title = str(data.get("summary") or data.get("details") or source_id)[:300]
    cwe = (data.get("database_specific") or {}).get("cwe_ids") or []
    found = []
    for affected in data.get("affected") or []:
        package = affected.get("package") or {}
        if str(package.get("ecosystem", "")).lower() != "npm":
            continue
        name = validate_name(package.get("name"), legacy=True)
        ranges = [r for entry in affected.get("ranges") or [] if entry.get("type") in ("SEMVER", "ECOSYSTEM")
                  for r in _osv_range(entry.get("events") or [])]
        ranges += [str(v) for v in affected.get("versions") or []]
        if not ranges:
            raise InvalidAdvisory(f"{where}: {name} lists no affected versions or ranges")
        text = _checked_range(" || ".join(dict.fromkeys(ranges)), where)
        malicious = source_id.startswith("MAL-") or MALWARE_CWE in map(str, cwe)
        found.append(Advisory(source_id, name, title, url, severity, text, tuple(map(str, cwe)), malicious=malicious))
    return found


def parse_github(data: Mapping[str, Any], where: str) -> list[Advisory]:
    source_id = str(data.get("ghsa_id") or data.get("id") or "")
    if not source_id:
        raise InvalidAdvisory(f"{where}: a GitHub advisory needs a ghsa_id")
    severity = _severity(data.get("severity"), where)
    url = str(data.get("html_url") or data.get("url") or f"urn:advisory:{source_id}")
    title = str(data.get("summary") or source_id)[:300]
    cwe = tuple(str(c.get("cwe_id")) for c in data.get("cwes") or [] if isinstance(c, Mapping) and c.get("cwe_id"))
    cvss = data.get("cvss") if isinstance(data.get("cvss"), Mapping) else {}
    found = []
    for vulnerability in data.get("vulnerabilities") or []:
        package = vulnerability.get("package") or {}
        if str(package.get("ecosystem", "")).lower() != "npm":
            continue
        name = validate_name(package.get("name"), legacy=True)
        # GitHub writes ">= 1.0.0, < 1.2.3"; node-semver reads the comma-free form.
        text = _checked_range(str(vulnerability.get("vulnerable_version_range") or "").replace(",", " "), where)
        malicious = str(data.get("type") or "").lower() == "malware" or MALWARE_CWE in cwe
        found.append(Advisory(source_id, name, title, url, severity, " ".join(text.split()), cwe,
                              cvss.get("score"), cvss.get("vector_string"), malicious))
    return found


def parse_advisory(raw: bytes, where: str) -> list[Advisory]:
    """The npm advisories in one OSV or GitHub advisory JSON document (at least one)."""
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise InvalidAdvisory(f"{where}: not valid JSON ({exc})") from exc
    if not isinstance(data, Mapping):
        raise InvalidAdvisory(f"{where}: an advisory must be a JSON object")
    try:
        if "affected" in data:
            found = parse_osv(data, where)
        elif "vulnerabilities" in data:
            found = parse_github(data, where)
        else:
            raise InvalidAdvisory(f"{where}: neither OSV (`affected`) nor a GitHub advisory (`vulnerabilities`)")
    except (AttributeError, TypeError) as exc:
        raise InvalidAdvisory(f"{where}: unexpected shape ({exc})") from exc
    except InvalidAdvisory:
        raise  # says `where` already
    except RegistryError as exc:
        raise InvalidAdvisory(f"{where}: {exc}") from exc
    if not found:
        raise InvalidAdvisory(f"{where}: names no npm package")
    return found


def bulk_report(advisories: Iterable[Advisory], request: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """npm's bulk answer: for each requested package name, the advisories recorded for it."""
    report: dict[str, list[dict[str, Any]]] = {}
    for advisory in advisories:
        if advisory.name in request:
            report.setdefault(advisory.name, []).append(advisory.to_bulk())
    return report


# ---------------------------------------------------------------- the folder


def advisory_folder(settings: Settings) -> Path:
    return settings.content_dir / ADVISORY_FOLDER


def load_advisories(folder: Path) -> tuple[list[Advisory], list[str]] | None:
    """Every advisory in `folder` and one line per unreadable file; None when there is no folder."""
    if not folder.is_dir():
        return None
    advisories: list[Advisory] = []
    problems: list[str] = []
    for path in sorted(folder.glob("*.json")):
        try:
            advisories += parse_advisory(path.read_bytes(), str(path))
        except (InvalidAdvisory, OSError) as exc:
            problems.append(str(exc))
    return advisories, problems


def add_advisory(settings: Settings, raw: bytes, where: str) -> list[Advisory]:
    """Checks an advisory document and stores it in the folder (atomically, named after its id)."""
    found = parse_advisory(raw, where)
    folder = advisory_folder(settings)
    folder.mkdir(parents=True, exist_ok=True)
    name = _SAFE_ID.sub("_", found[0].source_id).strip("._") or "advisory"
    atomic_write_bytes(folder / f"{name}.json", raw)
    return found
