"""The parts of `make e2e` that can break without the suite noticing: the loopback registry that
stands in for the yarn plugins' npm packages, and the reading of the suite's report."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

from tests.e2e_cli.run import PLUGIN_VERSIONS, plugin_registry, suite_env, summary
from tests.support import NPM


def test_npm_pack_finds_each_plugin_on_the_loopback_registry(tmp_path: Path) -> None:
    """What the suite's yarn adapter runs: `npm pack @verdaccio/yarn-plugin-<name>`, then it reads
    package/bundles/@yarnpkg/plugin-<name>.js; only the @verdaccio scope goes to loopback."""
    with plugin_registry(tmp_path / "plugins") as base:
        env = suite_env(tmp_path / "work", plugins=base)
        assert (tmp_path / "work" / "home" / ".npmrc").read_text() == f"@verdaccio:registry={base}\n"
        for name, version in PLUGIN_VERSIONS.items():
            out = tmp_path / name
            out.mkdir()
            subprocess.run([NPM, "pack", f"@verdaccio/yarn-plugin-{name}", "--pack-destination", str(out)],
                           cwd=tmp_path, env=env, check=True, capture_output=True, timeout=120)  # fmt: skip
            packed = out / f"verdaccio-yarn-plugin-{name}-{version}.tgz"
            with tarfile.open(packed) as archive:
                bundle = archive.extractfile(f"package/bundles/@yarnpkg/plugin-{name}.js")
                assert bundle is not None and f'name: "@yarnpkg/plugin-{name}"' in bundle.read().decode()


def test_summary_keeps_the_verdicts_and_totals() -> None:
    output = "\n".join([
        "Creating test user...", "npm@11.19.1", "  running npm@11.19.1 > publish...", "  ✓ publish 2.6s",
        "    ✗ unusual valid names are published and served 9ms", "  FAIL package-names 9ms", "  SKIP login",
        "      » GET http://localhost:1/x", "  x npm@11.19.1: 13 passed, 1 failed, 4 skipped (51.1s)",
    ])  # fmt: skip
    assert summary(output) == [
        "  ✓ publish 2.6s", "    ✗ unusual valid names are published and served 9ms", "  FAIL package-names 9ms",
        "  SKIP login", "  x npm@11.19.1: 13 passed, 1 failed, 4 skipped (51.1s)",
    ]  # fmt: skip
