"""The client matrix: npm 11, npm 10, pnpm, yarn 1 and yarn 4, each isolated per test.

The clients other than the machine's npm are installed once into
`~/.cache/registry-gen-tests/clients/` (REGISTRY_GEN_CLIENTS_DIR), outside the checkout, with the
machine's npm, and reused while present: each version has its own folder, so a clean checkout does not
install them again.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from tests.realworld.corpus import cache_root
from tests.support import drive_terminal

CLIENTS_DIR = Path(os.environ.get("REGISTRY_GEN_CLIENTS_DIR") or cache_root() / "clients")
NPM = os.environ.get("NPM", "npm")
TIMEOUT = 240
# Variables that change how clients behave (CI turns on yarn's immutable installs and pnpm's
# frozen lockfile; npm_config_* would leak the caller's npm settings).
_DROPPED_ENV_PREFIXES = ("npm_config_", "NPM_CONFIG_", "YARN_", "PNPM_", "COREPACK_")
_DROPPED_ENV = {"CI", "GITHUB_ACTIONS", "BUILD_NUMBER", "RUN_ID", "NODE_OPTIONS", "INIT_CWD"}


@dataclass(frozen=True)
class ClientSpec:
    name: str
    label: str  # as the compatibility table (docs/compatibility.md) names it
    kind: str  # npm | pnpm | yarn1 | yarn4
    package: str | None  # npm spec installed into CLIENTS_DIR; None: the npm on PATH
    entry: str  # executable below the install prefix (.js files run with node)
    lockfile: str


CLIENTS: dict[str, ClientSpec] = {
    spec.name: spec
    for spec in (
        ClientSpec("npm11", "npm 11", "npm", None, NPM, "package-lock.json"),
        ClientSpec("npm10", "npm 10", "npm", "npm@10.9.9", "node_modules/npm/bin/npm-cli.js", "package-lock.json"),
        ClientSpec("pnpm", "pnpm 12", "pnpm", "pnpm@12.21.0", "node_modules/.bin/pnpm", "pnpm-lock.yaml"),
        ClientSpec("yarn1", "yarn 1", "yarn1", "yarn@1.22.22", "node_modules/yarn/bin/yarn.js", "yarn.lock"),
        ClientSpec("yarn4", "yarn 4", "yarn4", "@yarnpkg/cli-dist@4.18.1", "node_modules/@yarnpkg/cli-dist/bin/yarn.js", "yarn.lock"),
    )
}


def clean_env() -> dict[str, str]:
    return {
        key: value
        for key, value in os.environ.items()
        if key not in _DROPPED_ENV and not key.startswith(_DROPPED_ENV_PREFIXES)
    }


def _system_npm_major() -> int:
    proc = subprocess.run([NPM, "--version"], capture_output=True, text=True, timeout=60, env=clean_env())
    return int(proc.stdout.strip().split(".")[0])


def install_client(spec: ClientSpec, clients_dir: Path | None = None) -> list[str]:
    """The command prefix that runs `spec`, installing it into `clients_dir` (CLIENTS_DIR) first if missing."""
    clients_dir = clients_dir or CLIENTS_DIR
    package = spec.package
    if package is None:
        if _system_npm_major() == 11:
            return [shutil.which(NPM) or NPM]
        package = "npm@11"  # the machine's npm is not 11: bring one
        spec = ClientSpec(spec.name, spec.label, spec.kind, package, "node_modules/npm/bin/npm-cli.js", spec.lockfile)
    prefix = clients_dir / package.replace("/", "_").replace("@", "_")
    entry = prefix / spec.entry
    clients_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(clients_dir / ".install.lock"), timeout=600):
        if not entry.exists():
            proc = subprocess.run(
                [NPM, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--loglevel=error",
                 "--cache", str(clients_dir / ".npm-cache"), package],
                capture_output=True, text=True, timeout=600, env=clean_env(),
            )  # fmt: skip
            if proc.returncode != 0 or not entry.exists():
                raise RuntimeError(f"installing {package} into {prefix} failed:\n{proc.stdout}\n{proc.stderr}")
    return ["node", str(entry)] if entry.suffix in (".js", ".cjs") else [str(entry)]


class ClientRun:
    """One client in one test: its own HOME, config and caches; `fresh_cache()` starts a new cache."""

    def __init__(self, spec: ClientSpec, command: Sequence[str], workdir: Path, registry: str):
        self.spec = spec
        self.command = list(command)
        self.workdir = workdir
        self.registry = registry if registry.endswith("/") else registry + "/"
        self.generation = 0
        self.timeout: float = TIMEOUT  # per client command; whole-tree installs raise it
        self.home = workdir / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / ".npmrc").touch()

    @property
    def cache(self) -> Path:
        return self.workdir / f"cache{self.generation}"

    def fresh_cache(self) -> None:
        self.generation += 1

    def env(self) -> dict[str, str]:
        env = clean_env()
        env["HOME"] = str(self.home)
        cache = self.cache
        if self.spec.kind == "npm":
            env.update(
                npm_config_userconfig=str(self.home / ".npmrc"),
                npm_config_cache=str(cache),
                npm_config_audit="false",
                npm_config_fund="false",
                npm_config_update_notifier="false",
                npm_config_loglevel="warn",
            )
        elif self.spec.kind == "pnpm":
            env.update(
                XDG_DATA_HOME=str(cache / "data"),  # the content-addressable store
                XDG_CACHE_HOME=str(cache / "cache"),  # the metadata cache
                XDG_STATE_HOME=str(cache / "state"),
                XDG_CONFIG_HOME=str(self.home / ".config"),
            )
        elif self.spec.kind == "yarn1":
            env.update(YARN_CACHE_FOLDER=str(cache))
        else:
            env.update(
                YARN_CACHE_FOLDER=str(cache / "cache"),
                YARN_GLOBAL_FOLDER=str(cache / "global"),
                YARN_ENABLE_GLOBAL_CACHE="false",
                YARN_ENABLE_TELEMETRY="false",
                YARN_ENABLE_PROGRESS_BARS="false",
            )
        return env

    def run(self, *args: str, cwd: Path, check: bool = True, input: str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [*self.command, *args], cwd=cwd, env={**self.env(), **(env or {})}, capture_output=True, text=True,
            input=input, timeout=self.timeout,
        )  # fmt: skip
        if check and proc.returncode != 0:
            raise AssertionError(
                f"{self.spec.label} {' '.join(args)} failed ({proc.returncode}) in {cwd}:\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    # ------------------------------------------------------------ projects and installs

    def new_project(self, folder: Path, name: str = "matrix-cell") -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "package.json").write_text(json.dumps({"name": name, "version": "1.0.0", "private": True}) + "\n")
        self.configure(folder)
        return folder

    def configure(self, project: Path) -> None:
        """Points the client at the registry through the project's own config file."""
        if self.spec.kind in ("npm", "pnpm"):
            (project / ".npmrc").write_text(f"registry={self.registry}\n")
        elif self.spec.kind == "yarn1":
            (project / ".yarnrc").write_text(f'registry "{self.registry}"\n')
        else:
            server = self.registry.rstrip("/")
            (project / ".yarnrc.yml").write_text(
                f'npmRegistryServer: "{server}"\n'
                'unsafeHttpWhitelist: ["127.0.0.1", "localhost"]\n'
                "nodeLinker: node-modules\n"
            )

    def disable_release_age_gate(self, project: Path) -> None:
        """pnpm 12 and yarn 4 hold back versions younger than a day by default (see docs/compatibility.md)."""
        if self.spec.kind == "pnpm":
            (project / "pnpm-workspace.yaml").write_text("minimumReleaseAge: 0\n")
        elif self.spec.kind == "yarn4":
            with open(project / ".yarnrc.yml", "a") as rc:
                rc.write("npmMinimalAgeGate: 0\n")

    def add(self, project: Path, *packages: str) -> subprocess.CompletedProcess[str]:
        """The first install: resolves through the registry and writes the lockfile."""
        if self.spec.kind == "npm":
            return self.run("install", *packages, cwd=project)
        if self.spec.kind == "pnpm":
            return self.run("add", *packages, cwd=project)
        if self.spec.kind == "yarn1":
            return self.run("add", *packages, "--non-interactive", "--no-progress", cwd=project)
        return self.run("add", *packages, cwd=project, env={"YARN_ENABLE_IMMUTABLE_INSTALLS": "false"})

    def install_frozen(self, project: Path) -> subprocess.CompletedProcess[str]:
        """The second install: from the lockfile only, failing if it would change."""
        if self.spec.kind == "npm":
            return self.run("ci", cwd=project)
        if self.spec.kind == "pnpm":
            return self.run("install", "--frozen-lockfile", cwd=project)
        if self.spec.kind == "yarn1":
            return self.run("install", "--frozen-lockfile", "--non-interactive", "--no-progress", cwd=project)
        return self.run("install", "--immutable", cwd=project)

    # ------------------------------------------------------------ accounts and publishing

    def login(self, username: str, password: str, cwd: Path) -> str:
        """Logs in the way each client does by default; returns what the client printed."""
        if self.spec.kind == "npm":
            return self._web_login(["login", "--auth-type=web", "--browser=false", f"--registry={self.registry}"], username, password, cwd)
        if self.spec.kind == "pnpm":
            return self._web_login(["login", f"--registry={self.registry}"], username, password, cwd)
        if self.spec.kind == "yarn4":
            # yarn's web login asks on the terminal whether to open a browser; its password login
            # asks for the two values: answer those on a pseudo-terminal.
            self.configure(cwd)
            code, transcript = drive_terminal(
                [*self.command, "npm", "login"], self.env(), cwd, [("Username", username), ("Password", password)]
            )
            assert code == 0 and "Successfully logged in" in transcript, transcript
            return transcript
        raise NotImplementedError(f"{self.spec.label}: login is not part of the matrix")

    def _web_login(self, args: list[str], username: str, password: str, cwd: Path) -> str:
        """npm's and pnpm's default: print a URL, poll the registry until the browser is done."""
        process = subprocess.Popen(
            [*self.command, *args], cwd=cwd, env=self.env(), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        printed = ""
        try:
            assert process.stdout is not None
            url = None
            deadline = time.monotonic() + 60
            while url is None and time.monotonic() < deadline:
                line = process.stdout.readline()
                if not line:
                    break
                printed += line
                found = re.search(r"(https?://\S+/-/v1/login/\S+)", line)
                url = found.group(1) if found else None
            assert url is not None, f"{self.spec.label} printed no login URL:\n{printed}"
            form = urllib.parse.urlencode({"username": username, "password": password}).encode()
            reply = urllib.request.urlopen(  # noqa: S310 - a test registry on 127.0.0.1
                urllib.request.Request(url, data=form, headers={"Content-Type": "application/x-www-form-urlencoded",
                                                               "Origin": self.registry.rstrip("/")}), timeout=30
            )
            assert reply.status == 200
            rest, _ = process.communicate(timeout=TIMEOUT)
            printed += rest
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        assert process.returncode == 0, f"{self.spec.label} login failed:\n{printed}"
        return printed

    def whoami(self, cwd: Path) -> str:
        if self.spec.kind == "yarn4":
            return self.run("npm", "whoami", cwd=cwd).stdout
        return self.run("whoami", f"--registry={self.registry}", cwd=cwd).stdout

    def publish(self, package: Path) -> subprocess.CompletedProcess[str]:
        self.configure(package)
        if self.spec.kind == "npm":
            return self.run("publish", "--access=public", cwd=package)
        if self.spec.kind == "pnpm":
            return self.run("publish", "--access=public", "--no-git-checks", cwd=package)
        if self.spec.kind == "yarn4":
            # A yarn project must be installed before `yarn npm publish` will pack it.
            self.run("install", cwd=package, env={"YARN_ENABLE_IMMUTABLE_INSTALLS": "false"})
            # No --access: yarn 4 then sends access=restricted for scoped packages (issue 16).
            return self.run("npm", "publish", cwd=package)
        raise NotImplementedError(f"{self.spec.label}: publish is not part of the matrix")
