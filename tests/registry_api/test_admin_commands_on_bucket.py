"""An administrator's commands on a several-machines registry (issue 28): `registry-gen owner claim`
and `owner bind-recorded` run as real processes on their own EMPTY work folder, with the same
registry.yaml as the `registry-gen api` instance (content and tree in a bucket on moto's S3 server
and on SeaweedFS's, state and accounts on a real PostgreSQL). When each returns, what it changed is in the tree bucket
and served through the nginx in front of it, and the account it bound can publish through the api.
An account removed (`DELETE /user/{id}` on the instance, `registry-gen user remove` from the
administrator's folder) leaves the metas in the content bucket and what nginx serves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import postgres_state_url
from tests.registry_api.helpers import add_user, http, publish_body, tarball
from tests.registry_api.test_api_instances_postgres import postgres  # noqa: F401 - the module's PostgreSQL fixture
from tests.registry_api.test_api_object_store import BUCKET, PREFIX, Site, bucket_site, poll

pytestmark = pytest.mark.slow
KINDS = ["moto", "seaweedfs"]  # the two S3 implementations every bucket test runs on


def admin_command(site: Site, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """`registry-gen ARGS` on an administrator's machine: the instance's registry.yaml, its own empty work folder."""
    folder = site.root / "admin"
    folder.mkdir(exist_ok=True)
    (folder / "registry.yaml").write_text(site.apis[0].config.read_text())
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    return subprocess.run(
        [sys.executable, "-m", "registry_gen", *args, "--config", str(folder / "registry.yaml")],
        cwd=folder, env=env, input=stdin, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def maintainers(site: Site, name: str) -> list[str]:
    """The maintainer names of the package's document, as nginx serves it from the tree bucket."""
    return [person["name"] for person in http("GET", site.reads + name).json["maintainers"]]


def publish(site: Site, token: str, name: str, version: str) -> Any:
    return http("PUT", site.apis[0].base + name, token=token, body=publish_body(name, version, tarball(name, version)))


@pytest.mark.parametrize("kind", KINDS)
def test_owner_claim_and_bind_recorded_write_through_the_bucket(kind: str, postgres: Any, tmp_path: Path) -> None:  # noqa: F811
    with bucket_site(kind, postgres_state_url(postgres), tmp_path, hosts=("a",)) as site:
        api = site.apis[0]
        alice = add_user(api.base, "alice", "alice-password-1")
        bob = add_user(api.base, "bob", "bob-password-1")
        carol = add_user(api.base, "carol", "carol-password-1")  # before legacy's first publish: bind-recorded binds her
        assert publish(site, alice, "claimed", "1.0.0").status == 201
        assert publish(site, bob, "claimed", "1.1.0").status == 403  # bob is no maintainer yet

        done = admin_command(site, "owner", "claim", "claimed", "bob")
        assert done.returncode == 0, done.stderr
        assert "bob is now a bound maintainer of claimed" in done.stdout
        assert maintainers(site, "claimed") == ["alice", "bob"]  # in the tree bucket when the command returned
        assert publish(site, bob, "claimed", "1.1.0").status == 201
        again = admin_command(site, "owner", "claim", "claimed", "bob")
        assert again.returncode == 0 and "already" in again.stdout, again.stderr

        # A meta recorded by a release before bindings: carol's name without her account.
        assert publish(site, alice, "legacy", "1.0.0").status == 201
        key = f"{PREFIX}/legacy/registry-meta.json"
        meta = json.loads(site.client.get_object(Bucket=BUCKET, Key=key)["Body"].read())
        meta["maintainers"].append({"name": "carol"})
        site.client.put_object(Bucket=BUCKET, Key=key, Body=json.dumps(meta).encode())
        assert publish(site, carol, "legacy", "1.1.0").status == 403  # a name alone grants nothing

        bound = admin_command(site, "owner", "bind-recorded", "--force")
        assert bound.returncode == 0, bound.stderr
        assert "bound: carol as a maintainer of legacy" in bound.stdout and "bound 1," in bound.stdout
        assert maintainers(site, "legacy") == ["alice", "carol"]
        assert publish(site, carol, "legacy", "1.1.0").status == 201
        changes = http("GET", api.base + "-/changes?since=0&limit=100", token=alice).json["results"]
        details = [entry["detail"] for entry in changes if entry["kind"] == "package:change"]
        assert {"owner claimed": "bob"} in details and {"owners bound": ["carol"]} in details


