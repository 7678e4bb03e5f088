"""Issue 30: a hook delivers only what its owner may still read, checked at delivery: once its owner
lost the read right (removed from the group that registry.yaml's `packages:` names), the next event
is parked with the reason, and the receiver gets nothing of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hooks.receiver import Receiver
from tests.hooks.test_reliable_delivery import add_hook, cli, publish, until
from tests.registry_api.helpers import RegistryProcess, add_user

pytestmark = pytest.mark.slow
CONFIG = """signup: open
hooks: {allow_networks: [127.0.0.0/8], retry_base_seconds: 0.2, timeout_seconds: 2}
packages:
  'secret-*': {read: [team]}
  '**': {read: all}
"""


def test_a_hook_whose_owner_lost_the_read_right_is_parked_not_sent(tmp_path: Path) -> None:
    root = tmp_path / "registry"
    root.mkdir()
    (root / "registry.yaml").write_text(CONFIG)
    receiver = Receiver("read-right-secret").up()
    server = RegistryProcess(root).start()
    try:
        bob, alice = add_user(server.base, "bob", "bob-password-1"), add_user(server.base, "alice", "alice-password-1")
        for name in ("bob", "alice"):
            cli(root, "groups", name, "--add", "team")
        publish(server, bob, "secret-pkg", "1.0.0")
        add_hook(server, alice, "secret-pkg", receiver)  # alice may read it: she is in the team
        publish(server, bob, "secret-pkg", "1.0.1")
        [delivered] = receiver.wait_for(1)
        assert delivered.signed and delivered.body["version"] == "1.0.1"

        cli(root, "groups", "alice", "--remove", "team")
        publish(server, bob, "secret-pkg", "1.0.2")
        until(lambda: "  parked  " in cli(root, "hooks", "deliveries"))
        [parked] = [line for line in cli(root, "hooks", "deliveries").splitlines() if "  parked  " in line]
        assert "secret-pkg" in parked and "alice may no longer read secret-pkg" in parked and "attempts=0" in parked
        assert [d.body["version"] for d in receiver.received] == ["1.0.1"]  # 1.0.2 never left the registry
    finally:
        server.stop()
        receiver.down()
