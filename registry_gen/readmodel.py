"""The read model: "what does the registry hold for package X right now", from one place.

Two stores make up the registry: content/ (the source of truth: archives and each package's
registry-meta.json, behind `ContentStorage`) and the build's state (registry_gen.state: what the
build found in content/, and, in its ledger, which versions it serves). `RegistryReader` is the only reader of both for the
write side; nothing here parses the built tree. Call it with the build lock held (the write
service does), so the answer cannot change under the caller.
"""

from __future__ import annotations

from dataclasses import dataclass

from registry_gen.meta import PackageMeta
from registry_gen.publish import PackageState
from registry_gen.settings import Settings
from registry_gen.state import StateView, open_state
from registry_gen.storage import ContentStorage, archive_key, meta_key, parsed_meta


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
        self.state = open_state(settings)

    def current(self, name: str) -> CurrentPackage:
        """The package's meta (empty when it has none yet) and the versions the registry serves."""
        with self.state.view() as state:
            served = state.served_versions(name)
            key, raw = self._meta_found(state, name)
        meta = PackageMeta(name=name) if raw is None else parsed_meta(key, raw)
        return CurrentPackage(PackageState(name, meta, served), key, raw)

    def _meta_found(self, state: StateView, name: str) -> tuple[str, bytes | None]:
        """Where the package's meta file is and its bytes (None: none yet): the write API's own place,
        unless the build found it elsewhere. Read at once, not asked for first (in a bucket, a
        request less per write)."""
        canonical = meta_key(name)
        raw = self.storage.read(canonical)
        if raw is not None:
            return canonical, raw
        for path in state.meta_paths(name):  # asked only when the own place has none (a meta dropped by hand)
            raw = self.storage.read(path)
            if raw is not None:
                return path, raw
        return canonical, None

    def archive_keys(self, name: str, version: str) -> list[str]:
        """Every archive in content/ that holds name@version (the API's, and any dropped by hand)."""
        keys = [archive_key(name, version)]
        with self.state.view() as state:
            # One that can no longer be read still serves the version (build.plan.choose_releases): it goes too.
            keys += [path for path in state.archive_paths(name, version) if path not in keys]
        return [k for k in keys if self.storage.exists(k)]
