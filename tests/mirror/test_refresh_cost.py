"""What a refresh costs when the uplink answers 304 (the mirror's service in this process, against
an upstream the test starts on loopback that honours If-None-Match): one conditional request and
nothing else while nothing can change; the whole path again as soon as anything else might."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import registry_gen.mirror.service as service_module
from registry_gen.importers.origins import OriginLedger
from registry_gen.mirror.policy import epoch
from registry_gen.mirror.service import MirrorService
from registry_gen.settings import load_settings
from tests.importers.upstream_server import Upstream, hostile_upstream
from tests.mirror.helpers import conditional, write_config

PUBLISHED = "2026-06-01T00:00:00.000Z"


class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


@contextmanager
def mirrored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, packages: str, seen: list[str | None], now: float
) -> Iterator[tuple[Upstream, MirrorService, Clock]]:
    """An upstream holding `name` (answering 304s), and a service whose clock the test moves,
    over a registry folder of its own (the current directory, as for `registry-gen serve`)."""
    with hostile_upstream() as upstream:
        upstream.routes[f"/{name}"] = conditional(upstream, name, seen)
        config = write_config(tmp_path / "registry", upstream.base, packages, uplink="    maxage: 2m\n")
        monkeypatch.chdir(config.parent)
        clock = Clock(now)
        service = MirrorService(load_settings(config), clock=clock)
        try:
            yield upstream, service, clock
        finally:
            service.settle()


def meta_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names whose mirrored meta the service reads from content/ from now on."""
    reads: list[str] = []
    read = service_module.mirrored_meta_or_none

    def counted(storage: object, name: str) -> object:
        reads.append(name)
        return read(storage, name)  # type: ignore[arg-type]

    monkeypatch.setattr(service_module, "mirrored_meta_or_none", counted)
    return reads


def test_a_refresh_answered_304_is_one_conditional_request_and_nothing_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str | None] = []
    with mirrored(tmp_path, monkeypatch, "steady", "  '**': {proxy: up}\n", seen, epoch(PUBLISHED) or 0.0) as (upstream, service, clock):
        upstream.publish("steady", "1.0.0", time=PUBLISHED)
        assert service.document("steady").ok
        service.settle()
        reads = meta_reads(monkeypatch)
        for step in range(1, 4):
            clock.now += 121  # past maxage: each read asks the uplink again
            assert service.document("steady").ok
            assert len(seen) == step + 1 and seen[-1] is not None  # conditional, answered 304
        assert reads == []  # the package was neither read, decided nor landed again
        upstream.publish("steady", "1.1.0", time=PUBLISHED)
        clock.now += 121
        outcome = service.document("steady")
        assert outcome.ok and seen[-1] is not None  # a 200 this time: the whole path
        service.settle()
        assert sorted(service.current_meta("steady").mirror.allowed) == ["1.0.0", "1.1.0"]  # type: ignore[union-attr]


def test_a_version_coming_of_age_is_decided_again_though_the_uplink_answers_304(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str | None] = []
    packages = "  '**': {proxy: up, min_release_age: 3d}\n"
    published = epoch(PUBLISHED) or 0.0
    with mirrored(tmp_path, monkeypatch, "young", packages, seen, published + 86400) as (upstream, service, clock):
        upstream.publish("young", "1.0.0", time="2020-01-01T00:00:00.000Z")
        upstream.publish("young", "1.1.0", time=PUBLISHED)
        assert service.document("young").ok
        service.settle()
        assert sorted(service.current_meta("young").mirror.allowed) == ["1.0.0"]  # type: ignore[union-attr]
        clock.now += 121
        assert service.document("young").ok and seen[-1] is not None  # 304: still too young
        clock.now = published + 3 * 86400 + 1
        assert service.document("young").ok and seen[-1] is not None  # 304 again, but 1.1.0 came of age
        service.settle()
        assert sorted(service.current_meta("young").mirror.allowed) == ["1.0.0", "1.1.0"]  # type: ignore[union-attr]


def test_a_batch_of_landings_opens_the_origin_ledger_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The landing thread's ledger reads and writes for a batch share one connection (opening the
    ledger for each cost more than the rows), a request for a new name opens it not at all, and
    every package still ends up recorded, each archive with its size and digest (no time: a
    tarball landing commits its row once, test_landing_cost), which recognise the file."""
    opened: list[str] = []
    opening = OriginLedger._opened

    def counted(ledger: OriginLedger) -> object:
        opened.append(threading.current_thread().name)
        return opening(ledger)

    monkeypatch.setattr(OriginLedger, "_opened", counted)
    names = [f"lot-{index}" for index in range(6)]
    with mirrored(tmp_path, monkeypatch, "unused", "  '**': {proxy: up}\n", [], epoch(PUBLISHED) or 0.0) as (upstream, service, _):
        for name in names:
            upstream.publish(name, "1.0.0", time=PUBLISHED)
        batches: list[int] = []
        store = service.landings.store
        monkeypatch.setattr(service.landings, "store", lambda write: batches.append(1) or store(write))
        for name in names:
            assert service.document(name).ok
            assert service.tarball(name, f"{name}-1.0.0.tgz").ok
        service.settle()
        # A request for a name new here asks content/ and the build's state; nothing held, no record to read.
        assert [thread for thread in opened if thread == threading.current_thread().name] == []
        records = {name: service.ledger.read(name) for name in names}
    landing_opens = [name for name in opened if name == "mirror-landings"]
    assert batches and len(landing_opens) == len(batches), f"{len(landing_opens)} ledger opens for {len(batches)} batches"
    for name, record in records.items():
        assert record is not None and record.origin == upstream.base
        mark = record.files[f"{name}/{name}-1.0.0.tgz"]
        assert mark.size > 0 and mark.sha512.startswith("sha512-")
        assert service.ledger.matches(f"{name}/{name}-1.0.0.tgz", mark)
