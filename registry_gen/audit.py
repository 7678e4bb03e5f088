"""The audit log: the change journal (registry_gen.state.ledger) read with who made each write.

A journal entry names the account (`actor`, `actor_id`) and, since ledger step 3, where the write
came from (`Who`): for an HTTP write the token's key (its public id, never the secret; absent for
a password login), the client address and the user agent; for a CLI write the command and the OS
user. Entries are only ever appended: no route or command changes one, and only retention
(`audit_keep_days`, applied by `registry-gen audit-prune`) removes the oldest.

Reading is pure but for the journal it is handed: `select` pages through `Journal.since` and keeps
the entries a filter (`AuditFilter`) admits; `entry_json` and `entry_line` are the two formats.
"""

from __future__ import annotations

import getpass
import heapq
import json
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from typing import Any, Final, Protocol

from registry_gen.errors import ConfigError
from registry_gen.state.ledger import JournalEntry

MAX_USER_AGENT: Final = 256  # a user agent is the client's to choose: kept short and printable
PAGE: Final = 500  # journal entries read per call while filtering
_UNPRINTABLE: Final = re.compile(r"[\x00-\x1f\x7f-\x9f]")


@dataclass(frozen=True, slots=True)
class Who:
    """Where a write came from, beside the account that made it (the journal's `who`)."""

    token_key: str | None = None
    address: str | None = None
    user_agent: str | None = None
    command: str | None = None
    os_user: str | None = None

    def to_json(self) -> dict[str, str]:
        fields = {"token_key": self.token_key, "address": self.address, "user_agent": self.user_agent,
                  "command": self.command, "os_user": self.os_user}  # fmt: skip
        return {key: value for key, value in fields.items() if value}

    @classmethod
    def http(cls, token_key: str | None, address: str | None, user_agent: str | None) -> Who:
        agent = _UNPRINTABLE.sub("?", user_agent or "")[:MAX_USER_AGENT] or None
        return cls(token_key=token_key, address=address, user_agent=agent)

    @classmethod
    def this_process(cls, argv: list[str] | None = None) -> Who:
        """A write made by this process on its own behalf (a CLI command, a server's own repair):
        the command's words (`registry-gen import npm`, never its arguments) and the OS user."""
        return cls(command=command_words(sys.argv if argv is None else argv), os_user=_os_user())


def command_words(argv: list[str], most: int = 2) -> str:
    """`registry-gen` and the subcommand words before the first option (at most `most`): what ran,
    without paths or values that may say more than the audit needs."""
    words = []
    for arg in argv[1:]:
        if arg.startswith("-") or len(words) == most or not re.fullmatch(r"[a-z][a-z0-9-]*", arg):
            break
        words.append(arg)
    return " ".join(["registry-gen", *words])


