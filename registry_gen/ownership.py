"""`registry-gen owner claim`: an administrator binds a maintainer name of a package to an account.

The orchestrator of that one job: under the shared build lock it reads the package's meta from
content/, applies the pure rule (registry_gen.publish.apply_claim), writes the meta atomically, and
rebuilds that package. The account itself is looked up by the caller (the user store lives in
user_api); this module only receives its name, email and immutable id.
"""

from __future__ import annotations

import dataclasses
import json

from registry_gen.build import ABBREVIATED_FILE, build_lock, run_build, scan_content
from registry_gen.state import JournalEvent, open_state
from registry_gen.state.ledger import content_digest
from registry_gen.errors import InvalidManifest, NotFound
from registry_gen.meta import PackageMeta, dump_meta, parse_meta
from registry_gen.names import package_dir, validate_name
from registry_gen.publish import PackageState, apply_claim, maintainer_entry, now_iso
from registry_gen.settings import Settings
from registry_gen.storage import FolderStorage, meta_key, write_meta


def published_versions(settings: Settings, name: str) -> frozenset[str]:
    """The versions the tree serves for `name` (from its built abbreviated document)."""
    path = settings.out_dir / package_dir(name) / ABBREVIATED_FILE
    try:
        return frozenset(json.loads(path.read_bytes()).get("versions", {}))
    except (OSError, ValueError, AttributeError):
        return frozenset()


def meta_location(settings: Settings, storage: FolderStorage, name: str) -> str:
    """The package's meta file: the API's own place, unless the build found it elsewhere in content/."""
    canonical = meta_key(name)
    if storage.exists(canonical):
        return canonical
    with open_state(settings).view() as state:
        found = [path for path in state.meta_paths(name) if storage.exists(path)]
    return found[0] if found else canonical


def claim_package(
    settings: Settings, name: str, username: str, email: str | None, account_id: str, actor: str = "registry-gen owner claim"
) -> bool:
    """Binds `username` (account `account_id`) as a maintainer of `name`; False when it already was."""
    validate_name(name, legacy=True)
    storage = FolderStorage(settings.content_dir)
    with build_lock(settings):
        key = meta_location(settings, storage, name)
        raw = storage.read(key)
        meta = parse_meta(raw) if raw is not None else PackageMeta(name=name)
        state = PackageState(name, meta, published_versions(settings, name))
        if not state.is_held:
            raise NotFound(f"{name} is not in this registry (build it first, or check the name)")
        changed = apply_claim(state, maintainer_entry(username, email, account_id), now_iso())
        if changed is None:
            return False
        event = JournalEvent("package:change", name, (), {"owner claimed": username})
        write_id = _journalled(settings, {key: content_digest(dump_meta(changed))}, [event], actor)
        write_meta(storage, key, changed)
    run_build(settings, changed=[key])  # a key of content/, as the build takes it
    _finish(settings, write_id)
    return True


def _journalled(settings: Settings, files: dict[str, str | None], events: list[JournalEvent], actor: str) -> int:
    """The write journalled pending before content/ changes (registry_gen.state.ledger)."""
    with open_state(settings).journal() as journal:
        return journal.begin_write(files, events, actor, None, now_iso())


def _finish(settings: Settings, write_id: int) -> None:
    with open_state(settings).journal() as journal:
        journal.finish_write(write_id, done=True)


def erase_maintainer_email(settings: Settings, username: str, actor: str = "registry-gen user remove") -> list[str]:
    """A deleted account's email leaves every meta in content/ (and so every document, index and
    page after the rebuild). Returns the meta files changed. Emails inside a tarball's own
    package.json are the package's bytes and stay (SECURITY.md, "Maintainer emails")."""
    storage = FolderStorage(settings.content_dir)
    erased: dict[str, PackageMeta] = {}
    with build_lock(settings):
        for key in sorted(scan_content(settings.content_dir)[1]):
            raw = storage.read(key)
            if raw is None:
                continue
            try:
                meta = parse_meta(raw)
            except InvalidManifest:
                continue  # the build reports a broken meta; it holds nothing we could rewrite safely
            people = [{k: v for k, v in m.items() if not (k == "email" and m.get("name") == username)} for m in meta.maintainers]
            if people != meta.maintainers:
                erased[key] = dataclasses.replace(meta, maintainers=people)
        if not erased:
            return []
        events = [JournalEvent("package:change", meta.name, (), {"maintainer email erased": username}) for meta in erased.values()]
        write_id = _journalled(settings, {key: content_digest(dump_meta(meta)) for key, meta in erased.items()}, events, actor)
        for key, meta in erased.items():
            write_meta(storage, key, meta)
    run_build(settings, changed=list(erased))
    _finish(settings, write_id)
    return list(erased)
