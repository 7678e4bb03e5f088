"""The mirror in a real `registry-gen serve`, against an upstream the test starts on loopback (one
that counts requests, answers 500s, sends another package's tarball): landing, freshness, shared
fetches, stale-if-error, the circuit breaker, what is refused, and what never reaches an upstream."""

from __future__ import annotations

import hashlib
import http.server
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from registry_gen.importers.integrity import sri_sha512
from tests.importers.upstream_server import hostile_upstream
from tests.mirror.helpers import (
    answering, built, conditional, document, journal_entries, mirror_serve, mirroring, registry_gen, write_config,
)
from tests.registry_api.helpers import add_user, http, publish_body, tarball
from tests.support import poll


def test_a_proxied_read_lands_the_upstreams_document_and_tarball_in_the_tree(tmp_path: Path) -> None:
    with hostile_upstream() as upstream:
        data = upstream.publish("left-pad", "1.3.0", time="2018-04-09T00:00:00.000Z")
        upstream.publish("@scope/thing", "2.0.0", dependencies={"left-pad": "^1.3.0"})
        root = tmp_path / "registry"
        write_config(root, upstream.base)
        with mirror_serve(root) as server:
            served = document(server.base, "@scope/thing")
            assert served["versions"]["2.0.0"]["dist"]["tarball"] == f"{server.base}@scope/thing/-/thing-2.0.0.tgz"
            pad = document(server.base, "left-pad")
            reply = http("GET", pad["versions"]["1.3.0"]["dist"]["tarball"])
            assert reply.status == 200 and reply.body == data
            assert pad["time"]["1.3.0"] == "2018-04-09T00:00:00.000Z"  # the upstream's times
            assert built(root, "left-pad/-/left-pad-1.3.0.tgz").read_bytes() == data
            assert (root / "content" / "left-pad" / "left-pad-1.3.0.tgz").read_bytes() == data
            meta = json.loads((root / "content" / "left-pad" / "registry-meta.json").read_text())
            assert meta["mirror"]["uplink"] == "up" and meta["mirror"]["url"] == upstream.base
            page = built(root, "-/web/package/left-pad/index.html").read_text()
            assert "Mirrored</strong> from the uplink up" in page and "last refreshed" in page
            hits = len(upstream.hits)
            assert http("GET", server.base + "left-pad/-/left-pad-1.3.0.tgz").body == data
            assert len(upstream.hits) == hits  # the second read is the tree's
        verify = registry_gen(root, "verify")
        assert "note: left-pad/index.html: mirrored from the uplink up" in verify.stdout, verify.stdout + verify.stderr


def test_requests_for_one_package_share_one_upstream_request(tmp_path: Path) -> None:
    with hostile_upstream() as upstream:
        upstream.publish("herd", "1.0.0")
        body = json.dumps(upstream.documents["herd"]).encode()

        def slow(handler: http.server.BaseHTTPRequestHandler) -> None:
            time.sleep(1.0)  # the upstream is slow: every reader arrives while its fetch runs
            handler.send_response(200)
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)

        upstream.routes["/herd"] = slow
        root = tmp_path / "registry"
        write_config(root, upstream.base)
        with mirror_serve(root) as server, ThreadPoolExecutor(max_workers=16) as pool:
            replies = list(pool.map(lambda _: http("GET", server.base + "herd"), range(16)))
        assert [reply.status for reply in replies] == [200] * 16
        assert len({reply.json["_rev"] for reply in replies}) == 1
        assert len(upstream.hits_of("/herd")) == 1


def test_a_document_is_asked_again_conditionally_once_maxage_has_passed(tmp_path: Path) -> None:
    with hostile_upstream() as upstream:
        upstream.publish("fresh", "1.0.0")
        seen: list[str | None] = []
        upstream.routes["/fresh"] = conditional(upstream, "fresh", seen)
        root = tmp_path / "registry"
        write_config(root, upstream.base, uplink="    maxage: 2s\n")
        with mirror_serve(root) as server:
            started = time.monotonic()
            for _ in range(10):
                assert sorted(document(server.base, "fresh")["versions"]) == ["1.0.0"]
            if time.monotonic() - started < 2:
                assert len(seen) == 1  # within maxage: no upstream request at all
            poll(lambda: document(server.base, "fresh") and len(seen) >= 2, "a second, conditional request", timeout=30)
            assert seen[0] is None and seen[1] is not None  # the ETag the first answer gave
            upstream.publish("fresh", "1.1.0")
            poll(lambda: "1.1.0" in document(server.base, "fresh")["versions"], "1.1.0 within maxage", timeout=30)


