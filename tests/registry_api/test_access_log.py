"""`registry-gen serve` logs one Combined-Log-Format line per request (plus the duration) and one
line per write naming who did what; read from a real serve subprocess's stderr."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.registry_api.helpers import RegistryProcess, add_user, http, publish_body, tarball, write_package

# host ident user [time] "request" status size "referer" "user-agent" seconds
ACCESS = re.compile(
    r'^(?P<host>\S+) - (?P<user>\S+) \[(?P<time>\d{2}/\w{3}/\d{4}:\d{2}:\d{2}:\d{2} \+0000)\] '
    r'"(?P<request>[^"\\]*(?:\\.[^"\\]*)*)" (?P<status>\d{3}) (?P<size>\d+|-) '
    r'"(?P<referer>[^"\\]*(?:\\.[^"\\]*)*)" "(?P<agent>[^"\\]*(?:\\.[^"\\]*)*)" (?P<seconds>\d+\.\d{3})$'
)
STAMPED = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ INFO registry_gen\.writes: (?P<what>.+)$")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RegistryProcess]:
    process = RegistryProcess(tmp_path).start()
    try:
        yield process
    finally:
        process.stop()


def wait_for(server: RegistryProcess, pattern: re.Pattern[str], test: object, deadline: float = 20.0) -> re.Match[str]:
    """The first output line matching `pattern` for which `test(match)` holds, polled until a deadline."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        for line in list(server.output):
            found = pattern.match(line.rstrip("\n"))
            if found and test(found):  # type: ignore[operator]
                return found
        time.sleep(0.05)
    raise AssertionError("no such log line:\n" + "".join(server.output[-40:]))


def access(server: RegistryProcess, request: str, status: int) -> re.Match[str]:
    return wait_for(server, ACCESS, lambda m: m["request"] == request and m["status"] == str(status))


def test_one_access_line_per_request(server: RegistryProcess) -> None:
    base = server.base
    anonymous = http("GET", f"{base}-/ping", headers={"User-Agent": 'tester "1"', "Referer": "http://ref.example/"})
    assert anonymous.status == 200
    line = access(server, "GET /-/ping HTTP/1.1", 200)
    assert (line["host"], line["user"]) == ("127.0.0.1", "-")
    assert line["agent"] == 'tester \\"1\\"' and line["referer"] == "http://ref.example/"
    assert line["size"] == str(len(anonymous.body))
    token = add_user(base, "alice")
    whoami = http("GET", f"{base}-/whoami?x=1", token=token)
    assert access(server, "GET /-/whoami?x=1 HTTP/1.1", whoami.status)["user"] == "alice"
    assert http("GET", f"{base}nope-not-here").status == 404
    assert access(server, "GET /nope-not-here HTTP/1.1", 404)["size"] != "-"
    bad = http("GET", f"{base}-/whoami", token="not-a-token")
    assert access(server, "GET /-/whoami HTTP/1.1", bad.status)["user"] == "-"  # a refused token names nobody
    # npm logout puts the token in the path: the line shows the request, never the token.
    assert http("DELETE", f"{base}-/user/token/{token}", token=token).status == 200
    assert access(server, "DELETE /-/user/token/<token> HTTP/1.1", 200)["user"] == "alice"
    assert not any(token in line for line in server.output)


def test_a_line_per_write_names_who_did_what(server: RegistryProcess) -> None:
    base = server.base
    token = add_user(base, "alice")
    data = tarball("logged-pkg", "1.0.0")
    assert http("PUT", f"{base}logged-pkg", body=publish_body("logged-pkg", "1.0.0", data), token=token).status == 201
    publish_line = access(server, "PUT /logged-pkg HTTP/1.1", 201)
    assert publish_line["user"] == "alice" and int(publish_line["size"]) > 0
    wait_for(server, STAMPED, lambda m: m["what"] == "alice published logged-pkg@1.0.0, tagged logged-pkg@1.0.0 as latest")
    assert http("PUT", f"{base}-/package/logged-pkg/dist-tags/beta", body="1.0.0", token=token).status == 201
    wait_for(server, STAMPED, lambda m: m["what"] == "alice tagged logged-pkg@1.0.0 as beta")
    npm = server.npm("alice", token)
    npm.run("deprecate", "logged-pkg@1.0.0", "use something else", cwd=server.root)
    wait_for(server, STAMPED, lambda m: m["what"] == "alice deprecated logged-pkg@1.0.0")
    project = write_package(server.root / "second", "logged-pkg", "1.1.0")
    npm.run("publish", cwd=project)
    wait_for(server, STAMPED, lambda m: m["what"].startswith("alice published logged-pkg@1.1.0"))
    wait_for(server, ACCESS, lambda m: m["request"] == "PUT /logged-pkg HTTP/1.1" and m["agent"].startswith("npm/"))
    npm.run("unpublish", "logged-pkg@1.1.0", "--force", cwd=server.root)
    wait_for(server, STAMPED, lambda m: "alice unpublished logged-pkg@1.1.0" in m["what"])
    # Every line of the server's output is either an access line or stamped with time and level.
    for line in server.output:
        text = line.rstrip("\n")
        if text.startswith(("registry-gen:", "listening on", "  ", "built ", "warning:")) or not text:
            continue
        assert ACCESS.match(text) or re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ [A-Z]+ \S+: ", text), text


def test_serve_warns_once_when_no_base_url_is_configured(server: RegistryProcess, tmp_path: Path) -> None:
    warnings = [line for line in server.output if line.startswith("warning: no base_url configured")]
    assert len(warnings) == 1 and server.base in warnings[0] and "--base-url" in warnings[0]
    configured = RegistryProcess(tmp_path / "other")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "registry.yaml").write_text("signup: open\nbase_url: http://npm.example.com/\n")
    configured.start()
    try:
        assert not any(line.startswith("warning: no base_url") for line in configured.output)
    finally:
        configured.stop()
