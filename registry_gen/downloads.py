"""Download counts from a static host's access logs (`registry-gen stats`), pure.

Reads never reach the API, so downloads are counted from the logs of whatever serves the tree:

- nginx's `combined` format (what `registry-gen host-config nginx --standalone` writes:
  `access_log access.log;`), which `registry-gen serve`'s access log also writes (plus a duration);
- Amazon CloudFront's standard logs (W3C, tab-separated, a `#Fields:` header naming the columns:
  `date`, `time`, `cs-method`, `cs-uri-stem`, `sc-status`).

A download is a GET of a tarball (`<base path><name>/-/<bare>-<version>.tgz`) answered 200.
Not counted: 304 (the client had it), 206 (a piece: a resumed download would count twice), HEAD,
errors. Nothing else is deduplicated (npm counts the same way). A line that is not a request of
one of these formats, is longer than MAX_LINE, names a path with dot segments or control characters
(hostile), or a name npm could not carry, is skipped and counted by reason; so is a tarball the tree does not
hold (an unknown package or version: the orchestrator asks the tree).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import Any, Final
from urllib.parse import unquote

from registry_gen.errors import RegistryError
from registry_gen.names import split_name, validate_name

MAX_LINE: Final = 16 * 1024  # an access log line of a real request is far shorter
WEEK: Final = 7
RANGE_DAYS: Final = 365  # the daily series a package's file keeps (npm's range API goes back 18 months)
COMBINED: Final = re.compile(
    r'^(?P<address>\S+) \S+ \S+ \[(?P<time>[^\]]+)\] "(?P<method>[A-Z]+) (?P<target>\S+)(?: [^"]*)?" (?P<status>\d{3}) '
)
CLOUDFRONT_FIELDS: Final = ("date", "time", "x-edge-location", "sc-bytes", "c-ip", "cs-method", "cs(Host)", "cs-uri-stem", "sc-status")


@dataclass(frozen=True, slots=True)
class Hit:
    """A tarball request of a log line: what was asked, how it was answered, on which (UTC) day."""

    method: str
    path: str
    status: int
    day: str


@dataclass(frozen=True, slots=True)
class Tarball:
    name: str
    filename: str
    version: str


@dataclass
class Fold:
    """What a run folded: downloads per (name, version, day), and lines skipped by reason."""

    counts: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    lines: int = 0

    def add(self, other: Fold) -> None:
        self.counts.update(other.counts)
        self.skipped.update(other.skipped)
        self.lines += other.lines


# ---------------------------------------------------------------- one line


def combined_hit(line: str) -> Hit | str:
    """A Combined Log Format line as a Hit, or why it is skipped."""
    found = COMBINED.match(line)
    if found is None:
        return "not a request line"
    try:
        moment = datetime.strptime(found["time"], "%d/%b/%Y:%H:%M:%S %z")
    except ValueError:
        return "bad time"
    return Hit(found["method"], found["target"], int(found["status"]), moment.astimezone(timezone.utc).date().isoformat())


def w3c_hit(line: str, fields: tuple[str, ...]) -> Hit | str:
    """A CloudFront standard log line (tab-separated, in the order of its `#Fields:`), or why not."""
    values = dict(zip(fields, line.rstrip("\r\n").split("\t"), strict=False))
    try:
        day = date.fromisoformat(values["date"]).isoformat()
        return Hit(values["cs-method"], values["cs-uri-stem"], int(values["sc-status"]), day)
    except (KeyError, ValueError):
        return "not a request line"


def tarball_of(target: str, base_path: str) -> Tarball | str:
    """The tarball a request target names under the registry's base path, or why it is none."""
    path = target.split("?", 1)[0]
    if not path.startswith(base_path) or not path.endswith(".tgz"):
        return "not a tarball"
    try:
        path = unquote(path[len(base_path) :], errors="strict")
    except UnicodeDecodeError:
        return "hostile path"
    if re.search(r"[\x00-\x1f\x7f\\]", path) or any(part in ("", ".", "..") for part in path.split("/")):
        return "hostile path"
    folder, sep, filename = path.rpartition("/-/")
    if not sep or "/" in filename:
        return "not a tarball"
    try:
        name = validate_name(folder, legacy=True)
        bare = split_name(name)[1]
    except RegistryError:
        return "not a package name"
    if not filename.startswith(bare + "-") or len(filename) <= len(bare) + 5:
        return "not a tarball"
    return Tarball(name, filename, filename[len(bare) + 1 : -4])