def test_the_last_good_copy_is_served_while_the_uplink_fails_and_it_is_left_alone_after_max_fails(tmp_path: Path) -> None:
    with hostile_upstream() as upstream:
        upstream.publish("steady", "1.0.0")
        with mirroring(tmp_path, upstream, uplink="    maxage: 0s\n    max_fails: 2\n    fail_timeout: 1h\n    retry: 0\n") as (_, server):
            first = document(server.base, "steady")
            upstream.routes["/steady"] = answering(500)
            upstream.routes["/unknown"] = answering(500)
            for _ in range(2):  # each asks the failing uplink, each gets the last good copy
                assert document(server.base, "steady")["versions"] == first["versions"]
            asked = len(upstream.hits)
            assert document(server.base, "steady")["versions"] == first["versions"]
            unknown = http("GET", server.base + "unknown")
            assert len(upstream.hits) == asked  # down for fail_timeout: nothing goes out
            assert unknown.status == 502 and "the uplink up is down" in unknown.json["error"]


def test_a_damaged_mirrored_meta_is_named_in_the_reply_and_the_servers_log(tmp_path: Path) -> None:
    with hostile_upstream() as upstream:
        upstream.publish("dented", "1.0.0")
        with mirroring(tmp_path, upstream, uplink="    maxage: 0s\n") as (root, server):
            document(server.base, "dented")
            built(root, "dented/index.html")  # landed and built: no pending copy answers any more
            meta = root / "content" / "dented" / "registry-meta.json"
            meta.write_text('{"name": "dented", "versions": ')  # an editor's crash, a full disk
            poll(lambda: http("GET", server.base + "dented").status != 200, "the next refresh reading the meta", timeout=30)
            reply = http("GET", server.base + "dented")
            assert reply.status == 500 and "content/dented/registry-meta.json is broken" in reply.json["error"], reply.body
            assert "fix it by hand" in reply.json["error"]
            poll(lambda: "mirror: GET /dented failed" in "".join(server.output), "the failure in the server's log", timeout=30)


def test_mirror_refresh_names_a_damaged_mirrored_meta_instead_of_skipping_it(tmp_path: Path) -> None:
    with hostile_upstream() as upstream:
        upstream.publish("dented", "1.0.0")
        upstream.publish("steady", "1.0.0")
        root = tmp_path / "registry"
        write_config(root, upstream.base)
        with mirror_serve(root) as server:
            for name in ("dented", "steady"):
                document(server.base, name)
                built(root, f"{name}/index.html")
        (root / "content" / "dented" / "registry-meta.json").write_text('{"name": "dented", "mirror": {"uplink": ')
        refreshed = registry_gen(root, "mirror", "refresh")
        failed = [line for line in refreshed.stderr.splitlines() if line.startswith("failed:")]
        assert refreshed.returncode == 1 and "refreshed 1, skipped 0, failed 1" in refreshed.stdout, refreshed.stdout + refreshed.stderr
        assert len(failed) == 1 and failed[0].startswith("failed: content/dented/registry-meta.json is broken (") and (
            failed[0].endswith("fix it by hand, then retry")), failed
        other = registry_gen(root, "mirror", "refresh", "steady")  # a pattern the damaged one does not match
        assert other.returncode == 0 and "refreshed 1, skipped 0, failed 0" in other.stdout, other.stdout + other.stderr