LEAVERS = ("leaver-api", "leaver-cli")  # removed by the instance's DELETE /user/{id}, and by the CLI
ALICE_ENTRY = {"name": "alice", "email": "alice@example.com"}  # the co-maintainer: her email stays


def shared_with_alice(site: Site, leaver: str) -> str:
    """`leaver` publishes `<leaver>-pkg` and adds alice as its second maintainer (npm owner add);
    returns the package's name."""
    token = add_user(site.apis[0].base, leaver, f"{leaver}-password-1", f"{leaver}@private.example")
    name = f"{leaver}-pkg"
    assert publish(site, token, name, "1.0.0").status == 201
    owners = {"_id": name, "maintainers": [{"name": leaver}, {"name": "alice"}]}
    rev = http("GET", site.reads + name).json["_rev"]
    assert http("PUT", f"{site.apis[0].base}{name}/-rev/{rev}", token=token, body=owners).status in (200, 201)
    return name


def email_places(site: Site, leaver: str) -> dict[str, bool]:
    """Where the leaver's email is now: the meta in the content bucket, the package's document and
    -/all as nginx serves them from the tree bucket."""
    email = f"{leaver}@private.example".encode()
    meta = site.client.get_object(Bucket=BUCKET, Key=f"{PREFIX}/{leaver}-pkg/registry-meta.json")["Body"].read()
    return {
        "meta": email in meta,
        "document": email in http("GET", site.reads + f"{leaver}-pkg").body,
        "-/all": email in http("GET", site.reads + "-/all").body,
    }


def assert_served(site: Site, leaver: str) -> None:
    """Before the removal, the email is in each place (-/all once the leader rewrote it): the checks can fail."""
    assert poll(lambda: all(email_places(site, leaver).values()), 30), email_places(site, leaver)


def assert_erased(site: Site, leaver: str) -> None:
    """The meta and the document hold no email of `leaver` when the removal returns; -/all once
    the leader rewrote it (index_refresh_seconds: 1)."""
    places = email_places(site, leaver)
    assert not places["meta"] and not places["document"], places
    assert http("GET", site.reads + f"{leaver}-pkg").json["maintainers"] == [{"name": leaver}, ALICE_ENTRY]
    assert poll(lambda: not email_places(site, leaver)["-/all"], 30), "-/all still shows the email"


@pytest.mark.parametrize("kind", KINDS)
def test_removing_an_account_erases_its_email_through_the_bucket(kind: str, postgres: Any, tmp_path: Path) -> None:  # noqa: F811
    with bucket_site(kind, postgres_state_url(postgres), tmp_path, hosts=("a",)) as site:
        api = site.apis[0]
        made = admin_command(site, "user", "add", "boss", "--admin", "--password-stdin", stdin="boss-password-1\n")
        assert made.returncode == 0, made.stderr
        boss = http("POST", api.base + "-/user-api/tokens", body={"username": "boss", "password": "boss-password-1"}).json["token"]
        add_user(api.base, "alice", "alice-password-1")
        for leaver in LEAVERS:
            shared_with_alice(site, leaver)
            assert_served(site, leaver)

        found = http("GET", api.base + "user/search?keyword=leaver-api", token=boss).json["content"]
        (account,) = [a for a in found if a["username"] == "leaver-api"]
        assert http("DELETE", f"{api.base}user/{account['id']}", token=boss).status == 204
        assert_erased(site, "leaver-api")
        assert email_places(site, "leaver-cli")["document"]  # one account's removal erases no other email

        removed = admin_command(site, "user", "remove", "leaver-cli", "--yes")
        assert removed.returncode == 0, removed.stderr
        assert "removed leaver-cli" in removed.stdout and "email erased from 1 package file(s)" in removed.stdout
        assert_erased(site, "leaver-cli")
        changes = http("GET", api.base + "-/changes?since=0&limit=100", token=boss).json["results"]
        erasures = [(e["name"], e["detail"]) for e in changes if e["kind"] == "package:change" and "maintainer email erased" in e["detail"]]
        assert erasures == [(f"{leaver}-pkg", {"maintainer email erased": leaver}) for leaver in LEAVERS]


