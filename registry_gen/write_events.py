"""What a write did, in words, for the server's log: `alice published demo@1.1.0, tagged
demo@1.1.0 as latest`. Pure: compares the state before a write with the change it commits."""

from __future__ import annotations

from registry_gen.meta import PackageMeta
from registry_gen.publish import PackageState, Upload


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