def test_what_an_upstream_cannot_make_this_registry_serve(tmp_path: Path) -> None:
    with hostile_upstream() as upstream:
        upstream.publish("victim", "1.0.0")
        upstream.publish("other", "6.6.6")
        upstream.files[upstream.tarball_path("victim", "1.0.0")] = upstream.files[upstream.tarball_path("other", "6.6.6")]
        entry = upstream.documents["victim"]["versions"]["1.0.0"]
        entry["dist"] = {**entry["dist"], "integrity": sri_sha512(upstream.files[upstream.tarball_path("other", "6.6.6")]), "shasum": None}
        upstream.publish("tampered", "1.0.0")
        upstream.files[upstream.tarball_path("tampered", "1.0.0")] += b"\0"
        upstream.documents["impostor"] = {**upstream.documents["other"]}  # /impostor answers other's document
        elsewhere = upstream.publish("elsewhere", "1.0.0")
        upstream.documents["elsewhere"]["versions"]["1.0.0"]["dist"]["tarball"] = "http://169.254.169.254/latest/meta-data/x.tgz"
        raw = b"not a tarball at all, yet exactly what the upstream lists"
        upstream.publish("raw-bytes", "1.0.0")
        upstream.files[upstream.tarball_path("raw-bytes", "1.0.0")] = raw
        upstream.documents["raw-bytes"]["versions"]["1.0.0"]["dist"].update(integrity=sri_sha512(raw), shasum=hashlib.sha1(raw).hexdigest())
        root = tmp_path / "registry"
        write_config(root, upstream.base)
        with mirror_serve(root) as server:
            refused = http("GET", server.base + "victim/-/victim-1.0.0.tgz")
            assert refused.status == 502 and "names package 'other', not 'victim'" in refused.json["error"]
            tampered = http("GET", server.base + "tampered/-/tampered-1.0.0.tgz")
            assert tampered.status == 502 and "do not match" in tampered.json["error"]
            impostor = http("GET", server.base + "impostor")
            assert impostor.status == 502 and "the document is named 'other', not 'impostor'" in impostor.json["error"]
            # A tarball listed on another host is asked of the uplink itself, at the conventional path.
            assert http("GET", server.base + "elsewhere/-/elsewhere-1.0.0.tgz").body == elsewhere
            assert upstream.hits_of("/elsewhere/-/elsewhere-1.0.0.tgz")
            passed = http("GET", server.base + "raw-bytes/-/raw-bytes-1.0.0.tgz")
            assert passed.status == 200 and passed.body == raw
            assert built(root, "raw-bytes/-/raw-bytes-1.0.0.tgz").read_bytes() == raw
        assert not (root / "content" / "victim" / "victim-1.0.0.tgz").exists()
        assert not (root / "content" / "tampered" / "tampered-1.0.0.tgz").exists()
        assert not (root / "content" / "impostor").exists() and not (root / "content" / "other").exists()


def test_a_denied_read_never_reaches_an_upstream_and_nothing_unconfigured_is_proxied(tmp_path: Path) -> None:
    with hostile_upstream() as upstream:
        upstream.publish("@private/secret", "1.0.0")
        upstream.publish("left-pad", "1.3.0")
        root = tmp_path / "registry"
        write_config(root, upstream.base, "  '@private/*': {read: authenticated, proxy: up}\n  '**': {read: all}\n")
        with mirror_serve(root) as server:
            assert http("GET", server.base + "@private%2fsecret").status == 401
            assert http("GET", server.base + "@private/secret/-/secret-1.0.0.tgz").status == 401
            assert http("GET", server.base + "left-pad").status == 404  # '**' has no proxy: local only
            assert upstream.hits == []
            token = add_user(server.base, "reader")
            assert http("GET", server.base + "@private%2fsecret", token=token).status == 200
            assert [hit.path for hit in upstream.hits] == ["/@private%2fsecret"]


