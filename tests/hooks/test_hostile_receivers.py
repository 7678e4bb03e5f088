"""One delivery attempt against hostile endpoints on 127.0.0.1 (real sockets, registry_gen.hooks.net):
a redirect is not followed, a trickling answer is cut at the attempt's timeout, a huge answer is
read no further than the excerpt, and a name that resolves elsewhere at delivery than at creation
(DNS rebinding) never reaches a refused address."""

from __future__ import annotations

import http.server
import json
import time
from collections.abc import Callable, Iterator

import pytest

from registry_gen.hooks.net import AddressRefused, allowed_address, post
from registry_gen.hooks.rules import EXCERPT_BYTES
from tests.hooks.receiver import Receiver

LOOPBACK = ("127.0.0.0/8",)
BODY = json.dumps({"event": "package:publish"}).encode()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    up = Receiver("unused").up()
    yield up
    up.down()


def test_a_redirect_is_a_failure_and_its_target_gets_nothing(receiver: Receiver) -> None:
    elsewhere = Receiver("unused").up()
    try:

        def redirect(handler: http.server.BaseHTTPRequestHandler) -> None:
            handler.send_response(307)
            handler.send_header("Location", elsewhere.url)
            handler.send_header("Content-Length", "0")
            handler.end_headers()

        receiver.answer = redirect
        outcome = post(receiver.url, BODY, {}, timeout=5, allow_networks=LOOPBACK)
        assert (outcome.ok, outcome.status) == (False, 307) and "redirects are not followed" in str(outcome.error)
        assert len(receiver.received) == 1 and elsewhere.received == []
    finally:
        elsewhere.down()


def _trickle(data: bytes, at_once: bytes = b"") -> Callable[[http.server.BaseHTTPRequestHandler], None]:
    """An answer that sends `at_once`, then `data` one byte every 0.1 s (len(data) / 10 seconds)."""

    def answer(handler: http.server.BaseHTTPRequestHandler) -> None:
        try:
            handler.wfile.write(at_once)
            for byte in data:
                handler.wfile.write(bytes([byte]))
                handler.wfile.flush()
                time.sleep(0.1)
        except OSError:
            pass  # the deliverer cut the connection, as it should

    return answer


def test_an_answer_trickled_past_the_timeout_is_cut_there(receiver: Receiver) -> None:
    """The status came in time (the receiver took the event), its body is cut at the attempt's
    timeout: the excerpt holds what 1 s brought, not the 51 s a full excerpt would take. (An
    HTTP/1.0 answer: http.client lets go of the connection's socket once it read the head.)"""
    receiver.answer = _trickle(b"x" * 1000, at_once=b"HTTP/1.0 200 OK\r\nContent-Length: 1000\r\n\r\n")
    outcome = post(receiver.url, BODY, {}, timeout=1, allow_networks=LOOPBACK)
    assert outcome.status == 200 and outcome.excerpt is not None and len(outcome.excerpt) < EXCERPT_BYTES


def test_a_status_line_trickled_past_the_timeout_fails_the_attempt(receiver: Receiver) -> None:
    receiver.answer = _trickle(b"HTTP/1.0 200 OK" + b" " * 600 + b"\r\n\r\n")
    outcome = post(receiver.url, BODY, {}, timeout=1, allow_networks=LOOPBACK)
    assert not outcome.ok and outcome.status is None and outcome.error == "no answer within 1 s"


def test_a_huge_answer_is_read_no_further_than_the_excerpt(receiver: Receiver) -> None:
    def huge(handler: http.server.BaseHTTPRequestHandler) -> None:
        size = 64 * 1024 * 1024
        handler.send_response(200)
        handler.send_header("Content-Length", str(size))
        handler.end_headers()
        try:
            for _ in range(size // 65536):
                handler.wfile.write(b"<" * 65536)
        except OSError:
            pass  # the deliverer stopped reading and closed

    receiver.answer = huge
    outcome = post(receiver.url, BODY, {}, timeout=5, allow_networks=LOOPBACK)
    assert outcome.ok and outcome.excerpt is not None and len(outcome.excerpt) == EXCERPT_BYTES


def test_a_name_rebound_to_loopback_after_creation_is_refused_at_delivery(receiver: Receiver) -> None:
    answers = iter([["93.184.216.34"], ["127.0.0.1"]])  # a public address when the hook is made, loopback later

    def rebinding(host: str, port: int) -> list[str]:
        return next(answers)

    assert allowed_address("hooks.example.com", receiver.port, (), rebinding) == "93.184.216.34"
    outcome = post(f"http://hooks.example.com:{receiver.port}/hook", BODY, {}, timeout=5, allow_networks=(), resolve=rebinding)
    assert not outcome.ok and "resolves to 127.0.0.1" in str(outcome.error) and receiver.received == []
    with pytest.raises(AddressRefused):
        allowed_address("localhost", receiver.port, ())  # the system resolver's loopback name, too


def test_the_connection_goes_to_the_checked_address_with_the_name_as_host(receiver: Receiver) -> None:
    """The name is resolved once, by the check; the socket is opened to that address (a name no
    system resolver knows still reaches it), and the receiver sees the name as Host."""
    hosts = []

    def record_host(handler: http.server.BaseHTTPRequestHandler) -> None:
        hosts.append(handler.headers.get("Host"))
        handler.send_response(204)
        handler.end_headers()

    receiver.answer = record_host
    endpoint = f"http://receiver.invalid:{receiver.port}/hook"
    outcome = post(endpoint, BODY, {}, timeout=5, allow_networks=LOOPBACK, resolve=lambda host, port: ["127.0.0.1"])
    assert outcome.ok and hosts == [f"receiver.invalid:{receiver.port}"]
