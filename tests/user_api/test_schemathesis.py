"""Schemathesis over the served OpenAPI document, against the real app in-process (WSGI).

Every phase runs (examples, coverage, fuzzing, stateful) with a bounded number of examples and a
fixed seed, with an admin token, over both backends. Any failed check fails the test with the list.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest
import schemathesis
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import Status, from_schema
from schemathesis.engine.events import EngineFinished, FatalError, NonFatalError, ScenarioFinished

from registry_gen.settings import Settings
from tests.user_api.conftest import Api, assert_no_leaks, make_api, recording
from tests.user_api.live_server import serve
from user_api.store import UserStore

MAX_EXAMPLES = 25
# The statuses a schema-valid request may still get. 412 is added to the defaults: a well-formed
# If-Match that no longer matches is a valid request that legitimately fails its precondition.
POSITIVE_STATUSES = ["2xx", "3xx", "401", "403", "404", "409", "412", "429"]
# And to the statuses that reject schema-violating input: 413/414, an oversized body or query string
# (schemathesis' negative generator writes some), are rejections too.
NEGATIVE_STATUSES = ["400", "401", "403", "404", "405", "406", "409", "413", "414", "415", "422", "428", "429"]


def _config(token: str) -> SchemathesisConfig:
    return SchemathesisConfig.from_dict(
        {
            "seed": 20251122,
            "headers": {"Authorization": f"Bearer {token}"},
            "generation": {"max-examples": MAX_EXAMPLES, "deterministic": False},
            "checks": {
                "positive_data_acceptance": {"expected-statuses": POSITIVE_STATUSES},
                "negative_data_rejection": {"expected-statuses": NEGATIVE_STATUSES},
            },
            "phases": {"stateful": {"max-steps": 10}},
            "suppress-health-check": ["too_slow", "filter_too_much", "data_too_large"],
        }
    )


def _failures(events: list[Any]) -> list[str]:
    found: list[str] = []
    for event in events:
        if isinstance(event, FatalError):
            found.append(f"fatal: {event.exception!r}")
        elif isinstance(event, NonFatalError):
            found.append(f"error in {event.label}: {event.info.message}")
        elif isinstance(event, ScenarioFinished) and event.status == Status.FAILURE:
            for checks in event.recorder.checks.values():
                for check in checks:
                    if check.status == Status.FAILURE and check.failure_info is not None:
                        failure = check.failure_info.failure
                        sample = check.failure_info.code_sample
                        found.append(f"{check.name}: {failure.title}: {failure.message}\n{sample}")
    return found


# `DELETE /user/{id}/tokens` revokes every token of the account; the account's token list stays,
# empty, as `npm token list` shows one. schemathesis' use-after-free check reads a DELETE of a path
# as the removal of what a GET of that path answers: only an empty list after it is dropped (a token
# still listed would be a revocation that failed, and counts).
_REVOKE_ALL = re.compile(r"^DELETE /user/[^/]+/tokens$")


def _all_revoked(failure: Any, response: Any) -> bool:
    from schemathesis.openapi.checks import UseAfterFree

    if not isinstance(failure, UseAfterFree) or not _REVOKE_ALL.match(failure.free) or response.status_code != 200:
        return False
    return b'"key"' not in response.content and b"<key>" not in response.content


_NOT_XML_CHARS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _add_hooks(schema: Any) -> None:
    @schema.hook
    def filter_query(context: Any, query: dict[str, Any] | None) -> bool:
        # A rule OpenAPI cannot state: keyword and its alias keywork may both appear only if equal.
        query = query or {}
        return not ("keyword" in query and "keywork" in query and query["keyword"] != query["keywork"])

    @schema.hook
    def filter_failure(context: Any, failure: Any, case: Any, response: Any) -> bool:
        # The two documented keyword/keywork rules OpenAPI cannot state; everything else counts.
        # 1. Both spellings with different values: the 400 is the rule (the coverage phase builds
        #    such cases without the filter above).
        # 2. Only the alias `keywork`: accepted, because it is the alias of the required `keyword`.
        query = case.query or {}
        conflict = "keyword" in query and "keywork" in query and query["keyword"] != query["keywork"]
        alias_only = "keywork" in query and "keyword" not in query
        return not ((conflict and response.status_code == 400) or (alias_only and response.status_code == 200) or _all_revoked(failure, response))

    @schema.hook
    def filter_case(context: Any, case: Any) -> bool:
        # XML has no types: a "null" or 0 meant as a type error arrives as the text "null" or "0",
        # a valid string. Negative XML cases are therefore not negative; test_api_* covers XML errors.
        meta = getattr(case, "meta", None)
        negative = meta is not None and not meta.generation.mode.is_positive
        is_xml = "xml" in str(case.media_type or "")
        # XML 1.0 cannot carry control characters or lone surrogates: a generated string holding
        # them reaches the server mangled (often empty), which says nothing about the server.
        unrepresentable = is_xml and isinstance(case.body, dict) and any(
            isinstance(v, str) and _NOT_XML_CHARS.search(v) for v in case.body.values()
        )
        # The advisory schema documents the smallest OSV form; the server reads all of OSV and GitHub's
        # format, so a "negative" case (an extra field, a range for a version) is often a valid
        # advisory. tests/security/test_audit.py covers the advisories it refuses.
        lenient = negative and case.operation.path == "/-/user-api/advisories"
        return not ((negative and is_xml) or unrepresentable or lenient)


def test_schemathesis_finds_no_failure(
    store_settings: Settings, store: UserStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    api: Api = make_api(store_settings, store)
    admin = store.create_user("root", "root-password-1", role="admin")
    token, _ = store.create_token(admin.id)
    api.tokens.add(token)
    api.passwords.add("root-password-1")
    store.create_user("somebody", "somebody-password", "some@example.org", "Some Body")

    with serve(recording(api.client.app, api.responses)) as base_url:
        schema = schemathesis.openapi.from_url(f"{base_url}/-/user-api/openapi.json", config=_config(token))
        _add_hooks(schema)
        events = list(from_schema(schema).execute())
    assert isinstance(events[-1], EngineFinished)
    failures = _failures(events)
    assert not failures, "\n\n".join(failures[:10])
    # The run must have exercised the API, not stopped early.
    scenarios = [e for e in events if isinstance(e, ScenarioFinished)]
    assert len(scenarios) >= 7
    # The leak check reads what the server really answered over the socket (hundreds of replies).
    assert len(api.responses) >= 100 and any(r.status.startswith("2") for r in api.responses)
    # The admin routes ran too: schemathesis recorded advisories, in the test's own content folder.
    assert list((store_settings.content_dir / "advisories").glob("*.json"))
    assert_no_leaks(api, caplog)
