"""A small set of real tarballs, fetched with `npm pack` once and cached outside the checkout.

Chosen for what their package.json files hold: platform values npm documents (fsevents: os darwin;
@esbuild/darwin-arm64: cpu arm64; rollup's musl build: libc), legacy shapes (lodash: keywords as a
string; jsonparse and ansi-html: engines as an array; JSONStream: a capitalised name; dunder-proto,
math-intrinsics: "main": false), people as strings (sharp), SPDX expressions, exports maps,
peerDependenciesMeta (ws), optional platform packages (esbuild, sharp), and a few everyday ones.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.support import NPM

SAMPLE = (
    "jest@29.7.0", "fsevents@2.3.3", "lodash@4.17.21", "jsonparse@1.3.1", "ansi-html@0.0.9",
    "dunder-proto@1.0.1", "math-intrinsics@1.1.0", "agent-base@7.1.4", "JSONStream@1.3.5",
    "@esbuild/darwin-arm64@0.20.2", "esbuild@0.20.2", "@rollup/rollup-linux-x64-musl@4.9.0",
    "express@4.21.2", "react@18.3.1", "react-dom@18.3.1", "ws@8.18.0", "chalk@5.3.0", "debug@2.6.9",
    "once@1.4.0", "uuid@9.0.1", "sharp@0.33.5", "@babel/core@7.24.0", "semver@7.6.3",
)
CACHE_ROOT = Path(os.environ.get("REGISTRY_GEN_TEST_CACHE", Path.home() / ".cache" / "registry-gen-tests"))
MANIFEST = "pack.json"  # npm pack --json: file names and integrity, checked on every reuse


def _sri(path: Path) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(path.read_bytes()).digest()).decode()


def _intact(folder: Path) -> bool:
    try:
        packed = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return len(packed) == len(SAMPLE) and all(
        (folder / item["filename"]).is_file() and _sri(folder / item["filename"]) == item["integrity"] for item in packed
    )


def _fetch(target: Path) -> None:
    staging = Path(tempfile.mkdtemp(prefix=".check-sample-", dir=target.parent))
    env = {k: v for k, v in os.environ.items() if k.lower() != "npm_config_nodedir"}
    env.update(npm_config_cache=str(staging / ".npm-cache"), npm_config_update_notifier="false", npm_config_fund="false")
    try:
        proc = subprocess.run(
            [NPM, "pack", "--json", "--pack-destination", str(staging), *SAMPLE],
            cwd=staging, env=env, capture_output=True, text=True, timeout=300,
        )
        if proc.returncode != 0:
            pytest.fail(f"npm pack of the check sample failed ({proc.returncode}): {proc.stderr[-2000:]}")
        (staging / MANIFEST).write_text(json.dumps([{"filename": i["filename"], "integrity": i["integrity"]} for i in json.loads(proc.stdout)]))
        shutil.rmtree(staging / ".npm-cache")
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)  # atomic: a half-fetched sample is never taken for a cached one
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@pytest.fixture(scope="session")
def real_sample() -> Path:
    """A folder of the SAMPLE tarballs (read-only: copy it before changing anything)."""
    key = hashlib.sha256("\n".join(SAMPLE).encode()).hexdigest()[:12]
    folder = CACHE_ROOT / f"check-sample-{key}"
    if not _intact(folder):
        folder.parent.mkdir(parents=True, exist_ok=True)
        _fetch(folder)
    assert _intact(folder)
    return folder
