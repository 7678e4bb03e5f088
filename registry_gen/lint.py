"""The lint behind `registry-gen check`: findings with a severity and a stable rule id.

Two profiles over the raw package.json:
  npm (default)  refusals (error), what npm documents as invalid (warning), legacy shapes npm
                 normalises (info); nothing npm's package.json documentation defines as valid.
  commonjs       the npm profile plus the specification's descriptor rules (part B), as warnings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from registry_gen.lint_commonjs import commonjs_problems
from registry_gen.lint_npm import INFO, WARNING, npm_findings
from registry_gen.manifest import manifest_problems
from registry_gen.settings import CHECK_PROFILES

ERROR = "error"
SEVERITIES = (ERROR, WARNING, INFO)  # most severe first
PROFILES = CHECK_PROFILES


@dataclass(frozen=True)
class Lint:
    field: str
    rule: str
    severity: str
    message: str


def lint_manifest(raw: Any, profile: str = "npm") -> list[Lint]:
    """Every finding for one descriptor under `profile` ("npm" or "commonjs")."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}")
    # What the build refuses (no client could address the package) is an error in every profile.
    findings = [Lint(p.field, p.rule, ERROR, p.message) for p in manifest_problems(raw)]
    if not isinstance(raw, dict):
        return findings
    findings += [Lint(*found) for found in npm_findings(raw)]
    if profile == "commonjs":
        findings += [Lint(p.field, p.rule, WARNING, p.message) for p in commonjs_problems(raw)]
    return findings
