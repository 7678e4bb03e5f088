"""A crash between a write's build and its tree upload, with the tree in a bucket (issue 28,
acceptance 3): the instance that built the write is killed before the bucket holds what it
rendered; the other instance, leading once the dead one's session is gone, renders the package
again from the content bucket and uploads it, within seconds. Real PostgreSQL, a real moto
server, two real `registry-gen api` processes, nginx in front of the tree bucket."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import postgres_state_url
from tests.registry_api.helpers import add_user, http, publish_body, tarball
from tests.registry_api.test_api_instances_postgres import change_feed, postgres  # noqa: F401 - postgres: a fixture
from tests.registry_api.test_api_object_store import assert_tarballs_in_bucket, bucket_site, poll, served_versions

pytestmark = pytest.mark.slow


def _changes(site: Any, name: str) -> list[list[str]]:
    """The journal feed's publish entries of `name` (asked of B, the live one), as versions."""
    return [entry["versions"] for entry in change_feed(site.apis[1].base) if entry["name"] == name and entry["kind"] == "package:publish"]


@pytest.mark.parametrize("point", ["after-write", "after-upload"])
def test_an_instance_killed_before_its_tree_upload_is_healed_by_the_other(point: str, postgres: Any, tmp_path: Path) -> None:  # noqa: F811
    envs = ({"REGISTRY_GEN_FAILPOINT": f"{point}:kill"}, {})
    with bucket_site("moto", postgres_state_url(postgres), tmp_path, envs=envs) as site:
        a, b = site.apis
        token = add_user(b.base, "alice", "alice-password-1")
        first = publish_body("healed-pkg", "1.0.0", tarball("healed-pkg", "1.0.0"))
        assert http("PUT", b.base + "healed-pkg", token=token, body=first).status == 201
        second = publish_body("healed-pkg", "1.1.0", tarball("healed-pkg", "1.1.0"))
        try:
            http("PUT", a.base + "healed-pkg", token=token, body=second, timeout=60)
        except OSError:
            pass  # A died with the request: the connection went with it
        assert a.process is not None and a.process.wait(timeout=30) == -9
        killed = time.monotonic()

        def healed() -> bool:
            return "1.1.0" in served_versions(site, "healed-pkg") and len(_changes(site, "healed-pkg")) == 2

        assert poll(healed, 60), f"the bucket's tree never served 1.1.0 (served: {sorted(served_versions(site, 'healed-pkg'))})"
        assert time.monotonic() - killed < 30
        assert_tarballs_in_bucket(site, "healed-pkg")
        assert _changes(site, "healed-pkg") == [["1.0.0"], ["1.1.0"]]  # journalled done, once
        assert json.loads(site.read("healed-pkg/abbreviated.json")[0])["dist-tags"]["latest"] == "1.1.0"