def test_a_mirrored_package_takes_no_local_publish_until_an_administrator_makes_it_local(tmp_path: Path) -> None:
    with hostile_upstream() as upstream:
        upstream.publish("shared-name", "1.0.0")
        root = tmp_path / "registry"
        write_config(root, upstream.base)
        with mirror_serve(root) as server:
            http("GET", server.base + "shared-name/-/shared-name-1.0.0.tgz")
            built(root, "shared-name/-/shared-name-1.0.0.tgz")
            token = add_user(server.base, "alice")
            body = publish_body("shared-name", "2.0.0", tarball("shared-name", "2.0.0"))
            refused = http("PUT", server.base + "shared-name", body=body, token=token)
            assert refused.status == 403 and "is mirrored from the uplink up" in refused.json["error"]
        assert journal_entries(root) == []  # a mirror landing is the upstream's churn, not a write here
        made = registry_gen(root, "mirror", "make-local", "shared-name")
        assert made.returncode == 0 and "now a local package with 1 versions (1.0.0)" in made.stdout, made.stderr
        [entry] = journal_entries(root)  # an administrator's act is journalled
        assert (entry.kind, entry.package, entry.actor) == ("package:change", "shared-name", "registry-gen mirror make-local")
        assert dict(entry.detail) == {"made-local": True, "uplink": "up"}
        upstream.publish("shared-name", "1.5.0")
        asked = len(upstream.hits)
        with mirror_serve(root) as server:
            assert sorted(document(server.base, "shared-name")["versions"]) == ["1.0.0"]  # never proxied again
            published = http("PUT", server.base + "shared-name", body=body, token=add_user(server.base, "admin-made-it-local"))
            assert published.status == 403 and "mirrored" not in published.json["error"]  # owner rules now: alice owns nothing here
        assert len(upstream.hits) == asked


def test_a_block_applies_to_what_was_mirrored_before_and_is_explained(tmp_path: Path) -> None:
    with hostile_upstream() as upstream:
        data = upstream.publish("event-stream", "3.3.6")
        upstream.publish("event-stream", "3.3.5", tag=None)
        root = tmp_path / "registry"
        config = write_config(root, upstream.base)
        with mirror_serve(root) as server:
            assert http("GET", server.base + "event-stream/-/event-stream-3.3.6.tgz").body == data
            built(root, "event-stream/-/event-stream-3.3.6.tgz")
        config.write_text(config.read_text().replace("{proxy: up}", "{proxy: up, block: ['event-stream@3.3.6']}"))
        with mirror_serve(root) as server:
            poll(lambda: not (root / "public/event-stream/-/event-stream-3.3.6.tgz").exists(), "the blocked tarball gone", timeout=60)
            reply = http("GET", server.base + "event-stream/-/event-stream-3.3.6.tgz")
            assert reply.status == 404 and "held back by this registry: blocked by the block entry 'event-stream@3.3.6'" in reply.json["error"]
            served = document(server.base, "event-stream")
            assert sorted(served["versions"]) == ["3.3.5"] and served["dist-tags"]["latest"] == "3.3.5"
        why = registry_gen(root, "mirror", "why", "event-stream@3.3.6")
        assert "event-stream@3.3.6 is held back: blocked by the block entry 'event-stream@3.3.6'" in why.stdout, why.stderr
        assert "kept aside and not served" in why.stdout
        config.write_text(config.read_text().replace(", block: ['event-stream@3.3.6']", ""))
        refreshed = registry_gen(root, "mirror", "refresh")
        assert refreshed.returncode == 0, refreshed.stderr
        assert (root / "public/event-stream/-/event-stream-3.3.6.tgz").read_bytes() == data  # the same bytes, back


def test_prefetch_fills_the_mirror_from_a_lockfile_and_from_specs(tmp_path: Path) -> None:
    with hostile_upstream() as upstream:
        upstream.publish("a-dep", "1.0.0")
        upstream.publish("a-dep", "1.2.0")
        upstream.publish("a-root", "2.0.0", dependencies={"a-dep": "^1.0.0"})
        upstream.publish("locked", "0.1.0")
        root = tmp_path / "registry"
        write_config(root, upstream.base)
        lock = tmp_path / "package-lock.json"
        lock.write_text(json.dumps({"lockfileVersion": 3, "packages": {"": {}, "node_modules/locked": {"version": "0.1.0"}}}))
        done = registry_gen(root, "mirror", "prefetch", "a-root@^2", str(lock))
        assert done.returncode == 0 and "fetched 3, skipped 0, failed 0" in done.stdout, done.stdout + done.stderr
        for relative in ("a-root/-/a-root-2.0.0.tgz", "a-dep/-/a-dep-1.2.0.tgz", "locked/-/locked-0.1.0.tgz"):
            assert (root / "public" / relative).is_file()
        assert not (root / "public/a-dep/-/a-dep-1.0.0.tgz").exists()


