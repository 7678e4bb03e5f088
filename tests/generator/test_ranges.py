"""Dependency specs and node-semver ranges, on specs real package.json files carry."""

from __future__ import annotations

import pytest

from registry_gen.ranges import FILE, GIT, INVALID, PROTOCOL, RANGE, TAG, URL, WORKSPACE, Spec, parse_spec, resolves, satisfies

# (range, version, satisfied?) as node-semver answers (npm reads ranges with loose: true).
RANGES = [
    ("^1.2.3", "1.9.0", True),
    ("^1.2.3", "2.0.0", False),
    ("^1.2.3", "1.2.2", False),
    ("^0.2.3", "0.2.9", True),
    ("^0.2.3", "0.3.0", False),
    ("^0.0.3", "0.0.4", False),
    ("^0.x", "0.9.0", True),
    ("^0.x", "1.0.0", False),
    ("~1.2.3", "1.2.9", True),
    ("~1.2.3", "1.3.0", False),
    ("~1.2", "1.2.0", True),
    ("~1", "1.9.9", True),
    ("1.x", "1.4.0", True),
    ("1.2.*", "1.2.7", True),
    ("x.x.x", "4.0.0", True),
    ("*", "3.1.4", True),
    ("", "0.0.1", True),
    (">=1.0.0 <2", "1.5.0", True),
    (">= 1.0.0 < 2", "2.0.0", False),  # spaces after operators, as old packages write them
    (">1", "1.5.0", False),
    (">1", "2.0.0", True),
    ("<1.2", "1.2.0", False),
    ("<=1.2", "1.2.9", True),
    ("1.2.3 - 2.3", "2.3.9", True),  # hyphen range with a partial upper bound
    ("1.2.3 - 2", "3.0.0", False),
    ("1.x || >=2.5.0 || 5.0.0 - 7.2.3", "6.0.0", True),
    ("1.x || >=2.5.0 || 5.0.0 - 7.2.3", "2.4.0", False),
    ("^16.8.0 || ^17.0.0 || ^18.0.0", "18.3.1", True),  # react peer ranges
    ("=1.2.3", "1.2.3", True),
    ("v1.2.3", "1.2.3", True),
    ("1.2.3+build", "1.2.3", True),
    # prereleases match only a comparator with the same major.minor.patch and a prerelease
    (">=1.0.0", "2.0.0-beta.1", False),
    ("*", "1.0.0-beta", False),
    ("^1.2.3", "2.0.0-pre", False),
    ("^1.2.3-beta.2", "1.2.3-beta.4", True),
    ("^1.2.3-beta.2", "1.2.4-beta.2", False),
    ("~1.2.3-beta.2", "1.2.3-beta.4", True),
    ("^2.0.0-beta", "2.0.0-beta.2", True),
    (">1.0.0-alpha <1.0.0-gamma", "1.0.0-beta", True),
    ("^1.0.0-0", "1.0.0-rc.1", True),
]


@pytest.mark.parametrize(("range_text", "version", "expected"), RANGES)
def test_node_semver_ranges(range_text: str, version: str, expected: bool) -> None:
    assert satisfies(version, range_text) is expected


SPECS = [
    # (name, spec, kind, looked-up name, selector)
    ("lodash", "^4.17.21", RANGE, "lodash", "^4.17.21"),
    ("debug", "2.6.9", RANGE, "debug", "2.6.9"),
    ("typescript", "next", TAG, "typescript", "next"),
    ("react", "latest", TAG, "react", "latest"),
    ("string-width-cjs", "npm:string-width@^4.2.0", RANGE, "string-width", "^4.2.0"),  # @isaacs/cliui
    ("wrap", "npm:@scope/wrap-ansi@7", RANGE, "@scope/wrap-ansi", "7"),
    ("any", "npm:left-pad", RANGE, "left-pad", "*"),
    ("x", "git+https://github.com/user/x.git#v1.0.0", GIT, "x", "git+https://github.com/user/x.git#v1.0.0"),
    ("x", "git://github.com/user/x.git", GIT, "x", "git://github.com/user/x.git"),
    ("x", "github:user/x#semver:^1.0", GIT, "x", "github:user/x#semver:^1.0"),
    ("x", "user/x", GIT, "x", "user/x"),
    ("x", "user/x#main", GIT, "x", "user/x#main"),
    ("x", "https://example.org/x-1.0.0.tgz", URL, "x", "https://example.org/x-1.0.0.tgz"),
    ("x", "file:../x", FILE, "x", "file:../x"),
    ("x", "./vendor/x-1.0.0.tgz", FILE, "x", "./vendor/x-1.0.0.tgz"),
    ("x", "link:../x", FILE, "x", "link:../x"),
    ("x", "workspace:^", WORKSPACE, "x", "workspace:^"),
    ("x", "portal:../x", PROTOCOL, "x", "portal:../x"),
    ("x", "not a range at all", INVALID, "x", "not a range at all"),
]


@pytest.mark.parametrize(("name", "spec", "kind", "target", "selector"), SPECS)
def test_specs_are_classified_as_npm_reads_them(name: str, spec: str, kind: str, target: str, selector: str) -> None:
    assert parse_spec(name, spec) == Spec(kind, target, selector)


PUBLISHED = frozenset({"1.0.0", "1.4.2", "2.0.0-rc.1"})


@pytest.mark.parametrize(
    ("spec", "tags", "expected"),
    [
        ("^1.2.0", {"latest": "1.4.2"}, True),
        ("^2.0.0", {"latest": "1.4.2"}, False),  # only a prerelease of 2 exists
        ("^2.0.0-rc.0", {"latest": "1.4.2"}, True),
        ("*", {"latest": "2.0.0-rc.1"}, True),  # npm takes a `latest` prerelease for `*`
        ("next", {"latest": "1.4.2", "next": "2.0.0-rc.1"}, True),
        ("next", {"latest": "1.4.2"}, False),
        ("next", {"latest": "1.4.2", "next": "9.9.9"}, False),  # a tag pointing nowhere
    ],
)
def test_resolves_against_published_versions_and_tags(spec: str, tags: dict[str, str], expected: bool) -> None:
    assert resolves(parse_spec("pkg", spec), PUBLISHED, tags) is expected


def test_external_specs_never_resolve_from_the_registry() -> None:
    spec = parse_spec("x", "github:user/x")
    assert not spec.from_registry and not resolves(spec, PUBLISHED, {"latest": "1.4.2"})
