"""The mirror's pure parts: registry.yaml's uplinks and proxy rules, the policy's verdicts, what a
mirror takes of an upstream document and the document it serves from that."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import pytest

from registry_gen.access import ALL, AUTHENTICATED, parse_rules
from registry_gen.advisories import parse_advisory
from registry_gen.errors import ConfigError
from registry_gen.importers.model import ImportProblem
from registry_gen.importers.verdaccio import registry_config
from registry_gen.mirror.config import parse_duration, parse_uplinks
from registry_gen.mirror.policy import VersionFacts, allowed_latest, decide, epoch, parse_policy
from registry_gen.mirror.record import MirrorRecord
from registry_gen.mirror.sharing import Flights, LandingQueue
from registry_gen.mirror.taking import judged, mirrored_meta, take_document, worth_landing
from registry_gen.packument import build_packument
from registry_gen.settings import Settings

NOW = epoch("2026-06-10T00:00:00.000Z") or 0.0
UPLINK = parse_uplinks({"up": {"url": "http://up.example/"}})["up"]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("2m", 120), ("12h", 43200), ("30d", 2592000), ("1h 30m", 5400), ("100ms", 0.1), (5, 5), ("1w", 604800), ("1M", 2592000), ("3", 3)],
)
def test_durations_read_as_verdaccio_writes_them(text: Any, seconds: float) -> None:
    assert parse_duration(text, "x") == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["30 days", "1m 2h", "", "-1d", True, "2x", "1h 3"])
def test_a_duration_verdaccio_would_refuse_is_refused_naming_the_key(text: Any) -> None:
    with pytest.raises(ConfigError, match="uplinks.up.maxage"):
        parse_duration(text, "uplinks.up.maxage")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"timeout": "3s"}, "uplinks.up.url must be an http"),
        ({"url": "ftp://x/"}, "uplinks.up.url must be an http"),
        ({"url": "http://x/", "ca": "/etc/ssl/x.pem"}, r"uplinks.up.ca is a Verdaccio setting registry-gen does not support"),
        ({"url": "http://x/", "maxAge": "2m"}, r"unknown key 'maxAge'"),
        ({"url": "http://x/", "cache": False}, r"uplinks.up.cache: registry-gen always keeps"),
        ({"url": "http://x/", "auth": {"type": "bearer", "token_env": "NOT_SET_ANYWHERE"}}, r"NOT_SET_ANYWHERE is not set"),
        ({"url": "http://x/", "headers": {"X-A": "b\r\nHost: evil"}}, r"headers: 'X-A' is not a header"),
        ({"url": "http://x/", "max_fails": -1}, r"max_fails must be a whole number"),
    ],
)
def test_bad_uplinks_are_refused_with_the_key_named(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_uplinks({"up": spec}, environ={})


def test_uplink_defaults_are_verdaccios_and_tokens_come_from_the_environment() -> None:
    uplink = parse_uplinks({"up": {"url": "http://x", "auth": {"type": "bearer", "token_env": True}}}, environ={"NPM_TOKEN": "s3cret"})["up"]
    assert (uplink.url, uplink.timeout, uplink.maxage, uplink.max_fails, uplink.fail_timeout) == ("http://x/", 30, 120, 2, 300)
    assert (uplink.auth_scheme, uplink.token) == ("Bearer", "s3cret")
    assert "s3cret" not in repr(uplink)


def test_proxy_rules_read_as_the_default_and_the_first_matching_pattern_decides() -> None:
    rules = parse_rules({"@corp/*": {"read": "authenticated"}, "**": {"proxy": "up", "min_release_age": "3d"}})
    assert rules.rule_for("@corp/x").read == AUTHENTICATED and rules.proxy_rule("@corp/x") is None
    assert rules.rule_for("left-pad").read == ALL and rules.proxy_rule("left-pad").proxy == "up"  # type: ignore[union-attr]
    assert rules.proxies and rules.in_force


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"min_release_age": "3d"}, r"apply to mirrored packages only: add proxy"),
        ({"proxy": "up", "block": ["$unknown"]}, r"'\$unknown' is not a marker"),
        ({"proxy": "up", "block": ["left-pad@not a range"]}, r"is not a semver range"),
        ({"proxy": "up", "block": "left-pad"}, r"block must be a list"),
        ({"proxy": "up", "hide_severity": "severe"}, r"hide_severity must be one of info, low, moderate, high, critical"),
        ({"proxy": ["up", "other"]}, r"proxy must name one uplink"),
        ({"proxy": "up", "access": "$all"}, r"must be a mapping of read, proxy"),
    ],
)
def test_bad_proxy_rules_are_refused_with_the_pattern_named(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_rules({"**": spec})


def test_a_proxy_naming_no_uplink_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"packages.'\*\*'.proxy names the uplink 'npmjs', which uplinks: does not define \(defined: up\)"):
        Settings(packages=parse_rules({"**": {"proxy": "npmjs"}}), uplinks=(UPLINK,))


def _facts(version: str, published: str | None = "2020-01-01T00:00:00.000Z", deprecated: str | None = None) -> VersionFacts:
    return VersionFacts(version, published, "published upstream", deprecated)


def test_verdicts_name_the_rule_that_holds_each_version_back() -> None:
    policy = parse_policy("**", {"block": ["evil@>=2 <3", "$deprecated"], "min_release_age": "3d"})
    facts = [_facts("1.0.0"), _facts("2.1.0"), _facts("1.5.0", deprecated="use 1.0"), _facts("3.0.0", "2026-06-09T00:00:00.000Z")]
    verdicts = decide("evil", facts, policy, [], NOW)
    assert sorted(verdicts.held) == ["1.5.0", "2.1.0", "3.0.0"]
    assert verdicts.held["2.1.0"].reason == "blocked by the block entry 'evil@>=2 <3'"
    assert verdicts.held["1.5.0"].reason == "blocked by $deprecated: the upstream deprecated it (use 1.0)"
    assert verdicts.held["3.0.0"].reason == (
        "too young: published upstream 2026-06-09T00:00:00.000Z, served from 2026-06-12T00:00:00.000Z (min_release_age 3d)"
    )
    assert verdicts.next_change == epoch("2026-06-12T00:00:00.000Z")
    assert decide("other", facts[:2], policy, [], NOW).held == {}  # the range names evil only


def test_scopes_and_glob_names_block_every_version_of_what_they_match() -> None:
    policy = parse_policy("**", {"block": ["@evil", "typo-*"]})
    assert set(decide("@evil/x", [_facts("1.0.0")], policy, [], NOW).held) == {"1.0.0"}
    assert set(decide("typo-lodash", [_facts("1.0.0")], policy, [], NOW).held) == {"1.0.0"}
    assert decide("@good/x", [_facts("1.0.0")], policy, [], NOW).held == {}


def test_recorded_advisories_hold_back_malware_and_opted_in_severities() -> None:
    malware = parse_advisory(b'{"id": "MAL-2026-1", "affected": [{"package": {"ecosystem": "npm", "name": "pkg"}, '
                             b'"versions": ["1.0.1"]}]}', "mal.json")  # fmt: skip
    flaw = parse_advisory(b'{"ghsa_id": "GHSA-aaaa-bbbb-cccc", "severity": "high", "vulnerabilities": [{"package": '
                          b'{"ecosystem": "npm", "name": "pkg"}, "vulnerable_version_range": "< 1.0.0"}]}', "gh.json")  # fmt: skip
    advisories = malware + flaw
    facts = [_facts("0.9.0"), _facts("1.0.0"), _facts("1.0.1")]
    assert malware[0].malicious and not flaw[0].malicious
    assert set(decide("pkg", facts, parse_policy("**", {"block": ["$malicious"]}), advisories, NOW).held) == {"1.0.1"}
    hidden = decide("pkg", facts, parse_policy("**", {"hide_severity": "high"}), advisories, NOW).held
    assert hidden["0.9.0"].reason == "hidden by hide_severity high: advisory GHSA-aaaa-bbbb-cccc (high)"
    assert decide("pkg", facts, parse_policy("**", {"hide_severity": "critical"}), advisories, NOW).held == {}


def test_a_version_with_no_time_is_too_young_for_any_minimum_age() -> None:
    held = decide("x", [_facts("1.0.0", published=None)], parse_policy("**", {"min_release_age": "1m"}), [], NOW).held
    assert held["1.0.0"].reason.startswith("too young: no time is known") and held["1.0.0"].until is None


@pytest.mark.parametrize(
    ("allowed", "upstream", "expected"),
    [(["1.0.0", "2.0.0"], "2.0.0", "2.0.0"), (["1.0.0", "1.1.0", "3.0.0"], "2.0.0", "1.1.0"), (["1.0.0", "1.1.0-rc.1"], "2.0.0", "1.0.0"),
     (["2.0.0-rc.1"], "2.0.0", None), ([], "1.0.0", None)],
)  # fmt: skip
def test_latest_moves_to_the_newest_allowed_version_at_or_below_the_upstreams(allowed: list[str], upstream: str, expected: str | None) -> None:
    assert allowed_latest(allowed, upstream) == expected


def _document(name: str = "pkg", **versions: dict[str, Any]) -> dict[str, Any]:
    entries = {v: {"name": name, "version": v, "dist": {"tarball": f"http://up.example/{name}/-/{name}-{v}.tgz", "shasum": "ab" * 20,
                                                        "integrity": "sha512-" + "A" * 86 + "==", "signatures": [{"sig": "upstream"}]},
                   "contributors": [{"name": "c"}], "readme": "per-version readme", **extra} for v, extra in versions.items()}  # fmt: skip
    times = {v: f"2020-01-0{i + 1}T00:00:00.000Z" for i, v in enumerate(versions)}
    return {"name": name, "versions": entries, "time": {"created": "2020-01-01T00:00:00.000Z", **times},
            "dist-tags": {"latest": list(versions)[-1]}, "readme": "# pkg", "maintainers": [{"name": "owner", "email": "o@x"}]}  # fmt: skip


def test_an_upstream_writes_only_the_package_it_was_asked_for() -> None:
    with pytest.raises(ImportProblem, match=r"pkg: the document is named 'other', not 'pkg'"):
        take_document(_document("other", **{"1.0.0": {}}), "pkg", UPLINK, None, "2026-06-10T00:00:00.000Z")
    document = _document(**{"1.0.0": {}, "1.1.0": {"name": "evil"}, "2.0.0": {"version": "9.9.9"}})
    record = take_document(document, "pkg", UPLINK, None, "2026-06-10T00:00:00.000Z")
    assert sorted(record.versions) == ["1.0.0"]


def test_what_the_mirror_keeps_and_the_document_it_serves() -> None:
    first = take_document(_document(**{"1.0.0": {}, "2.0.0": {}}), "pkg", UPLINK, None, "2026-06-01T00:00:00.000Z")
    again = take_document(_document(**{"1.0.0": {}, "2.0.0": {}, "3.0.0": {"deprecated": "no"}}), "pkg", UPLINK, first, "2026-06-10T00:00:00.000Z")
    assert again.first_seen == {"1.0.0": "2026-06-01T00:00:00.000Z", "2.0.0": "2026-06-01T00:00:00.000Z",
                                "3.0.0": "2026-06-10T00:00:00.000Z"}  # fmt: skip
    assert "readme" not in again.versions["1.0.0"] and "contributors" not in again.versions["1.0.0"]
    assert again.versions["3.0.0"]["contributors"] == [{"name": "c"}]  # kept for latest only
    decided, _ = judged("pkg", again, parse_policy("**", {"block": ["$deprecated"]}), [], NOW)
    document = build_packument("pkg", [], mirrored_meta(decided, None, "pkg"), base_url="http://here/", readme=None, readme_filename=None)
    assert sorted(document["versions"]) == ["1.0.0", "2.0.0"] and "3.0.0" not in document["time"]
    assert document["dist-tags"] == {"latest": "2.0.0"}
    assert document["versions"]["2.0.0"]["dist"] == {"tarball": "http://here/pkg/-/pkg-2.0.0.tgz", "shasum": "ab" * 20,
                                                     "integrity": "sha512-" + "A" * 86 + "=="}  # fmt: skip
    assert document["_mirror"]["held"] == {"3.0.0": "blocked by $deprecated: the upstream deprecated it (no)"}
    assert document["readme"] == "# pkg" and document["maintainers"] == [{"name": "owner", "email": "o@x"}]


def test_an_untrusted_uplinks_versions_age_and_show_from_when_they_were_first_seen() -> None:
    untrusted = dataclasses.replace(UPLINK, untrusted=True)
    record = take_document(_document(**{"1.0.0": {}}), "pkg", untrusted, None, "2026-06-09T12:00:00.000Z")
    decided, verdicts = judged("pkg", record, parse_policy("**", {"min_release_age": "2d"}), [], NOW)
    assert decided.held["1.0.0"].startswith("too young: first seen here 2026-06-09T12:00:00.000Z")
    served = dataclasses.replace(record, held={})
    document = build_packument("pkg", [], mirrored_meta(served, None, "pkg"), base_url="http://h/", readme=None, readme_filename=None)
    assert document["time"]["1.0.0"] == "2026-06-09T12:00:00.000Z"


def test_a_version_whose_tarball_cannot_be_checked_is_never_served() -> None:
    document = _document(**{"1.0.0": {}})
    document["versions"]["1.0.0"]["dist"] = {"tarball": "http://up.example/pkg/-/pkg-1.0.0.tgz"}
    record = take_document(document, "pkg", UPLINK, None, "2026-06-10T00:00:00.000Z")
    decided, _ = judged("pkg", record, parse_policy("**", {}), [], NOW)
    assert decided.held == {"1.0.0": "unverifiable: the upstream lists no digest to check its tarball against"}


def test_an_unchanged_upstream_moves_the_refresh_time_at_most_daily() -> None:
    record = MirrorRecord("up", "http://up/", "2026-06-10T00:00:00.000Z", versions={"1.0.0": {}})
    before = mirrored_meta(record, None, "pkg")
    hour_later = mirrored_meta(dataclasses.replace(record, refreshed="2026-06-10T01:00:00.000Z"), before, "pkg")
    day_later = mirrored_meta(dataclasses.replace(record, refreshed="2026-06-11T00:00:00.000Z"), before, "pkg")
    changed = mirrored_meta(dataclasses.replace(record, refreshed="2026-06-10T01:00:00.000Z", held={"1.0.0": "x"}), before, "pkg")
    assert (worth_landing(before, hour_later, 86400), worth_landing(before, day_later, 86400), worth_landing(before, changed, 86400)) == (False, True, True)


def test_a_verdaccio_config_is_translated_with_what_does_not_carry_over_said() -> None:
    config = {
        "uplinks": {"npmjs": {"url": "https://registry.npmjs.org/", "maxage": "10m", "agent_options": {"keepAlive": True}}},
        "packages": {"@corp/*": {"access": "$authenticated", "publish": "$authenticated"}, "secret": {"access": "team-a team-b"},
                     "**": {"access": "$all", "proxy": "npmjs"}},
        "filters": {"@verdaccio/package-filter": {"minAgeDays": 7, "block": [{"scope": "@evil"}, {"package": "ev", "versions": "3.3.6"}]}},
    }  # fmt: skip
    keys, notes = registry_config(config)
    assert keys == {
        "uplinks": {"npmjs": {"url": "https://registry.npmjs.org/", "maxage": "10m"}},
        "packages": {"@corp/*": {"read": "authenticated"}, "secret": {"read": ["team-a", "team-b"]},
                     "**": {"read": "all", "proxy": "npmjs", "min_release_age": "7d", "block": ["@evil", "ev@3.3.6"]}},
    }  # fmt: skip
    assert any("agent_options not carried over" in note for note in notes)
    assert any("publish/unpublish not carried over" in note for note in notes)
    parsed = parse_rules(keys["packages"])  # what it prints is a valid registry.yaml
    assert parsed.proxy_rule("left-pad") is not None


def test_one_upstream_request_however_many_ask_at_once() -> None:
    flights, calls, release = Flights(), [], threading.Event()

    def fetch() -> str:
        calls.append(1)
        release.wait(10)
        return "document"

    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(flights.run("pkg", fetch))) for _ in range(12)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    while len(flights.running) != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    release.set()
    for thread in threads:
        thread.join(10)
    assert calls == [1] and results == ["document"] * 12


def test_landings_are_written_at_once_and_built_together() -> None:
    stored: list[list[str]] = []
    built: list[list[str]] = []
    queue = LandingQueue(lambda write: stored.append(write(None)) or [], lambda write: built.append(write(None)), quiet=60)
    landings = [queue.submit(lambda storage, i=i: [f"k{i}"]) for i in range(5)]
    queue.flush()
    assert [key for batch in stored for key in batch] == ["k0", "k1", "k2", "k3", "k4"]
    assert built == [["k0", "k1", "k2", "k3", "k4"]] and all(landing.wait() for landing in landings)
