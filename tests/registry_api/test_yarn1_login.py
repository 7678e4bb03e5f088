"""yarn 1 logs in at publish time with a legacy PUT that carries the password as Basic credentials:
an existing account must still get in now that a body password alone is answered 409 (issue 16)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hosts.clients import CLIENTS, ClientRun, install_client
from tests.registry_api.helpers import RegistryProcess, add_user, http, write_package
from tests.support import drive_terminal

pytestmark = pytest.mark.slow


def test_yarn1_publish_logs_an_existing_account_in(server: RegistryProcess, tmp_path: Path) -> None:
    add_user(server.base, "yuki", "yuki-password-1")
    package = write_package(tmp_path / "pkg", "@yuki/hello", "1.0.0")
    client = ClientRun(CLIENTS["yarn1"], install_client(CLIENTS["yarn1"]), tmp_path / "yarn1", server.base)
    (client.home / ".yarnrc").write_text(f'registry "{server.base}"\nusername yuki\nemail yuki@example.com\n')
    code, transcript = drive_terminal(
        [*client.command, "publish", "--new-version", "1.0.0", "--access", "public", "--registry", server.base],
        client.env(), package, [("password", "yuki-password-1")], deadline=120,
    )
    assert code == 0 and "Logged in" in transcript and "Published" in transcript, transcript
    assert http("GET", server.base + "@yuki%2fhello").json["dist-tags"] == {"latest": "1.0.0"}