def _os_user() -> str | None:
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no name for this uid (a container's)
        return None


# ---------------------------------------------------------------- reading


class JournalReader(Protocol):
    def since(self, seq: int, limit: int = 100) -> list[JournalEntry]: ...


@dataclass(frozen=True, slots=True)
class AuditFilter:
    """Which entries to list: after a sequence number, from a time on, of a package, by an actor."""

    after_seq: int = 0
    from_time: str | None = None  # ISO 8601 (UTC, `Z`), compared as text: the journal's times are
    package: str | None = None
    actor: str | None = None
    account: str | None = None  # the changes to this account only (no package write is one)

    def admits(self, entry: JournalEntry) -> bool:
        return (
            self.account is None
            and (self.from_time is None or entry.time >= self.from_time)
            and (self.package is None or entry.package == self.package)
            and (self.actor is None or entry.actor == self.actor)
        )

    def admits_account(self, entry: AccountEntry) -> bool:
        """An account change is no package's write, and its numbers are not the journal's: a
        `--package` or a sequence number `--since` leaves every account change out."""
        return (
            self.package is None and self.after_seq == 0
            and (self.from_time is None or entry.time >= self.from_time)
            and (self.actor is None or entry.actor == self.actor)
            and (self.account is None or entry.subject == self.account)
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class AccountEntry:
    """A change to an account (user_api.store_audit): `user:create`, `user:remove`, `user:rename`,
    `user:role`, `user:status`, `user:password`, `token:create`, `token:revoke`, `user:groups`,
    `hook:add`, `hook:update`, `hook:remove`; `subject` is the account's username."""

    seq: int  # the account log's own numbering, not the journal's
    time: str
    event: str
    actor: str
    actor_id: str | None
    subject: str
    who: Mapping[str, str]
    detail: Mapping[str, Any]


AuditEntry = JournalEntry | AccountEntry


def merged(journal_entries: Iterable[JournalEntry], account_entries: Iterable[AccountEntry]) -> Iterator[AuditEntry]:
    """Package writes and account changes in one list, by time (each list is in time order)."""
    return heapq.merge(journal_entries, account_entries, key=lambda entry: entry.time)


def parse_since(text: str | None) -> tuple[int, str | None]:
    """`--since`: a sequence number (entries after it), a date `YYYY-MM-DD` or an ISO 8601 time
    (entries from then on, UTC when no offset is given)."""
    if text is None or not text.strip():
        return 0, None
    text = text.strip()
    if text.isdigit():
        return int(text), None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"--since {text!r}: give a sequence number, a date (2025-01-31) or a time (2025-01-31T12:00:00Z)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return 0, moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def select(journal: JournalReader, wanted: AuditFilter, limit: int | None = None) -> Iterator[JournalEntry]:
    """The entries `wanted` admits, in journal order, at most `limit` (None: all)."""
    seq, found = wanted.after_seq, 0
    while limit is None or found < limit:
        page = journal.since(seq, PAGE)
        for entry in page:
            if wanted.admits(entry):
                yield entry
                found += 1
                if limit is not None and found >= limit:
                    return
        if len(page) < PAGE:
            return
        seq = page[-1].seq


def page(journal: JournalReader, wanted: AuditFilter, limit: int) -> dict[str, Any]:
    """One page of the admin route: up to `limit` entries and `next`, the `since` of the next page
    (None: this page reached the end of the journal as it is now)."""
    entries = list(select(journal, wanted, limit))
    more = len(entries) == limit
    return {"entries": [entry_json(e) for e in entries], "next": str(entries[-1].seq) if more else None}


def entry_json(entry: AuditEntry) -> dict[str, Any]:
    if isinstance(entry, AccountEntry):
        return {"account_seq": entry.seq, "time": entry.time, "actor": entry.actor, "actor_id": entry.actor_id,
                "who": dict(entry.who), "event": entry.event, "account": entry.subject, "detail": dict(entry.detail)}  # fmt: skip
    return {
        "seq": entry.seq, "time": entry.time, "actor": entry.actor, "actor_id": entry.actor_id, "who": dict(entry.who),
        "event": entry.kind, "package": entry.package, "versions": list(entry.versions), "detail": dict(entry.detail),
    }  # fmt: skip


def entry_line(entry: AuditEntry) -> str:
    """One line of `registry-gen audit-log`'s text format (an account change's number starts with `a`)."""
    origin = " ".join(f"{key}={_quoted(value)}" for key, value in entry.who.items())
    detail = " ".join(f"{key}={_compact(value)}" for key, value in entry.detail.items())
    if isinstance(entry, AccountEntry):
        number, kind, what = f"a{entry.seq}", entry.event, f"account={entry.subject}"
    else:
        number, kind = str(entry.seq), entry.kind
        what = entry.package + (f"@{','.join(entry.versions)}" if entry.versions else "")
    return "  ".join(part for part in (f"{number:>6}", entry.time, entry.actor, kind, what, detail, origin) if part)


def _quoted(value: str) -> str:
    return f'"{value}"' if " " in value else value


def _compact(value: Any) -> str:
    if isinstance(value, (Mapping, list)):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return str(value)


def prune_before(keep_days: int, today: date) -> str:
    """Retention (`audit_keep_days`): entries made before this time go (UTC midnight, `keep_days`
    days before `today`)."""
    cutoff = datetime.combine(today - timedelta(days=keep_days), datetime.min.time(), tzinfo=timezone.utc)
    return cutoff.strftime("%Y-%m-%dT%H:%M:%S.000Z")