def test_recorded_advisories_hold_versions_back_at_the_gate(tmp_path: Path) -> None:
    """`block: [$malicious]` and the opt-in `hide_severity` read the advisories `registry-gen
    advisory add` records: such versions leave the document and their tarballs are refused, also
    when the advisory arrives after they were mirrored (a server start decides again)."""
    with hostile_upstream() as upstream:
        for version in ("1.0.0", "1.1.0", "1.2.0"):
            upstream.publish("wormy", version)
        root = tmp_path / "registry"
        write_config(root, upstream.base, "  '**': {proxy: up, block: [$malicious], hide_severity: high}\n")
        with mirror_serve(root) as server:
            assert http("GET", server.base + "wormy/-/wormy-1.2.0.tgz").status == 200
            built(root, "wormy/-/wormy-1.2.0.tgz")
        advisories = {
            "mal.json": {"id": "MAL-2026-7", "affected": [{"package": {"ecosystem": "npm", "name": "wormy"}, "versions": ["1.2.0"]}]},
            "flaw.json": {"ghsa_id": "GHSA-wwww-xxxx-yyyy", "severity": "high", "vulnerabilities": [
                {"package": {"ecosystem": "npm", "name": "wormy"}, "vulnerable_version_range": "< 1.1.0"}]},
        }  # fmt: skip
        for filename, advisory in advisories.items():
            (tmp_path / filename).write_text(json.dumps(advisory))
            added = registry_gen(root, "advisory", "add", str(tmp_path / filename))
            assert added.returncode == 0, added.stderr
        with mirror_serve(root) as server:
            served = document(server.base, "wormy")
            assert sorted(served["versions"]) == ["1.1.0"] and served["dist-tags"]["latest"] == "1.1.0"
            malware = http("GET", server.base + "wormy/-/wormy-1.2.0.tgz")
            assert malware.status == 404 and "MAL-2026-7" in malware.json["error"]
            flawed = http("GET", server.base + "wormy/-/wormy-1.0.0.tgz")
            assert flawed.status == 404 and "hidden by hide_severity high: advisory GHSA-wwww-xxxx-yyyy (high)" in flawed.json["error"]
            poll(lambda: not (root / "public/wormy/-/wormy-1.2.0.tgz").exists(), "the malware's tarball out of the tree", timeout=90)
            assert http("GET", server.base + "wormy/-/wormy-1.2.0.tgz").status == 404


def test_export_writes_a_mirrored_package_as_verdaccio_keeps_a_proxied_one(tmp_path: Path) -> None:
    """Only one of two versions fetched: the export holds that tarball, names the uplink in
    `_uplinks` and lists the other in `_distfiles` (before, it failed on the missing tarball)."""
    with hostile_upstream() as upstream:
        data = upstream.publish("half", "1.0.0")
        upstream.publish("half", "2.0.0")
        root = tmp_path / "registry"
        write_config(root, upstream.base)
        with mirror_serve(root) as server:
            assert http("GET", server.base + "half/-/half-1.0.0.tgz").body == data
            built(root, "half/-/half-1.0.0.tgz")
        exported = registry_gen(root, "export", "verdaccio", str(tmp_path / "storage"))
        assert exported.returncode == 0, exported.stderr
        folder = tmp_path / "storage" / "half"
        assert sorted(p.name for p in folder.glob("*.tgz")) == ["half-1.0.0.tgz"]
        assert (folder / "half-1.0.0.tgz").read_bytes() == data
        stored = json.loads((folder / "package.json").read_text())
        assert "up" in stored["_uplinks"] and sorted(stored["versions"]) == ["1.0.0", "2.0.0"]
        assert stored["_distfiles"]["half-2.0.0.tgz"]["url"] == upstream.base.rstrip("/") + "/half/-/half-2.0.0.tgz"
        assert "half-1.0.0.tgz" in stored["_attachments"] and "half-2.0.0.tgz" not in stored["_attachments"]
