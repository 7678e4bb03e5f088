"""What a write did: in words for the server's log (`alice published demo@1.1.0, tagged demo@1.1.0
as latest`), and as events for the change journal. Pure: compares the state before a write with the
change it commits."""

from __future__ import annotations

from registry_gen.meta import PackageMeta
from registry_gen.publish import PackageState, Upload
from registry_gen.state.ledger import JournalEvent


def _tag_events(name: str, before: dict[str, str], after: dict[str, str]) -> list[str]:
    events = [f"tagged {name}@{version} as {tag}" for tag, version in sorted(after.items()) if before.get(tag) != version]
    events += [f"removed the tag {tag} from {name}" for tag in sorted(set(before) - set(after))]
    return events


def _deprecation_events(name: str, before: dict[str, str], after: dict[str, str]) -> list[str]:
    events = [f"deprecated {name}@{v}" for v, text in sorted(after.items()) if text and before.get(v) != text]
    events += [f"undeprecated {name}@{v}" for v in sorted(before) if before[v] and not after.get(v)]
    return events


def describe_write(state: PackageState, meta: PackageMeta | None, upload: Upload | None, removed: set[str]) -> str:
    """The events of one write, joined in one phrase (empty when nothing a reader sees changed).
    `meta` is the meta after the write (None: the package's meta is gone with all its versions)."""
    name = state.name
    events = [f"published {name}@{upload.version}"] if upload is not None else []
    events += [f"unpublished {name}@{version}" for version in sorted(removed)]
    if meta is None:
        return ", ".join(events or [f"removed {name}"])
    before = state.meta
    if not before.maintainers and not state.published and meta.maintainers and upload is None:
        events.append(f"created {name}")
    elif [m.get("name") for m in before.maintainers] != [m.get("name") for m in meta.maintainers] and before.maintainers:
        events.append(f"set the owners of {name} to {', '.join(str(m.get('name')) for m in meta.maintainers) or 'nobody'}")
    events += _tag_events(name, before.dist_tags, meta.dist_tags)
    events += _deprecation_events(name, before.deprecated, meta.deprecated)
    staged = sorted(set(meta.pending) - set(before.pending))
    events += [f"staged {name}@{version}" for version in staged]
    return ", ".join(events)


# ---------------------------------------------------------------- the same write, as journal events

def write_events(state: PackageState, meta: PackageMeta | None, upload: Upload | None, removed: set[str]) -> list[JournalEvent]:
    """The events of one write for the change journal (registry_gen.state.ledger), named as npm's
    hooks name them; pure, like describe_write. `meta` is the meta after the write (None: the
    package is gone with all its versions). A write that changed nothing a reader sees is one
    `package:change`. Details carry names, tags, versions and messages, never an email."""
    name, before = state.name, state.meta
    if meta is None:
        tags = {"before": dict(before.dist_tags), "after": {}}
        return [JournalEvent("package:unpublish", name, tuple(sorted(removed)), {"package": True, "dist-tags": tags})]
    tags = {"dist-tags": {"before": dict(before.dist_tags), "after": dict(meta.dist_tags)}} if before.dist_tags != meta.dist_tags else {}
    events = [JournalEvent("package:publish", name, (upload.version,), tags)] if upload is not None else []
    if removed:
        events.append(JournalEvent("package:unpublish", name, tuple(sorted(removed)), {} if upload else tags))
    if upload is None and not removed:
        events += _tag_journal(name, before.dist_tags, meta.dist_tags)
    events += _deprecation_journal(name, before.deprecated, meta.deprecated)
    events += _owner_journal(name, before, meta)
    created = not before.maintainers and not state.published and meta.maintainers and upload is None
    staged = sorted(set(meta.pending) - set(before.pending))
    if created or staged:
        events.append(JournalEvent("package:change", name, tuple(staged), {"created": True} if created else {"staged": staged}))
    return events or [JournalEvent("package:change", name)]


def _tag_journal(name: str, before: dict[str, str], after: dict[str, str]) -> list[JournalEvent]:
    events = [
        JournalEvent("package:dist-tag", name, (version,), {"tag": tag, "before": before.get(tag)})
        for tag, version in sorted(after.items()) if before.get(tag) != version
    ]  # fmt: skip
    return events + [JournalEvent("package:dist-tag-rm", name, (before[tag],), {"tag": tag}) for tag in sorted(set(before) - set(after))]


def _deprecation_journal(name: str, before: dict[str, str], after: dict[str, str]) -> list[JournalEvent]:
    by_message: dict[str, list[str]] = {}
    for version, text in sorted(after.items()):
        if text and before.get(version) != text:
            by_message.setdefault(text, []).append(version)
    events = [JournalEvent("package:deprecate", name, tuple(versions), {"message": text}) for text, versions in by_message.items()]
    undone = tuple(v for v in sorted(before) if before[v] and not after.get(v))
    return events + ([JournalEvent("package:undeprecate", name, undone)] if undone else [])


def _owner_journal(name: str, before: PackageMeta, after: PackageMeta) -> list[JournalEvent]:
    """Owners added or removed (a first publish's maintainer is part of the publish)."""
    old, new = [str(m.get("name")) for m in before.maintainers], [str(m.get("name")) for m in after.maintainers]
    if not before.maintainers or old == new:
        return []
    owners = {"before": old, "after": new}
    added, gone = [n for n in new if n not in old], [n for n in old if n not in new]
    events = [JournalEvent("package:owner", name, (), {"added": added, "owners": owners})] if added else []
    return events + ([JournalEvent("package:owner-rm", name, (), {"removed": gone, "owners": owners})] if gone else [])
