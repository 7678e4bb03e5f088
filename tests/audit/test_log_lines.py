"""The pure rules of `registry-gen stats` and `audit-log`: CloudFront's standard log format (its
header and columns as AWS documents them), what counts as a download, hostile paths, and the
audit's `--since` and user-agent rules. The real nginx log is tests/audit/test_download_stats.py."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from registry_gen.audit import Who, command_words, parse_since
from registry_gen.cli import main as registry_gen
from registry_gen.downloads import Tarball, fold_lines, package_downloads, tarball_of
from registry_gen.errors import ConfigError

FIELDS = ("#Fields: date time x-edge-location sc-bytes c-ip cs-method cs(Host) cs-uri-stem sc-status cs(Referer) "
          "cs(User-Agent) cs-uri-query cs(Cookie) x-edge-result-type x-edge-request-id x-host-header cs-protocol cs-bytes "
          "time-taken")  # fmt: skip
SERVED = {("demo", "demo-1.0.0.tgz"), ("@team/other", "other-2.0.0.tgz")}


def _cloudfront(day: str, method: str, path: str, status: int) -> str:
    return "\t".join([day, "21:02:31", "LAX1", "392", "192.0.2.100", method, "d111111abcdef8.cloudfront.net", path, str(status),
                      "-", "npm/11.6.2%20node/v22.11.0", "-", "-", "Hit", "SOX4xw", "registry.example", "https", "140", "0.002"])


def _known(tarball: Tarball) -> bool:
    return (tarball.name, tarball.filename) in SERVED


def test_cloudfront_standard_logs_are_read_by_their_fields_header() -> None:
    lines = [
        "#Version: 1.0", FIELDS,
        _cloudfront("2026-11-20", "GET", "/demo/-/demo-1.0.0.tgz", 200),
        _cloudfront("2026-11-21", "GET", "/demo/-/demo-1.0.0.tgz", 200),
        _cloudfront("2026-11-21", "GET", "/@team/other/-/other-2.0.0.tgz", 200),
        _cloudfront("2026-11-21", "GET", "/%40team%2fother/-/other-2.0.0.tgz", 200),
        _cloudfront("2026-11-21", "HEAD", "/demo/-/demo-1.0.0.tgz", 200),
        _cloudfront("2026-11-21", "GET", "/demo/-/demo-1.0.0.tgz", 206),
        _cloudfront("2026-11-21", "GET", "/demo/-/demo-1.0.0.tgz", 304),
        _cloudfront("2026-11-21", "GET", "/demo", 200),
        "not\ttab\tseparated\tenough",
    ]
    fold = fold_lines(lines, "/", _known)
    assert fold.counts == Counter({("demo", "1.0.0", "2026-11-20"): 1, ("demo", "1.0.0", "2026-11-21"): 1,
                                   ("@team/other", "2.0.0", "2026-11-21"): 2})  # fmt: skip
    assert fold.skipped == Counter({"not a request line": 1}) and fold.lines == len(lines) - 2


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("/demo/-/../../../etc/passwd.tgz", "hostile path"),
        ("/demo/-/demo-1.0.0.tgz%00.tgz", "hostile path"),
        ("/de%ffmo/-/demo-1.0.0.tgz", "hostile path"),
        ("/..%2f..%2fetc/-/etc-1.tgz", "hostile path"),
        ("/demo/-/other-1.0.0.tgz", "not a tarball"),
        ("/demo//-/demo-1.0.0.tgz", "hostile path"),
        ("/registry/demo/-/demo-1.0.0.tgz", "not a package name"),
    ],
)
def test_hostile_or_foreign_tarball_paths_are_told_apart(target: str, why: str) -> None:
    assert tarball_of(target, "/") == why


def test_a_tarball_under_the_base_path_keeps_its_version_and_query_is_ignored() -> None:
    assert tarball_of("/npm/@team/other/-/other-2.0.0-beta.1.tgz?x=1", "/npm/") == Tarball("@team/other", "other-2.0.0-beta.1.tgz", "2.0.0-beta.1")


def test_a_package_file_weeks_end_on_the_last_day_of_the_data() -> None:
    days = {"1.0.0": {"2026-11-01": 4, "2026-11-20": 1}, "1.1.0": {"2026-11-26": 2}}
    made = package_downloads("demo", days, "2026-11-26")
    assert made["last-week"] == {"start": "2026-11-20", "end": "2026-11-26", "downloads": 3}
    assert made["versions"] == {"1.0.0": 1, "1.1.0": 2} and made["total"] == {"downloads": 7, "versions": {"1.0.0": 5, "1.1.0": 2}}
    assert [d["day"] for d in made["range"]["downloads"]] == ["2026-11-01", "2026-11-20", "2026-11-26"]


def test_since_takes_a_number_a_date_or_a_time() -> None:
    assert parse_since("42") == (42, None)
    assert parse_since("2026-11-01") == (0, "2026-11-01T00:00:00.000Z")
    assert parse_since("2026-11-01T12:30:00+01:00") == (0, "2026-11-01T11:30:00.000Z")
    with pytest.raises(ConfigError, match="--since 'yesterday'"):
        parse_since("yesterday")


def test_who_keeps_a_short_printable_user_agent_and_the_command_without_its_arguments() -> None:
    who = Who.http("key-1", "127.0.0.1", "npm/11\x1b[31m" + "x" * 500)
    assert who.user_agent is not None and len(who.user_agent) == 256 and "\x1b" not in who.user_agent
    assert command_words(["/usr/bin/registry-gen", "import", "registry", "secret-pkg", "--from", "http://x"]) == "registry-gen import registry"
    assert command_words(["registry-gen", "user", "remove", "Alice"]) == "registry-gen user remove"


def test_a_log_that_cannot_be_read_is_one_error_line_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "registry.yaml").write_text("content_dir: content\nout_dir: public\n")
    config = str(tmp_path / "registry.yaml")
    assert registry_gen(["stats", str(tmp_path / "missing.log"), "--config", config]) == 1
    assert capsys.readouterr().err == f"error: {tmp_path / 'missing.log'}: no such access log\n"
    assert registry_gen(["stats", str(tmp_path), "--config", config]) == 1
    assert capsys.readouterr().err == f"error: {tmp_path}: is a folder, not an access log\n"
