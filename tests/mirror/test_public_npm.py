"""The public npm registry as the uplink (issue 29, "Real parts"): one small install through the
mirror, cached. The first run mirrors from https://registry.npmjs.org/ itself (the network); the
mirror's content/ and data/ are then kept in ~/.cache/registry-gen-tests/, and later runs serve
that mirror with a maxage long enough that nothing goes out: npm's real documents and tarballs,
as this registry took them, installed again."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from filelock import FileLock

from tests.importers.verdaccio import CACHE
from tests.mirror.helpers import built, document, mirror_serve, write_config
from tests.support import Npm

pytestmark = pytest.mark.slow
PUBLIC = "https://registry.npmjs.org/"
FOLDER = CACHE / "mirror-npmjs-smoke-v1"  # content/, data/, .complete (written last)


def test_an_install_through_a_mirror_of_the_public_registry(tmp_path: Path) -> None:
    root = tmp_path / "registry"
    with FileLock(str(CACHE / ".mirror-npmjs-smoke.lock"), timeout=600):
        cached = (FOLDER / ".complete").is_file()
        if cached:
            for folder in ("content", "data"):
                shutil.copytree(FOLDER / folder, root / folder)
        write_config(root, PUBLIC, uplink="    maxage: 3650d\n")
        with mirror_serve(root) as server:
            project = tmp_path / "project"
            project.mkdir()
            (project / "package.json").write_text(json.dumps({"name": "consumer", "version": "1.0.0", "private": True}))
            Npm(tmp_path / "npm", server.base).run("install", "is-odd@3.0.1", cwd=project)
            installed = json.loads((project / "node_modules" / "is-number" / "package.json").read_text())
            assert installed["version"].startswith("6.")
            mirrored = document(server.base, "is-odd")
            built(root, "is-number/-/is-number-" + installed["version"] + ".tgz")
        if not cached:
            shutil.rmtree(FOLDER, ignore_errors=True)
            for folder in ("content", "data"):
                shutil.copytree(root / folder, FOLDER / folder)
            (FOLDER / ".complete").write_text("")
    entry = mirrored["versions"]["3.0.1"]
    assert mirrored["_mirror"]["url"] == PUBLIC and entry["dist"]["tarball"] == f"{server.base}is-odd/-/is-odd-3.0.1.tgz"
    assert entry["dist"]["integrity"].startswith("sha512-") and "signatures" not in entry["dist"]  # npm's keys are not ours
    record = json.loads((root / "content/is-odd/registry-meta.json").read_text())["mirror"]
    assert mirrored["time"]["3.0.1"] == record["times"]["3.0.1"] < record["first_seen"]["3.0.1"]  # npm's time, from before
    assert entry["dependencies"] == {"is-number": "^6.0.0"} and entry["contributors"]  # npm's manifest, as npm lists it
