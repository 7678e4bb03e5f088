"""`registry-gen check`: the lint report over every archive in content/.

Archives the build would refuse (unsafe, unreadable, unaddressable) are errors; the rest of the
findings come from the profile in `lint.py`. Rules named in `ignore` are counted, not listed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from registry_gen.archive import read_archive
from registry_gen.build import scan_content
from registry_gen.errors import ConfigError, InvalidArchive
from registry_gen.lint import ERROR, SEVERITIES, WARNING, lint_manifest
from registry_gen.settings import Settings


@dataclass(frozen=True)
class Finding:
    path: str
    field: str
    rule: str
    severity: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.severity}: {self.field}: {self.message} [{self.rule}]"


@dataclass(frozen=True)
class RuleCount:
    rule: str
    severity: str
    count: int


@dataclass
class CheckReport:
    archives: int = 0
    profile: str = "npm"
    findings: list[Finding] = field(default_factory=list)
    ignored: Counter[str] = field(default_factory=Counter)
    ignore_rules: frozenset[str] = frozenset()

    @property
    def unmatched_ignores(self) -> list[str]:
        """Rules asked to be ignored that no finding had (a misspelt rule id, or a clean tree)."""
        return sorted(self.ignore_rules - set(self.ignored))

    def count(self, severity: str) -> int:
        return sum(1 for f in self.findings if f.severity == severity)

    def by_rule(self) -> list[RuleCount]:
        """One line per rule: most frequent first, then most severe, then by name."""
        counts = Counter((f.rule, f.severity) for f in self.findings)
        rows = [RuleCount(rule, severity, n) for (rule, severity), n in counts.items()]
        return sorted(rows, key=lambda r: (-r.count, SEVERITIES.index(r.severity), r.rule))

    def failed(self, strict: bool) -> bool:
        """Errors always fail; warnings fail with --strict; info never does."""
        return bool(self.count(ERROR) or (strict and self.count(WARNING)))

    def summary(self) -> str:
        counts = ", ".join(f"{self.count(s)} {s}{'s' if s != 'info' and self.count(s) != 1 else ''}" for s in SEVERITIES)
        ignored = f"; {sum(self.ignored.values())} ignored" if self.ignored else ""
        return f"checked {self.archives} archives (profile {self.profile}): {counts}{ignored}"

    def to_json(self) -> dict[str, Any]:
        return {
            "archives": self.archives,
            "profile": self.profile,
            "counts": {s: self.count(s) for s in SEVERITIES},
            "rules": [asdict(row) for row in self.by_rule()],
            "ignored": dict(sorted(self.ignored.items())),
            "findings": [asdict(f) for f in self.findings],
        }


def check_archive(path: Path, relative: str, settings: Settings, profile: str = "npm") -> list[Finding]:
    try:
        with open(path, "rb") as handle:
            contents = read_archive(handle, settings.limits)
    except InvalidArchive as exc:
        return [Finding(relative, "(archive)", exc.rule, ERROR, exc.message)]
    except OSError as exc:
        return [Finding(relative, "(archive)", "unreadable", ERROR, str(exc))]
    return [Finding(relative, f.field, f.rule, f.severity, f.message) for f in lint_manifest(contents.manifest, profile)]


def check_content(settings: Settings, *, profile: str | None = None, ignore: Iterable[str] = ()) -> CheckReport:
    """Lint every archive below settings.content_dir; `profile`/`ignore` add to the config's."""
    profile = profile or settings.check_profile
    ignored_rules = set(settings.check_ignore) | set(ignore)
    if not settings.content_dir.is_dir():
        raise ConfigError(f"{settings.content_dir}: no such content folder (pass the folder of archives to check)")
    archives, _ = scan_content(settings.content_dir)
    report = CheckReport(archives=len(archives), profile=profile, ignore_rules=frozenset(ignored_rules))
    for relative in sorted(archives):
        for finding in check_archive(settings.content_dir / relative, relative, settings, profile):
            if finding.rule in ignored_rules:
                report.ignored[finding.rule] += 1
            else:
                report.findings.append(finding)
    return report
