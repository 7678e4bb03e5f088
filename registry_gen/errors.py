"""One error hierarchy for the generator; each edge (CLI, web) maps it once."""

from __future__ import annotations

from dataclasses import dataclass


class RegistryError(Exception):
    """Base of every error the generator raises on purpose."""


class ConfigError(RegistryError):
    """The configuration file or an option is wrong."""


@dataclass(frozen=True)
class FieldProblem:
    """One problem with one field of a package descriptor."""

    field: str
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message} [{self.rule}]"


class InvalidName(RegistryError, ValueError):
    """A package name that clients or the file layout cannot carry."""


class InvalidVersion(RegistryError, ValueError):
    """A version that is not a semantic version."""


class InvalidManifest(RegistryError, ValueError):
    """A package.json with problems that break clients; carries every problem found."""

    def __init__(self, problems: list[FieldProblem]):
        self.problems = list(problems)
        super().__init__("; ".join(str(p) for p in self.problems))


class InvalidArchive(RegistryError, ValueError):
    """An archive that cannot be read safely; `rule` names the broken rule."""

    def __init__(self, rule: str, message: str):
        self.rule = rule
        self.message = message
        super().__init__(f"{message} [{rule}]")


class VersionConflict(RegistryError):
    """The same name@version came from two archives with different bytes, or a version is reused."""


class NotFound(RegistryError):
    """A package or version that does not exist."""


class Forbidden(RegistryError):
    """The caller may not do this."""


class BrokenMeta(RegistryError):
    """A registry-meta.json in content/ that does not parse: a person must fix it. `key` is the
    file's key in content/ (or the content bucket), `reason` what the parser said."""

    def __init__(self, key: str, reason: str, then: str = "retry"):
        self.key, self.reason = key, reason
        super().__init__(self.fix(then))

    def fix(self, then: str) -> str:
        """The one line naming the file and what to run once it is fixed by hand (`then`)."""
        return f"content/{self.key} is broken ({self.reason}); fix it by hand, then {then}"


class ContentMissing(RegistryError):
    """The content folder does not exist: a typo must not empty a published tree."""


class PruneRefused(RegistryError):
    """A build would remove most of the tree's packages though content/ does not say they went."""


class BindingNotPending(RegistryError):
    """`owner bind-recorded` outside an upgrade: names left unbound since may be so on purpose."""


class AddressUnavailable(RegistryError):
    """The server cannot listen on the address it was given (in use, not this machine's, privileged)."""


class LockTimeout(RegistryError):
    """The build lock could not be taken in time."""


class LedgerUnreadable(RegistryError):
    """The state's ledger (what no build can redo) cannot be read: it must be restored, never dropped."""


class StorageError(RegistryError):
    """The content store refused an operation that retrying will not fix (no such bucket, no
    credentials, access denied): an operator must change the configuration."""


class Unavailable(RegistryError):
    """A service the registry stands on (a database, the object store) cannot be reached right now:
    nothing was half-written and the same action may succeed later. Background loops wait for it
    quietly; requests get a 503."""


class StorageUnavailable(StorageError, Unavailable):
    """The content store cannot be reached right now (connection refused, timed out, 5xx,
    throttled). Nothing was half-written; the same request may succeed later (HTTP 503)."""


class MigrationRefused(RegistryError):
    """`registry-gen migrate` will not copy: the target already holds data, or the source is not
    what the move expects. Nothing was written."""


class StateUnavailable(Unavailable):
    """The state's database (PostgreSQL) cannot be reached right now: nothing was half-written;
    the same request may succeed later (HTTP 503)."""


class LockLost(StateUnavailable):
    """A write's package lock went while it worked (the state database restarted and took the
    lock's connection with it): the write stops before anything of it is kept or served (HTTP 503;
    the client's retry runs it again under a lock that is held)."""


class RevisionConflict(RegistryError):
    """A whole-document write named a `_rev` that is no longer the document's: somebody changed
    the package since the client read it (CouchDB's 409)."""


def unreadable_file(path: object, exc: OSError, what: str, missing: str = "not found") -> ConfigError:
    """A file an operator named that cannot be opened, as one line naming it (never a bare
    `[Errno 2]`): `what` is what it should be ("an access log"), `missing` what to say when absent."""
    if isinstance(exc, FileNotFoundError):
        return ConfigError(f"{path}: {missing}")
    if isinstance(exc, IsADirectoryError):
        return ConfigError(f"{path}: is a folder, not {what}")
    return ConfigError(f"{path}: cannot be read ({exc.strerror or exc})")


class NotLeader(RegistryError):
    """A process acted as the leader of the instances with an epoch that is over (another leads
    now, registry_gen.state.postgres_leader): the action is refused. Never reaches a client."""
