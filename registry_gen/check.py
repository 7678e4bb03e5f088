"""`registry-gen check`: the lint report over every archive in content/."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from registry_gen.archive import read_archive
from registry_gen.build import scan_content
from registry_gen.errors import FieldProblem, InvalidArchive
from registry_gen.lint import lint_manifest
from registry_gen.manifest import manifest_problems
from registry_gen.settings import Settings


@dataclass(frozen=True)
class Finding:
    path: str
    field: str
    rule: str
    message: str
    severity: str  # "error" breaks clients; "lint" is a specification rule

    def __str__(self) -> str:
        return f"{self.path}: {self.severity}: {self.field}: {self.message} [{self.rule}]"


@dataclass
class CheckReport:
    archives: int = 0
    findings: list[Finding] = field(default_factory=list)

    @property
    def errors(self) -> int:
        return sum(1 for f in self.findings if f.severity == "error")

    @property
    def warnings(self) -> int:
        return sum(1 for f in self.findings if f.severity == "lint")


def check_archive(path: Path, relative: str, settings: Settings) -> list[Finding]:
    try:
        with open(path, "rb") as handle:
            contents = read_archive(handle, settings.limits)
    except InvalidArchive as exc:
        return [Finding(relative, "(archive)", exc.rule, exc.message, "error")]
    except OSError as exc:
        return [Finding(relative, "(archive)", "unreadable", str(exc), "error")]
    breaking = {(p.field, p.rule) for p in manifest_problems(contents.manifest)}
    problems: list[FieldProblem] = lint_manifest(contents.manifest)
    return [
        Finding(relative, p.field, p.rule, p.message, "error" if (p.field, p.rule) in breaking else "lint") for p in problems
    ]


def check_content(settings: Settings) -> CheckReport:
    archives, _ = scan_content(settings.content_dir)
    report = CheckReport(archives=len(archives))
    for relative in sorted(archives):
        report.findings += check_archive(settings.content_dir / relative, relative, settings)
    return report