def counted(hit: Hit) -> bool:
    """A download: a whole tarball sent (GET, 200)."""
    return hit.method == "GET" and hit.status == 200


# ---------------------------------------------------------------- a log


class LineReader:
    """Reads one log's lines with the format it announces: W3C `#` headers switch to CloudFront's
    columns; anything else is read as Combined."""

    def __init__(self) -> None:
        self.fields: tuple[str, ...] | None = None

    def hit(self, line: str) -> Hit | str | None:
        """None for a header line (nothing to count, nothing skipped)."""
        if line.startswith("#"):
            if line.startswith("#Fields:"):
                self.fields = tuple(line.removeprefix("#Fields:").split())
            elif line.startswith("#Version:") and self.fields is None:
                self.fields = CLOUDFRONT_FIELDS
            return None
        if self.fields is not None:
            return w3c_hit(line, self.fields)
        return combined_hit(line)


def fold_lines(lines: Iterable[str | None], base_path: str, known: Any) -> Fold:
    """Folds log lines (None: a line over MAX_LINE) into counts. `known(tarball)` says whether the
    tree serves that tarball (the one question for the I/O side)."""
    fold, reader = Fold(), LineReader()
    for line in lines:
        fold.lines += 1
        if line is None:
            fold.skipped["line too long"] += 1
            continue
        hit = reader.hit(line)
        if hit is None:
            fold.lines -= 1
            continue
        if isinstance(hit, str):
            fold.skipped[hit] += 1
            continue
        found = tarball_of(hit.path, base_path)
        if isinstance(found, str):
            if found != "not a tarball":
                fold.skipped[found] += 1
            continue
        if not counted(hit):
            continue
        if not known(found):
            fold.skipped["unknown package or version"] += 1
            continue
        fold.counts[(found.name, found.version, hit.day)] += 1
    return fold


# ---------------------------------------------------------------- a package's file


def no_downloads(name: str) -> dict[str, Any]:
    """A package's file before any count reached it (the build leaves one, so its page's request
    never fails): nothing known, which the page shows as nothing."""
    return {"package": name, "last-week": None, "versions": {}, "range": None, "total": {"downloads": 0, "versions": {}}}


def package_downloads(name: str, days: Mapping[str, Mapping[str, int]], end: str) -> dict[str, Any]:
    """`-/web/package/<name>/downloads.json`: `days` is version -> day -> downloads; `end` the last
    day of the registry's data. `last-week` is npm's point API (the 7 days to `end`), `versions`
    npm's per-version API for the same week, `range` its range API (daily, up to a year), `total`
    every download counted."""
    last = date.fromisoformat(end)
    week_start = (last - timedelta(days=WEEK - 1)).isoformat()
    range_start = (last - timedelta(days=RANGE_DAYS - 1)).isoformat()
    per_day: Counter[str] = Counter()
    for by_day in days.values():
        per_day.update(by_day)
    week = {v: sum(n for d, n in by_day.items() if week_start <= d <= end) for v, by_day in sorted(days.items())}
    series = [{"day": d, "downloads": per_day[d]} for d in sorted(per_day) if range_start <= d <= end]
    return {
        "package": name,
        "last-week": {"start": week_start, "end": end, "downloads": sum(week.values())},
        "versions": week,
        "range": {"start": series[0]["day"] if series else end, "end": end, "downloads": series},
        "total": {"downloads": sum(per_day.values()), "versions": {v: sum(by_day.values()) for v, by_day in sorted(days.items())}},
    }
