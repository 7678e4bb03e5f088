"""A throwaway PostgreSQL server from Debian's packages, on 127.0.0.1 and an ephemeral port.

postgres refuses to run as root, so as root every command runs as the `postgres` OS user, in a
temporary directory that user owns.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.support import free_port


def find_bindir() -> Path | None:
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(candidate, "initdb").exists() and Path(candidate, "pg_ctl").exists():
            return Path(candidate)
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


@dataclass
class PostgresServer:
    bindir: Path
    root: Path
    port: int
    as_postgres_user: bool

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = [*args]
        if self.as_postgres_user:
            command = ["runuser", "-u", "postgres", "--", *command]
        return subprocess.run(command, check=True, capture_output=True, text=True, timeout=60)

    def url(self, database: str = "postgres", *, schema: str | None = None) -> str:
        url = f"postgresql://postgres@127.0.0.1:{self.port}/{database}"
        if schema:
            url += f"?options=-csearch_path%3D{schema},public"
        return url

    def start(self) -> None:
        self._run(
            str(self.bindir / "initdb"), "-D", str(self.data_dir), "-A", "trust", "-U", "postgres",
            "-E", "UTF8", "--locale=C.UTF-8", "--no-sync",
        )
        self.resume()

    def resume(self) -> None:
        """Starts the server on its data (again, after `halt`)."""
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
            " -c synchronous_commit=off -c full_page_writes=off"
        )
        self._run(
            str(self.bindir / "pg_ctl"), "-D", str(self.data_dir), "-o", options,
            "-l", str(self.root / "server.log"), "-w", "-t", "60", "start",
        )

    def halt(self) -> None:
        """Stops the server, keeping its data (an outage: every connection is cut; `resume` ends it)."""
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data_dir), "-m", "fast", "-w", "stop")

    def stop(self) -> None:
        try:
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data_dir), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def start_postgres() -> PostgresServer:
    bindir = find_bindir()
    if bindir is None:
        raise FileNotFoundError("PostgreSQL server binaries (initdb, pg_ctl) not found")
    as_postgres_user = os.geteuid() == 0
    root = Path(tempfile.mkdtemp(prefix="user-api-pg-"))
    if as_postgres_user:
        owner = pwd.getpwnam("postgres")
        os.chown(root, owner.pw_uid, owner.pw_gid)
    last_error: Exception | None = None
    for _ in range(3):  # the port may be taken between probing and binding
        server = PostgresServer(bindir=bindir, root=root, port=free_port(), as_postgres_user=as_postgres_user)
        try:
            server.start()
            return server
        except subprocess.CalledProcessError as exc:
            last_error = exc
            subprocess.run(
                ["rm", "-rf", str(server.data_dir)], check=False, capture_output=True
            )
    shutil.rmtree(root, ignore_errors=True)
    raise RuntimeError(f"PostgreSQL did not start: {last_error}")


def start_postgres_or_skip() -> PostgresServer:
    """start_postgres, or a skip of the test where PostgreSQL is not installed; under CI a missing
    real part is a broken machine, not a reason to pass."""
    import pytest

    try:
        return start_postgres()
    except FileNotFoundError as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"PostgreSQL is not installed (CI is set; run .ci/install-system-deps): {exc}")
        pytest.skip(f"PostgreSQL is not installed: {exc}")
