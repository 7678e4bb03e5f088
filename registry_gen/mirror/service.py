"""The mirror's orchestrator (I/O): a proxied package's document kept fresh, its tarballs fetched
on first request, both landed in content/ and built into the static tree.

    service = MirrorService(settings, writes)     # one per process; share the WriteService
    service.document(name)        # -> Outcome: what to answer a read of the document with
    service.tarball(name, file)   # the same for /<name>/-/<file>.tgz the tree does not have
    service.settle()              # waits until everything fetched is in content/ and the tree

Freshness: a document is asked of its uplink at most every `maxage` (conditionally, with the
ETag and Last-Modified it gave last time); the freshness check is one row of `state` per request,
and a 304 that can change nothing only moves that row.
Requests for one package while its fetch runs share it (`Flights`). When the uplink fails or
times out, what was fetched before is served (stale-if-error) and the uplink is skipped for
`fail_timeout` after `max_fails` failures (`Health`). A package owned here is never proxied; the
read rules are the caller's to check first (a denied read must never reach an upstream).

Landing: what a request fetched is answered at once (the document computed from its new meta,
the same pure function the build writes it with; the tarball from the checked download) and
lands in the background (`LandingQueue`: batches, one build each). Until its build is done, it
is `pending` here and served from memory; from then on the tree serves it.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from registry_gen.access import Rule
from registry_gen.advisories import Advisory, advisory_folder, load_advisories
from registry_gen.importers.client import Answer, RegistryClient, StatusProblem, tls_context
from registry_gen.importers.keepalive import KeptConnections
from registry_gen.importers.integrity import file_integrity_problem
from registry_gen.importers.landing import Verified
from registry_gen.importers.model import ImportProblem
from registry_gen.importers.origins import OriginLedger
from registry_gen.importers.run import archive_problem
from registry_gen.importers.upstream import same_origin
from registry_gen.meta import PackageMeta
from registry_gen.mirror.config import Uplink
from registry_gen.keyring import load_signer
from registry_gen.mirror.explain import Facts, explain
from registry_gen.mirror.landing import (
    MirrorFolders,
    OwnedHere,
    keep_passed_through,
    land_document,
    land_tarball,
    local_versions,
    mirrored_meta_or_none,
    pass_through,
)
from registry_gen.mirror.policy import epoch, iso
from registry_gen.mirror.record import MirrorRecord
from registry_gen.mirror.sharing import Flights, Health, LandingQueue
from registry_gen.state.mirror_freshness import LOCAL, MIRRORED, MISSING, Entry, MirrorState
from registry_gen.mirror.taking import judged, mirrored_meta, take_document, worth_landing
from registry_gen.layout import PACKAGE_DOCUMENT
from registry_gen.names import package_dir, split_name, tarball_path
from registry_gen.packument import build_packument
from registry_gen.settings import Settings
from registry_gen.state import JournalEvent
from registry_gen.state.ledger import UNCHECKED
from registry_gen.storage import archive_key, meta_key
from registry_gen.versions import is_valid_version
from registry_gen.writes import BatchJournal, WriteService

log = logging.getLogger(__name__)
REFRESHED_EVERY = 86400.0  # an unchanged upstream moves a page's "last refreshed" at most daily
# What can be served as the upstream's bytes without being an archive the build reads: bytes no
# client can unpack either. Anything that unpacks but breaks a rule (links out, bad paths) is refused.
PASSED_THROUGH_RULES = frozenset({"archive-format", "corrupt-archive"})


@dataclass(frozen=True)
class Outcome:
    """200: serve the tree's file, or `document` / `file` while their landing is pending;
    anything else: answer that status with `message`."""

    status: int
    message: str = ""
    document: dict[str, Any] | None = None  # the package document (full form)
    file: Path | None = None  # the tarball's checked bytes

    @property
    def ok(self) -> bool:
        return self.status == 200


class Pending:
    """What was fetched and answered but is not built into the tree yet (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.documents: dict[str, tuple[PackageMeta, dict[str, Any]]] = {}
        self.tarballs: dict[tuple[str, str], Path] = {}

    def meta(self, name: str) -> PackageMeta | None:
        with self.lock:
            found = self.documents.get(name)
            return found[0] if found else None

    def outcome(self, name: str) -> Outcome:
        with self.lock:
            found = self.documents.get(name)
        return Outcome(200, document=found[1]) if found else SERVE

    def tarball(self, name: str, version: str) -> Path | None:
        with self.lock:
            return self.tarballs.get((name, version))

    def add_document(self, meta: PackageMeta, document: dict[str, Any]) -> None:
        with self.lock:
            self.documents[meta.name] = (meta, document)

    def landed_document(self, meta: PackageMeta) -> None:
        with self.lock:
            if self.documents.get(meta.name, (None,))[0] is meta:
                del self.documents[meta.name]

    def add_tarball(self, name: str, version: str, path: Path) -> None:
        with self.lock:
            self.tarballs[(name, version)] = path

    def landed_tarball(self, name: str, version: str) -> Path | None:
        with self.lock:
            return self.tarballs.pop((name, version), None)


SERVE = Outcome(200)


def uplink_client(uplink: Uplink) -> RegistryClient:
    """One bounded client per uplink: its `timeout` for each read, `retry` more attempts for what
    may mend, a deadline for a whole transfer, its token to its own origin only, and its
    connections kept open between requests (one per miss was a third of a cold install's request
    CPU, bench/PROFILE.md)."""
    return RegistryClient(
        uplink.url, uplink.token, attempts=uplink.retry + 1, backoff=0.2, timeout=uplink.timeout,
        deadline=max(60.0, uplink.timeout * 4), auth_scheme=uplink.auth_scheme, headers=uplink.headers,
        connections=KeptConnections(tls_context),
    )  # fmt: skip


def version_of(name: str, filename: str) -> str | None:
    """The version a tarball file name of this registry's layout names (`<bare>-<version>.tgz`)."""
    prefix = f"{split_name(name)[1]}-"
    if not filename.startswith(prefix) or not filename.endswith(".tgz"):
        return None
    version = filename[len(prefix) : -len(".tgz")]
    return version if is_valid_version(version) else None


def tarball_url(record: MirrorRecord, uplink: Uplink, name: str, version: str) -> str:
    """Where a tarball is fetched: the URL the upstream lists when it is on the uplink's own origin,
    else the conventional path on the uplink (a document cannot send this server to another host:
    only the uplink's redirects can, to http(s), without its token)."""
    listed = str(record.upstream_dist(version).get("tarball") or "")
    return listed if same_origin(listed, uplink.url) else uplink.url + tarball_path(name, version)


class AdvisoryIndex:
    """The recorded advisories by package name, read again when their folder changes."""

    def __init__(self, settings: Settings):
        self.folder = advisory_folder(settings)
        self.lock = threading.Lock()
        self.stamp: int | None = -1
        self.by_name: dict[str, tuple[Advisory, ...]] = {}

    def for_name(self, name: str) -> tuple[Advisory, ...]:
        try:
            stamp: int | None = self.folder.stat().st_mtime_ns
        except OSError:
            stamp = None
        with self.lock:
            if stamp != self.stamp:
                loaded = load_advisories(self.folder) if stamp is not None else None
                grouped: dict[str, list[Advisory]] = {}
                for advisory in (loaded[0] if loaded else []):
                    grouped.setdefault(advisory.name, []).append(advisory)
                self.by_name, self.stamp = {k: tuple(v) for k, v in grouped.items()}, stamp
            return self.by_name.get(name, ())


class MirrorService:
    def __init__(self, settings: Settings, writes: WriteService | None = None, *, clock: Callable[[], float] = time.time):
        self.settings = settings
        self.writes = writes or WriteService(settings)
        self.ledger = OriginLedger(settings)
        self.state = MirrorState(settings.data_dir)
        self.folders = MirrorFolders.of(settings)
        self.health = Health()
        self.flights = Flights()
        self.landings = LandingQueue(self._store_batch, self.writes.land)
        self.pending = Pending()
        self.advisories = AdvisoryIndex(settings)
        self.clients = {uplink.name: uplink_client(uplink) for uplink in settings.uplinks}
        self.signer = load_signer(settings)
        self.clock = clock
        # The rules are fixed for the life of the service: which rule proxies a name, and the
        # policy part of its fingerprint, are worked out once (every proxied read asks both).
        self.proxied = functools.lru_cache(maxsize=65536)(self._proxied)
        self.policy_prints: dict[str, str] = {}
        # What this process last landed or kept of each package: (its "refreshed" epoch, its
        # uplink's URL, untrusted); what a refresh answered by a 304 may skip depends on it.
        self.landed_as: dict[str, tuple[float, str, bool]] = {}

    def _store_batch(self, write: Callable[[Any], list[str]]) -> list[str]:
        """A batch of landings into content/, its origin-ledger rows on one connection."""
        with self.ledger.session():
            return self.writes.store_batch(write)

    def settle(self) -> None:
        """Returns once every landing so far is in content/ and built into the tree."""
        self.landings.flush()

    def current_meta(self, name: str) -> PackageMeta | None:
        """The mirrored meta of `name` as it stands: the pending one, else content/'s."""
        return self.pending.meta(name) or mirrored_meta_or_none(self.writes.storage, name)

    def _proxied(self, name: str) -> tuple[Rule, Uplink] | None:
        """The rule proxying `name` and its uplink; None: a local-only name (the default)."""
        rule = self.settings.packages.proxy_rule(name)
        return (rule, self.settings.uplink(str(rule.proxy))) if rule is not None else None

    def fingerprint(self, name: str, rule: Rule, uplink: Uplink) -> str:
        """Everything the verdicts of `name` depend on but the upstream's document."""
        policy = self.policy_prints.get(rule.pattern)
        if policy is None:
            policy = self.policy_prints[rule.pattern] = f"{rule.policy.fingerprint}|untrusted={uplink.untrusted}"
        if rule.policy.hide_severity is None and not any(b.marker == "$malicious" for b in rule.policy.block):
            return policy
        advisories = sorted((a.source_id, a.severity, a.vulnerable_versions, a.malicious) for a in self.advisories.for_name(name))
        return f"{policy}|{advisories}"

    # ------------------------------------------------------------ documents

    def document(self, name: str) -> Outcome:
        """Makes the tree's document of `name` fresh enough to serve (see the module doc)."""
        found = self.proxied(name)
        if found is None:
            return SERVE
        rule, uplink = found
        entry = self.state.get(name)
        if entry is not None and self._fresh(entry, name, rule, uplink):
            return self._answer(entry)
        return self.flights.run(("document", name), lambda: self._refresh(name, rule, uplink))

    def _answer(self, entry: Entry) -> Outcome:
        if entry.status == MISSING:
            return Outcome(404, entry.note or f"not found on the uplink {entry.uplink}")
        return self.pending.outcome(entry.name) if entry.status == MIRRORED else SERVE

    def _fresh(self, entry: Entry, name: str, rule: Rule, uplink: Uplink) -> bool:
        now = self.clock()
        if entry.uplink != uplink.name or now >= entry.checked + uplink.maxage:
            return False
        if entry.status != MIRRORED:
            return True
        return entry.fingerprint == self.fingerprint(name, rule, uplink) and not (entry.next_change and now >= entry.next_change)

    def _refresh(self, name: str, rule: Rule, uplink: Uplink, force: bool = False) -> Outcome:
        entry = self.state.get(name)
        if not force and entry is not None and self._fresh(entry, name, rule, uplink):
            return self._answer(entry)  # refreshed meanwhile (by another process)
        asked = self._ask(name, uplink, entry.etag, entry.last_modified) if self._only_upstream_may_change(name, rule, uplink, entry) else None
        if isinstance(asked, Answer) and asked.document is None and entry is not None:
            self.state.put(dataclasses.replace(entry, checked=self.clock()))  # unchanged: nothing to take, decide or land
            return self._answer(entry)
        meta = self.current_meta(name)
        if meta is None:
            refusal = self.ledger.refusal(name, uplink.origin)
            if refusal is not None:
                self.state.put(Entry(name, uplink.name, LOCAL, self.clock(), note=refusal))
                return SERVE
        if self.health.is_down(uplink.name):
            return self._without_upstream(name, rule, uplink, meta, f"the uplink {uplink.name} is down (it failed {uplink.max_fails} times in a row)")
        validators = (entry.etag, entry.last_modified) if meta is not None and entry is not None else (None, None)
        answer = asked or self._ask(name, uplink, *validators)
        if isinstance(answer, StatusProblem) and answer.status == 404:
            return self._missing(name, rule, uplink, meta)
        if isinstance(answer, ImportProblem):
            return self._failed(name, rule, uplink, meta, answer)
        try:
            record = self._taken(name, uplink, meta, answer.document)
        except ImportProblem as exc:
            return Outcome(502, f"the uplink {uplink.name} answered for {name}: {exc}")
        return self._land(name, rule, uplink, meta, record, Entry(name, uplink.name, MIRRORED, self.clock(), answer.etag, answer.last_modified))

    def _ask(self, name: str, uplink: Uplink, etag: str | None, last_modified: str | None) -> Answer | ImportProblem:
        """The uplink's answer (a 404 counts as an answer: the uplink is up), or why there is none."""
        try:
            answer = self.clients[uplink.name].document_if_changed(name, etag, last_modified)
        except StatusProblem as exc:
            if exc.status == 404:
                self.health.succeeded(uplink.name)
            return exc
        except ImportProblem as exc:
            return exc
        self.health.succeeded(uplink.name)
        return answer

    def _only_upstream_may_change(self, name: str, rule: Rule, uplink: Uplink, entry: Entry | None) -> bool:
        """Whether a 304 from the uplink would leave everything as it is: the package was landed
        by this process from this uplink, its verdicts were made with today's policy inputs and no
        held version comes of age yet, and its "last refreshed" need not move. Then a refresh is
        one conditional request, without reading, deciding or landing the package again (a
        typescript-sized meta costs seconds to read)."""
        landed = self.landed_as.get(name)
        if entry is None or entry.status != MIRRORED or not (entry.etag or entry.last_modified) or landed is None:
            return False
        now = self.clock()
        return (
            landed[1:] == (uplink.url, uplink.untrusted) and now - landed[0] < REFRESHED_EVERY and entry.uplink == uplink.name
            and entry.fingerprint == self.fingerprint(name, rule, uplink) and not (entry.next_change and now >= entry.next_change)
            and not self.health.is_down(uplink.name)
        )  # fmt: skip

    def _taken(self, name: str, uplink: Uplink, meta: PackageMeta | None, document: dict[str, Any] | None) -> MirrorRecord:
        previous = meta.mirror if meta is not None else None
        now = iso(self.clock())
        if document is None:  # not modified: what the mirror holds is current as of now
            assert previous is not None
            return dataclasses.replace(previous, refreshed=now, uplink=uplink.name, url=uplink.url, untrusted=uplink.untrusted)
        return take_document(document, name, uplink, previous, now)

    def _land(self, name: str, rule: Rule, uplink: Uplink, meta: PackageMeta | None, record: MirrorRecord, entry: Entry) -> Outcome:
        """Decides, answers with the new document and lands it in the background when anything
        changed, and remembers the check."""
        decided, verdicts = judged(name, record, rule.policy, self.advisories.for_name(name), self.clock())
        new = mirrored_meta(decided, meta, name)
        self.state.put(dataclasses.replace(entry, fingerprint=self.fingerprint(name, rule, uplink), next_change=verdicts.next_change))
        kept = new if worth_landing(meta, new, REFRESHED_EVERY) else meta
        assert kept is not None and kept.mirror is not None
        self.landed_as[name] = (epoch(kept.mirror.refreshed) or 0.0, kept.mirror.url, kept.mirror.untrusted)
        if kept is meta:
            return self.pending.outcome(name)
        self.pending.add_document(new, build_packument(name, [], new, base_url=self.settings.base_url, readme=None,
                                                       readme_filename=None, signer=self.signer))  # fmt: skip

        def landed(error: BaseException | None) -> None:
            self.pending.landed_document(new)
            if isinstance(error, OwnedHere):  # a publish came in meanwhile: local names win
                self.state.put(Entry(name, uplink.name, LOCAL, self.clock(), note=str(error)))
            elif error is not None:
                log.error("mirror: %s could not land: %s", name, error)
                self.state.forget(name)

        self.landings.submit(lambda storage: land_document(storage, self.ledger, self.folders, self.settings, uplink.origin, new), landed)
        return self.pending.outcome(name)

    def _missing(self, name: str, rule: Rule, uplink: Uplink, meta: PackageMeta | None) -> Outcome:
        """The upstream has no such package. What was mirrored before stays (a mirror never drops
        what it holds because an upstream stopped listing it); else a 404, remembered for maxage."""
        note = f"{name} is not on the uplink {uplink.name} ({uplink.url})"
        if meta is not None and meta.mirror is not None:
            entry = Entry(name, uplink.name, MIRRORED, self.clock(), note=note + "; serving what was mirrored before")
            return self._land(name, rule, uplink, meta, meta.mirror, entry)
        self.state.put(Entry(name, uplink.name, MISSING, self.clock(), note=note))
        return Outcome(404, note)

    def _failed(self, name: str, rule: Rule, uplink: Uplink, meta: PackageMeta | None, exc: ImportProblem) -> Outcome:
        self.health.failed(uplink.name, uplink.max_fails, uplink.fail_timeout)
        log.warning("mirror: %s", exc)
        return self._without_upstream(name, rule, uplink, meta, str(exc))

    def _without_upstream(self, name: str, rule: Rule, uplink: Uplink, meta: PackageMeta | None, reason: str) -> Outcome:
        """Stale-if-error: the last good copy, its verdicts made again if the policy asks (a block
        holds while the uplink is down too); with nothing mirrored, a 502 naming the reason."""
        if meta is None or meta.mirror is None:
            status = 504 if "deadline" in reason or "timed out" in reason else 502
            return Outcome(status, f"{name}: nothing mirrored yet and the upstream cannot be had: {reason}")
        entry = self.state.get(name)
        if entry is not None and entry.fingerprint == self.fingerprint(name, rule, uplink) and not (entry.next_change and self.clock() >= entry.next_change):
            return self.pending.outcome(name)
        # The verdicts made again from what is held; the check time stays, so the next request
        # still asks the upstream (the health gate keeps that from hammering a dead one).
        return self._land(name, rule, uplink, meta, meta.mirror, entry or Entry(name, uplink.name, MIRRORED, 0.0))

    # ------------------------------------------------------------ operations

    def refresh(self, name: str) -> Outcome:
        """Asks the uplink now, whatever the freshness (conditionally: `mirror refresh`)."""
        found = self.proxied(name)
        if found is None:
            return Outcome(404, f"{name} is not proxied: no packages: pattern with proxy: matches it first")
        return self.flights.run(("document", name), lambda: self._refresh(name, *found, force=True))

    def redecide(self, name: str) -> bool:
        """Makes a mirrored package's verdicts again from what it holds (its policy or an advisory
        changed); True when they changed. No upstream is asked."""
        found, meta = self.proxied(name), self.current_meta(name)
        if found is None or meta is None or meta.mirror is None:
            return False
        rule, uplink = found
        entry = self.state.get(name) or Entry(name, uplink.name, MIRRORED, 0.0)
        self._land(name, rule, uplink, meta, meta.mirror, dataclasses.replace(entry, status=MIRRORED))
        after = self.current_meta(name)
        return after is not None and after.mirror is not None and after.mirror.held != meta.mirror.held

    def reconcile(self) -> list[str]:
        """The mirrored packages whose policy inputs changed since their verdicts were made (the
        config was edited, an advisory recorded), decided again: run when a server starts, so a
        block holds for what was mirrored before, even for a tarball nobody asks the document of."""
        changed = []
        for entry in self.state.entries(MIRRORED):
            found = self.proxied(entry.name)
            if found is not None and entry.fingerprint != self.fingerprint(entry.name, *found) and self.redecide(entry.name):
                changed.append(entry.name)
        return changed

    def why(self, name: str, version: str | None = None) -> list[str]:
        """Every decision about `name` (and `version`) in words (`registry-gen mirror why`)."""
        rule = self.settings.packages.rule_for(name)
        uplink = self.settings.uplink(rule.proxy) if rule is not None and rule.proxy else None
        meta = self.current_meta(name)
        owner = self.ledger.refusal(name, uplink.origin) if uplink is not None and meta is None else None
        facts = Facts(
            name, version, rule, uplink, owner, meta.mirror if meta is not None else None, self.state.get(name),
            archive=version is not None and self.writes.storage.exists(archive_key(name, version)),
            passed_through=version is not None and self.folders.passthrough(name, version).is_file(),
            held_aside=version is not None and self.folders.held(name, version).is_file(),
            now=self.clock(),
        )  # fmt: skip
        return explain(facts)

    def ensure_built(self, name: str) -> bool:
        """Builds a mirrored package the tree lacks (a tree rebuilt elsewhere, a landing whose
        build was lost with its process); True when it did."""
        if (self.settings.out_dir / package_dir(name) / PACKAGE_DOCUMENT).is_file() or self.pending.meta(name) is not None:
            return False
        if mirrored_meta_or_none(self.writes.storage, name) is None:
            return False
        self.writes.land(lambda storage: [meta_key(name)])
        return True

    def make_local(self, name: str) -> list[str]:
        """Turns a mirrored package into one of this registry's own (an administrator's explicit
        act): it keeps the versions whose tarballs are held here, with their times and tags, takes
        writes, and is never proxied again. Returns the versions it keeps."""
        self.settle()
        kept: list[str] = []

        def write(storage: Any) -> list[str]:
            kept.extend(local_versions(storage, self.folders, self.settings, name))
            self.ledger.forget(name)
            return [meta_key(name)]

        self.writes.land(write, _made_local_journal(name, self.current_meta(name)))
        self.state.forget(name)
        self.landed_as.pop(name, None)
        return kept

    # ------------------------------------------------------------ tarballs

    def tarball(self, name: str, filename: str) -> Outcome:
        """Makes /<name>/-/<filename> a file of the tree: fetched from the uplink, checked against
        every digest it lists, landed; or says why not (404 held back, 502 refused or unreachable)."""
        version = version_of(name, filename) if self.proxied(name) is not None else None
        if version is None:
            return Outcome(404, "not found")
        return (self.held_back(name, version) or self._held_here(name, version)
                or self.flights.run(("tarball", name, version), lambda: self._fetch_tarball(name, version)))  # fmt: skip

    def held_back(self, name: str, version: str | None) -> Outcome | None:
        """A 404 for a version a decision not built into the tree yet holds back (a block made at a
        server's start or a document read): its file is still in the tree until that build."""
        meta = self.pending.meta(name)
        record = meta.mirror if meta is not None else None
        if version is None or record is None or version not in record.held:
            return None
        return Outcome(404, f"{name}@{version} is held back by this registry: {record.held[version]}")

    def _held_here(self, name: str, version: str) -> Outcome | None:
        """The tree's file, or the checked download waiting for its landing; None: neither."""
        pending = self.pending.tarball(name, version)
        if pending is not None:
            return Outcome(200, file=pending)
        return SERVE if (self.settings.out_dir / tarball_path(name, version)).is_file() else None

    def _fetch_tarball(self, name: str, version: str) -> Outcome:
        held = self._held_here(name, version)
        if held is not None:
            return held
        found = self.document(name)
        meta = self.current_meta(name)
        if meta is None or meta.mirror is None:
            return found if not found.ok else Outcome(404, "not found")
        record = meta.mirror
        if version not in record.versions:
            return Outcome(404, f"{name}@{version}: the uplink {record.uplink} lists no such version")
        if version in record.held:
            return Outcome(404, f"{name}@{version} is held back by this registry: {record.held[version]}")
        uplink = self.settings.uplink(record.uplink) if record.uplink in self.clients else None
        kept = self.folders.passthrough(name, version)
        if kept.is_file():
            return self._passed_through(name, version, record, kept)
        if uplink is None or self.health.is_down(uplink.name):
            return Outcome(503, f"{name}@{version} is not mirrored yet and its uplink {record.uplink} is down or gone")
        return self._download(name, version, record, uplink)

    def _download(self, name: str, version: str, record: MirrorRecord, uplink: Uplink) -> Outcome:
        entry = f"{name}@{version}"
        staged = self.folders.staging / f".{uuid.uuid4().hex}.part"
        staged.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.clients[uplink.name].download(tarball_url(record, uplink, name, version), entry, staged, self.settings.limits.max_archive_bytes)
        except ImportProblem as exc:
            staged.unlink(missing_ok=True)
            self.health.failed(uplink.name, uplink.max_fails, uplink.fail_timeout)
            return Outcome(504 if "deadline" in str(exc) else 502, str(exc))
        self.health.succeeded(uplink.name)
        try:
            return self._land_tarball(name, version, record, uplink, staged)
        finally:
            staged.unlink(missing_ok=True)

    def _land_tarball(self, name: str, version: str, record: MirrorRecord, uplink: Uplink, staged: Path) -> Outcome:
        dist = record.upstream_dist(version)
        problem, sha512 = file_integrity_problem(staged, dist.get("integrity"), dist.get("shasum"))
        if problem is not None:
            return Outcome(502, f"{name}@{version} from the uplink {uplink.name}: {problem}; not served, not kept")
        problem, rule = archive_problem(staged, name, version, self.settings.limits)
        if problem is not None and rule in PASSED_THROUGH_RULES:
            return self._passed_through(name, version, record, staged)
        if problem is not None:
            return Outcome(502, f"{name}@{version} from the uplink {uplink.name}: {problem}; refused")
        kept = staged.with_suffix(".tgz")
        os.replace(staged, kept)  # the download stays until its landing is built (it is answered from meanwhile)
        self.pending.add_tarball(name, version, kept)

        def landed(error: BaseException | None) -> None:
            self.pending.landed_tarball(name, version)
            kept.unlink(missing_ok=True)
            if error is not None:
                log.error("mirror: %s@%s could not land: %s", name, version, error)

        self.landings.submit(lambda storage: land_tarball(storage, self.ledger, uplink.origin, name, version,
                                                          Verified(kept, sha512, staged=True)), landed)  # fmt: skip
        return Outcome(200, file=kept)

    def _passed_through(self, name: str, version: str, record: MirrorRecord, source: Path) -> Outcome:
        dist = record.upstream_dist(version)
        problem, _ = file_integrity_problem(source, dist.get("integrity"), dist.get("shasum"))
        if problem is not None:
            return Outcome(502, f"{name}@{version}: {problem}; not served")

        kept = keep_passed_through(self.folders, name, version, source)

        def write(storage: Any) -> list[str]:
            meta = mirrored_meta_or_none(storage, name)
            if meta is None or meta.mirror is None or version not in meta.mirror.allowed:
                raise OwnedHere(f"{name}@{version} is no longer a version this registry serves")
            pass_through(self.folders, self.settings, name, version)
            return []

        self.landings.submit(write)
        return Outcome(200, file=kept)


def _made_local_journal(name: str, meta: PackageMeta | None) -> BatchJournal:
    """`mirror make-local` is journalled, unlike the mirror's landings (ARCHITECTURE.md, "The
    journal"): from this entry on, the package's events are this registry's own writes."""
    uplink = meta.mirror.uplink if meta is not None and meta.mirror is not None else None
    event = JournalEvent("package:change", name, (), {"made-local": True, "uplink": uplink})
    return BatchJournal([event], {meta_key(name): UNCHECKED}, "registry-gen mirror make-local")