def test_serve_refuses_content_in_a_bucket_in_one_line_naming_the_api(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`serve` builds and serves a local tree from a local content folder: with `storage:` it
    refuses before it binds or writes anything, and says to run `registry-gen api` instead."""
    from registry_gen.cli import main as registry_gen

    config = tmp_path / "registry.yaml"
    config.write_text(
        "content_dir: content\nout_dir: public\ndata_dir: data\nstorage: s3://registry/reg\n"
        "storage_endpoint_url: http://127.0.0.1:9\ndatabase_url: postgresql://registry@127.0.0.1:9/registry\n"
    )
    assert registry_gen(["serve", "--config", str(config), "--port", "0"]) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: storage: s3://registry/reg:") and "`registry-gen api`" in lines[0], lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["registry.yaml"]  # nothing created


def test_a_removal_over_a_damaged_meta_in_the_bucket_names_it_and_erase_email_finishes(postgres: Any, tmp_path: Path) -> None:  # noqa: F811
    """DELETE /user/{id} on the instance with the leaver's meta damaged in the content bucket: the
    account is removed, the answer is a 500 erasure-incomplete problem naming that meta and the
    finishing command, nginx still serves the email (findable, not silently kept); once the meta
    is fixed, `registry-gen user erase-email` from the administrator's folder erases it everywhere."""
    with bucket_site("moto", postgres_state_url(postgres), tmp_path, hosts=("a",)) as site:
        api = site.apis[0]
        assert admin_command(site, "user", "add", "boss", "--admin", "--password-stdin", stdin="boss-password-1\n").returncode == 0
        boss = http("POST", api.base + "-/user-api/tokens", body={"username": "boss", "password": "boss-password-1"}).json["token"]
        add_user(api.base, "alice", "alice-password-1")
        name = shared_with_alice(site, "leaver-api")
        assert_served(site, "leaver-api")
        key = f"{PREFIX}/{name}/registry-meta.json"
        good = site.client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        site.client.put_object(Bucket=BUCKET, Key=key, Body=good[:-3])  # a hand edit cut short

        (account,) = [a for a in http("GET", api.base + "user/search?keyword=leaver-api", token=boss).json["content"]]
        reply = http("DELETE", f"{api.base}user/{account['id']}", token=boss)
        assert reply.status == 500 and reply.json["type"].endswith("/erasure-incomplete"), reply.body
        (left,) = reply.json["errors"]
        assert left["detail"].startswith(f"content/{name}/registry-meta.json is broken ("), left
        assert left["detail"].endswith("fix it by hand, then run `registry-gen user erase-email leaver-api`"), left
        assert http("GET", f"{api.base}user/{account['id']}", token=boss).status == 404  # the account is removed
        assert email_places(site, "leaver-api")["document"]  # the last good document: left for the finishing step

        site.client.put_object(Bucket=BUCKET, Key=key, Body=good)  # fixed by hand
        finished = admin_command(site, "user", "erase-email", "leaver-api")
        assert finished.returncode == 0 and "email erased from 1 package file(s)" in finished.stdout, finished.stderr
        assert_erased(site, "leaver-api")
        assert http("GET", site.reads + name).json["maintainers"] == [{"name": "leaver-api"}, ALICE_ENTRY]
