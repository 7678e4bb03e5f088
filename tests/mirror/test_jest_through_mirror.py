"""Issue 29, acceptance 1: with a real Verdaccio 6.8.0 holding `jest@29`'s tree as the upstream
(tests/mirror/jest_upstream.py fills it once and caches it), a cold `jest@29` install into an empty
mirror succeeds with npm 11, pnpm and yarn 1 and gives exactly the set each gets from the upstream
itself; with the upstream stopped, a fresh-cache install of the same succeeds from the mirror alone;
a version published upstream afterwards appears once the upstream is back, within maxage (after
the uplink's fail_timeout, which its failures during the outage started)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.hosts.servers import free_port
from tests.importers.verdaccio import verdaccio_server
from tests.mirror.helpers import document, write_config
from tests.mirror.jest_upstream import JEST_CLIENTS, client_run, install_jest, jest_upstream
from tests.registry_api.helpers import RegistryProcess, add_user, http, publish_body, tarball
from tests.support import poll

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # six whole-tree installs of 266 packages
UPLINK = "    maxage: 5s\n    fail_timeout: 5s\n"


def test_jest_installs_through_an_empty_mirror_and_then_from_the_mirror_alone(tmp_path: Path) -> None:
    source, expected = jest_upstream()
    storage = tmp_path / "storage"
    shutil.copytree(source, storage)  # the cached storage stays as it was filled
    port = free_port()
    upstream = f"http://127.0.0.1:{port}/"
    servers: dict[str, RegistryProcess] = {}
    try:
        with verdaccio_server(tmp_path / "verdaccio", storage=storage, port=port):
            for client in JEST_CLIENTS:
                write_config(tmp_path / client, upstream, uplink=UPLINK)
                servers[client] = RegistryProcess(tmp_path / client).start()
                run = client_run(client, tmp_path / f"{client}-cold", servers[client].base)
                assert install_jest(run, tmp_path / f"{client}-cold" / "project") == expected[client]
        for client in JEST_CLIENTS:  # the upstream is stopped: the mirror alone, a fresh cache
            run = client_run(client, tmp_path / f"{client}-alone", servers[client].base)
            assert install_jest(run, tmp_path / f"{client}-alone" / "project") == expected[client]
        with verdaccio_server(tmp_path / "verdaccio", storage=storage, port=port):
            token = add_user(upstream, "publisher", "publisher-password-1")
            reply = http("PUT", upstream + "jest", body=publish_body("jest", "29.99.0", tarball("jest", "29.99.0")), token=token)
            assert reply.status in (200, 201), reply.body
            base = servers["npm11"].base
            poll(lambda: "29.99.0" in document(base, "jest")["versions"], "jest@29.99.0 through the mirror", timeout=60)
            assert document(base, "jest")["dist-tags"]["latest"] == "29.99.0"
    finally:
        for server in servers.values():
            server.stop()
