"""What the signing-keys page (docs/operating/keys.md) says of `npm audit signatures` in an air-gapped network,
checked against the real npm 11 (issue 31): npm must reach Sigstore's TUF repository before it
asks the registry anything, does not fall back to `/-/npm/v1/keys` when that repository cannot
be reached, and takes the way out from the `HTTPS_PROXY` environment variable, not from npm's own
`https-proxy` setting. The outside is stood in for by proxies that refuse everything, so the test
is the same on a machine with or without a network."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from registry_gen.build import run_build
from registry_gen.keyring import write_new_key
from registry_gen.settings import Settings
from tests.support import Npm, make_tarball, recording_static_server, refusing_proxy

pytestmark = pytest.mark.slow

SIGSTORE_TUF = "CONNECT tuf-repo-cdn.sigstore.dev:443"


def test_npm_audit_signatures_needs_sigstore_first_and_takes_the_proxy_from_the_environment(tmp_path: Path) -> None:
    content = tmp_path / "content"
    make_tarball(content, "audited", "1.0.0")
    plain = Settings(content_dir=content, out_dir=tmp_path / "public", base_url="http://127.0.0.1:9/", data_dir=tmp_path / "data")
    write_new_key(tmp_path / "key.pem", plain)
    with recording_static_server(tmp_path / "public") as (base, asked), refusing_proxy() as (npm_setting, by_setting), \
            refusing_proxy() as (environment, by_environment):  # fmt: skip
        settings = Settings(content_dir=content, out_dir=tmp_path / "public", base_url=base, data_dir=tmp_path / "data",
                            signing_key=tmp_path / "key.pem")
        assert run_build(settings).errors == []
        assert (tmp_path / "public" / "-" / "npm" / "v1" / "keys").is_file()  # the keys npm would fall back to
        npm = Npm(tmp_path / "home", base)
        project = tmp_path / "project"
        project.mkdir()
        (project / "package.json").write_text('{"name": "p", "version": "1.0.0", "private": true}')
        npm.run("install", "audited", cwd=project)
        asked.clear()
        npm.env["HTTPS_PROXY"] = environment
        started = time.monotonic()
        audit = npm.run("audit", "signatures", "--fetch-retries=0", f"--https-proxy={npm_setting}", cwd=project, check=False)
        took = time.monotonic() - started
    assert audit.returncode != 0 and "npm error" in audit.stderr, audit.stdout + audit.stderr
    assert "verified registry signature" not in audit.stdout
    assert SIGSTORE_TUF in " ".join(by_environment)  # the environment's proxy was the way out
    assert by_setting == []  # npm's own https-proxy setting was not
    assert not any(path.startswith("/-/npm/v1/keys") for path in asked), asked  # never asked
    assert took < 60, took  # with --fetch-retries=0: seconds, not npm's ~71 s of retries
    assert (tmp_path / "home" / "cache" / "_tuf").is_dir()  # its TUF cache, which did not spare the trip
