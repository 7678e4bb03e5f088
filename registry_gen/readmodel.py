"""The read model: "what does the registry hold for package X right now", from one place.

Two stores make up the registry: content/ (the source of truth: archives and each package's
registry-meta.json, behind `ContentStorage`) and the build's state database (what the build found
in content/ and which versions it serves). `RegistryReader` is the only reader of both for the
write side; nothing here parses the built tree. Call it with the build lock held (the write
service does), so the answer cannot change under the caller.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from registry_gen.state.sqlite_cache import BuildState
from registry_gen.errors import InvalidManifest, RegistryError
from registry_gen.meta import PackageMeta, parse_meta
from registry_gen.publish import PackageState
from registry_gen.settings import Settings
from registry_gen.storage import ContentStorage, archive_key, meta_key


class BrokenMeta(RegistryError):
    """A registry-meta.json in content/ that does not parse: a person must fix it."""


@dataclass(frozen=True)
class CurrentPackage:
    """One package as the registry holds it: the rule's input, and where its meta lives (with the
    bytes it has now, for a rollback)."""

    state: PackageState
    meta_key: str
    meta_bytes: bytes | None


class RegistryReader:
    """Answers from content/ (through `storage`) and the build's state; never from the built tree."""

    def __init__(self, settings: Settings, storage: ContentStorage):
        self.settings = settings
        self.storage = storage

    @contextmanager
    def _build_state(self) -> Iterator[BuildState]:
        state = BuildState.reading(self.settings.state_file)
        try:
            yield state
        finally:
            state.close()

    def current(self, name: str) -> CurrentPackage:
        """The package's meta (empty when it has none yet) and the versions the registry serves."""
        with self._build_state() as state:
            key = self._meta_location(state, name)
            served = frozenset(state.live_of(name))
        raw = self.storage.read(key)
        meta = PackageMeta(name=name)
        if raw is not None:
            try:
                meta = parse_meta(raw)
            except InvalidManifest as exc:
                raise BrokenMeta(f"content/{key} is broken ({exc}); fix it by hand, then retry") from exc
        return CurrentPackage(PackageState(name, meta, served), key, raw)

    def _meta_location(self, state: BuildState, name: str) -> str:
        """The write API's own place, unless the build found this package's meta file elsewhere."""
        canonical = meta_key(name)
        if self.storage.exists(canonical):
            return canonical
        for path, error in state.metas_of(name):
            if error is None and self.storage.exists(path):
                return path
        return canonical

    def archive_keys(self, name: str, version: str) -> list[str]:
        """Every archive in content/ that holds name@version (the API's, and any dropped by hand)."""
        keys = [archive_key(name, version)]
        with self._build_state() as state:
            keys += [r.path for r in state.archives_of(name) if r.version == version and r.path not in keys]
            # One that can no longer be read still serves the version (build._choose_releases): it goes too.
            keys += [path for held, path in state.damaged_sources(name) if held == version and path not in keys]
        return [k for k in keys if self.storage.exists(k)]
