"""registry_gen.hosting: the pure generators (object headers, upload plan, nginx text)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest

from registry_gen.cli import main as registry_gen
from registry_gen.commands_host_config import default_listen
from registry_gen.hosting import (
    API_READ_PREFIXES,
    IMMUTABLE_CACHE,
    USER_API_EXACT,
    USER_API_PREFIXES,
    ObjectKind,
    classify,
    document_cache,
    nginx_config,
    nginx_site,
    object_headers,
    public_read_policy,
    tag_documents,
    upload_plan,
    website_configuration,
)
from tests.hosts.servers import NGINX

DOCS = "public, max-age=0, must-revalidate"


@pytest.mark.parametrize(
    ("relative", "kind", "content_type", "cache"),
    [
        ("left-pad/index.html", ObjectKind.PACKAGE_DOCUMENT, "application/json", DOCS),
        ("@acme/widget/index.html", ObjectKind.PACKAGE_DOCUMENT, "application/json", DOCS),
        ("@acme/widget/latest/index.html", ObjectKind.PACKAGE_DOCUMENT, "application/json", DOCS),
        ("@acme/widget/abbreviated.json", ObjectKind.ABBREVIATED_DOCUMENT, "application/vnd.npm.install-v1+json", DOCS),
        ("@acme/widget/-/widget-1.0.0.tgz", ObjectKind.TARBALL, "application/octet-stream", IMMUTABLE_CACHE),
        ("left-pad/-/left-pad-1.0.0.tgz", ObjectKind.TARBALL, "application/octet-stream", IMMUTABLE_CACHE),
        ("index.html/index.html", ObjectKind.PACKAGE_DOCUMENT, "application/json", DOCS),  # a package named index.html
        ("-/package/@acme/widget/dist-tags", ObjectKind.REGISTRY_DOCUMENT, "application/json", DOCS),
        ("-/ping", ObjectKind.REGISTRY_DOCUMENT, "application/json", DOCS),
        ("-/all/index.html", ObjectKind.REGISTRY_DOCUMENT, "application/json", DOCS),
        ("-/search.json", ObjectKind.REGISTRY_DOCUMENT, "application/json", DOCS),
        ("-/404.json", ObjectKind.REGISTRY_DOCUMENT, "application/json", DOCS),
        ("404.html", ObjectKind.REGISTRY_DOCUMENT, "application/json", DOCS),
        ("-/web/index.html", ObjectKind.WEB, "text/html; charset=utf-8", DOCS),
        ("-/web/static/site.css", ObjectKind.WEB, "text/css; charset=utf-8", DOCS),
        ("-/web/search/ab.json", ObjectKind.WEB, "application/json", DOCS),
        ("-/web/search/sy/0f1e2d3c4b5a.json", ObjectKind.WEB, "application/json", DOCS),  # a leaf of a cut shard
        ("robots.txt", ObjectKind.OTHER, "text/plain; charset=utf-8", DOCS),
    ],
)
def test_object_headers(relative: str, kind: ObjectKind, content_type: str, cache: str) -> None:
    assert classify(relative) is kind
    headers = object_headers(relative)
    assert headers is not None and (headers.content_type, headers.cache_control) == (content_type, cache)


@pytest.mark.parametrize(
    "relative",
    [".registry-gen/state.sqlite", ".nojekyll", "left-pad/.index.html.x1.tmp", "left-pad/index.html.gz", "-/ping.gz", ""],
)
def test_private_files_and_gz_siblings_are_not_published(relative: str) -> None:
    assert object_headers(relative) is None


def test_document_max_age_and_validation() -> None:
    assert object_headers("left-pad/index.html", document_max_age=300).cache_control == "public, max-age=300, must-revalidate"  # type: ignore[union-attr]
    assert object_headers("left-pad/-/left-pad-1.0.0.tgz", document_max_age=300).cache_control == IMMUTABLE_CACHE  # type: ignore[union-attr]
    with pytest.raises(ValueError):
        document_cache(-1)


def test_upload_plan_orders_tarballs_first_and_adds_folder_aliases() -> None:
    files = ["-/web/index.html", "@a/b/index.html", "@a/b/-/b-1.0.0.tgz", "@a/b/index.html.gz", ".registry-gen/x", "-/all/index.html"]
    plan = upload_plan(files, prefix="npm")
    assert [(u.key, u.phase) for u in plan] == [
        ("npm/@a/b/-/b-1.0.0.tgz", 0),
        ("npm/@a/b", 1),
        ("npm/@a/b/index.html", 1),
        ("npm/-/all", 2),
        ("npm/-/all/index.html", 2),
        ("npm/-/web/", 2),
        ("npm/-/web/index.html", 2),
    ]
    alias = next(u for u in plan if u.key == "npm/@a/b")
    assert alias.source == "@a/b/index.html" and alias.content_type == "application/json"


def test_upload_plan_without_folder_keys_puts_each_document_under_its_tree_path_only() -> None:
    """`tree_readers: nginx`: the emitted config reads `<name>/index.html`, so no second key."""
    files = ["-/web/index.html", "@a/b/index.html", "@a/b/abbreviated.json", "@a/b/latest/index.html", "@a/b/-/b-1.0.0.tgz", "-/all/index.html"]
    plan = upload_plan(files, prefix="npm", folder_keys=False)
    assert [(u.key, u.phase) for u in plan] == [
        ("npm/@a/b/-/b-1.0.0.tgz", 0),
        ("npm/@a/b/abbreviated.json", 1),
        ("npm/@a/b/index.html", 1),
        ("npm/@a/b/latest/index.html", 1),
        ("npm/-/all/index.html", 2),
        ("npm/-/web/index.html", 2),
    ]
    assert {u.key for u in upload_plan(files, prefix="npm")} - {u.key for u in plan} == {"npm/@a/b", "npm/@a/b/latest", "npm/-/all", "npm/-/web/"}


def test_upload_plan_sends_a_packages_own_files_with_its_documents_and_the_registry_wide_ones_after() -> None:
    """A publish's upload is one wave after its tarball: the package's dist-tags and web pages name
    only its versions, so they go with its documents; the listings (front, browse and search pages,
    -/all) name other packages, whose documents may be in the same upload, so they wait."""
    files = [
        "a/-/a-1.0.0.tgz", "a/index.html", "a/abbreviated.json", "a/latest/index.html", "-/package/a/dist-tags",
        "-/web/package/a/index.html", "-/web/package/a/v/1.0.0/index.html",
        "-/web/index.html", "-/web/browse/a/index.html", "-/web/search/a.json", "-/all/index.html", "-/search.json",
    ]  # fmt: skip
    phases = {u.source: u.phase for u in upload_plan(files, folder_keys=False)}
    assert {f for f, phase in phases.items() if phase == 0} == {"a/-/a-1.0.0.tgz"}
    assert {f for f, phase in phases.items() if phase == 1} == set(files[1:7])
    assert {f for f, phase in phases.items() if phase == 2} == set(files[7:])


def test_bucket_settings() -> None:
    assert website_configuration("npm") == {"IndexDocument": {"Suffix": "index.html"}, "ErrorDocument": {"Key": "npm/-/404.json"}}
    policy = json.loads(public_read_policy("bucket", "npm"))
    assert policy["Statement"] == [
        {"Sid": "RegistryGenPublicRead", "Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::bucket/npm/*"}
    ]


def test_tag_documents_only_for_tags_that_can_be_folders() -> None:
    versions = {"1.0.0": {"version": "1.0.0"}, "2.0.0-rc.1": {"version": "2.0.0-rc.1"}}
    packument = {
        "dist-tags": {"latest": "1.0.0", "next": "2.0.0-rc.1", "-": "1.0.0", "index.html": "1.0.0", "a/b": "1.0.0", "gone": "9.9.9"},
        "versions": versions,
    }
    assert tag_documents(packument) == {"latest": versions["1.0.0"], "next": versions["2.0.0-rc.1"]}


def test_api_paths_match_what_registry_gen_serve_routes() -> None:
    """nginx must send to the API exactly what `registry-gen serve` sends to it."""
    from user_api import server
    assert set(API_READ_PREFIXES) == set(server.DYNAMIC_GET_PREFIXES)
    assert set(USER_API_PREFIXES) == set(server.USER_APP_PREFIXES)
    assert all(server.is_user_app_path(path) for path in USER_API_EXACT)


def test_nginx_site_shape(tmp_path: Path) -> None:
    with_api = nginx_site(tmp_path, "127.0.0.1:8080", "127.0.0.1:4874")
    assert "server 127.0.0.1:4874;" in with_api and "error_page 418 = @registry_gen_api;" in with_api
    assert f'root "{tmp_path.resolve()}";' in with_api
    read_only = nginx_site(tmp_path, "8080")
    assert "upstream" not in read_only and "return 405;" in read_only and "proxy_pass" not in read_only
    with pytest.raises(ValueError, match="unsafe"):
        nginx_site(Path("/srv/a;b"), "8080")
    for bad in ({"listen": "80; include /etc/passwd"}, {"server_name": "a}"}, {"api_upstream": "127.0.0.1:1;"}):
        with pytest.raises(ValueError, match="unsafe"):
            nginx_site(tmp_path, **{"listen": "8080", **bad})
    with pytest.raises(ValueError, match="unsafe"):
        nginx_config(tmp_path, "8080", user="root; daemon off")


@pytest.mark.parametrize("api", [None, "127.0.0.1:4874"])
def test_nginx_accepts_both_configs(tmp_path: Path, api: str | None) -> None:
    """`nginx -t` on the standalone file, and on a stock-like nginx.conf including the site snippet."""
    (tmp_path / "public").mkdir()
    standalone = tmp_path / "standalone.conf"
    standalone.write_text(nginx_config(tmp_path / "public", "127.0.0.1:8080", api, user=None))
    checked = subprocess.run([NGINX, "-t", "-p", str(tmp_path), "-c", str(standalone)], capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stderr
    site = tmp_path / "registry.conf"
    assert registry_gen(["host-config", "nginx", "--tree", str(tmp_path / "public"), "--listen", "127.0.0.1:8080", "--out", str(site)]
                        + (["--api-upstream", api] if api else [])) == 0  # fmt: skip
    wrapper = tmp_path / "wrapper.conf"
    wrapper.write_text(f"pid nginx.pid;\nerror_log error.log;\nevents {{}}\nhttp {{\n    include {site};\n}}\n")
    checked = subprocess.run([NGINX, "-t", "-p", str(tmp_path), "-c", str(wrapper)], capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stderr


def test_cli_defaults(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert default_listen("http://127.0.0.1:4873/") == "127.0.0.1:4873"
    assert default_listen("https://npm.example.org/") == "80"
    config = tmp_path.parent / f"{tmp_path.name}-registry.yaml"
    config.write_text("base_url: http://127.0.0.1:5000/npm/\nlimits:\n  max_archive_bytes: 1048576\n")
    assert registry_gen(["host-config", "nginx", "--config", str(config), "--tree", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "listen 127.0.0.1:5000;" in captured.out and "client_max_body_size 3m;" in captured.out
    assert "has a path" in captured.err
    assert registry_gen(["host-config", "nginx", "--tree", str(tmp_path), "--listen", "80;x"]) == 1
    assert "unsafe listen" in capsys.readouterr().err
    (tmp_path / "left-pad/-").mkdir(parents=True)
    (tmp_path / "left-pad/index.html").write_text("{}")
    (tmp_path / "left-pad/-/left-pad-1.0.0.tgz").write_bytes(b"x")
    assert registry_gen(["host-config", "object-store", "--tree", str(tmp_path), "--config", str(config)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["key"] for line in lines] == ["left-pad/-/left-pad-1.0.0.tgz", "left-pad", "left-pad/index.html"]


def test_bucket_origin_is_checked_before_it_reaches_the_config(tmp_path: Path) -> None:
    from registry_gen.hosting import BucketOrigin, nginx_site

    site = nginx_site(tmp_path, "8080", "127.0.0.1:5000", bucket=BucketOrigin("https://s3.example.com", "reg", "p/_tree"))
    assert "proxy_pass https://registry_gen_bucket/reg/p/_tree$uri;" in site and "server s3.example.com:443;" in site
    assert 'proxy_set_header Authorization "";' in site and "try_files" not in site
    for bad in (BucketOrigin("ftp://s3.example.com", "reg", ""), BucketOrigin("http://h:1/path", "reg", ""),
                BucketOrigin("http://h:1", "reg", "p;evil"), BucketOrigin("http://h:1", "reg", "a b")):  # fmt: skip
        with pytest.raises(ValueError):
            nginx_site(tmp_path, "8080", "127.0.0.1:5000", bucket=bad)
    with pytest.raises(ValueError, match="proxied packages"):
        nginx_site(tmp_path, "8080", "127.0.0.1:5000", bucket=BucketOrigin("http://h:1", "reg", ""), proxied=[("^a$", True)])


def test_a_private_bucket_config_signs_every_read_and_leaves_the_public_one_alone(tmp_path: Path) -> None:
    """`--private-bucket`: every read asks the check, which hands the presigned paths nginx reads
    with; without it the bucket config names no signed URL; both pass `nginx -t`."""
    from registry_gen.hosting import BucketOrigin
    from registry_gen.nginx_access import ReadCheck

    origin = BucketOrigin("http://127.0.0.1:9000", "reg", "p/_tree")
    check = ReadCheck("read_cache", 10)
    public = nginx_config(tmp_path, "127.0.0.1:8080", "127.0.0.1:5000", bucket=origin)
    private = nginx_config(tmp_path, "127.0.0.1:8080", "127.0.0.1:5000", bucket=dataclasses.replace(origin, private=True), read_check=check)
    assert "signed" not in public and "auth_request" not in public and "proxy_pass http://registry_gen_bucket/reg/p/_tree$uri;" in public
    assert "auth_request_set $registry_gen_signed_file $upstream_http_x_registry_gen_signed_file;" in private
    assert "proxy_pass http://registry_gen_bucket$registry_gen_signed_document;" in private and "/reg/p/_tree" not in private
    assert 'proxy_cache_key "$registry_gen_read_path $registry_gen_document $remote_addr $http_authorization";' in private
    for name, text in (("public", public), ("private", private)):
        (tmp_path / f"{name}.conf").write_text(text)
        checked = subprocess.run([NGINX, "-t", "-p", str(tmp_path), "-c", str(tmp_path / f"{name}.conf")], capture_output=True, text=True, timeout=30)
        assert checked.returncode == 0, checked.stderr
    with pytest.raises(ValueError, match="private tree bucket"):
        nginx_config(tmp_path, "8080", "127.0.0.1:5000", bucket=dataclasses.replace(origin, private=True))


def test_private_bucket_options_are_checked(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "registry.yaml"
    config.write_text("storage: s3://reg/p\nstorage_endpoint_url: http://127.0.0.1:9000\ndatabase_url: postgresql://x@127.0.0.1/x\n")
    base = ["host-config", "nginx", "--config", str(config), "--tree", str(tmp_path), "--api-upstream", "127.0.0.1:5000"]
    assert registry_gen([*base, "--private-bucket"]) == 1
    assert "error: --private-bucket: the tree is read from a bucket only with --from-bucket" in capsys.readouterr().err
    assert registry_gen([*base, "--from-bucket", "--private-bucket", "--read-cache-seconds", "61"]) == 1
    assert "--read-cache-seconds 61" in capsys.readouterr().err
    assert registry_gen([*base, "--from-bucket", "--private-bucket"]) == 0
    assert "proxy_pass http://registry_gen_bucket$registry_gen_signed_file;" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("path", "document", "keys"),
    [
        ("/pkg", "index.html", ("pkg/index.html", "pkg/index.html", "pkg")),
        ("/pkg/", "abbreviated.json", ("pkg/abbreviated.json", "pkg/index.html", "pkg")),
        ("/pkg/latest", "abbreviated.json", ("pkg/latest/abbreviated.json", "pkg/latest/index.html", "pkg/latest")),  # a tag folder: full only
        ("/@scope/pkg/-/pkg-1.0.0.tgz", "index.html",
         ("@scope/pkg/-/pkg-1.0.0.tgz/index.html", "@scope/pkg/-/pkg-1.0.0.tgz/index.html", "@scope/pkg/-/pkg-1.0.0.tgz")),
        ("/-/web/", "abbreviated.json", ("-/web/index.html", "-/web/index.html", "-/web")),  # the site has no abbreviated page
        ("/pkg/../../canary.json", "index.html", None), ("/pkg/./x", "index.html", None), ("/pkg//x", "index.html", None),
        ("/pkg/.hidden", "index.html", None), ("/a b", "index.html", None), ("/a%2fb", "index.html", None), ("/a?x", "index.html", None),
        ("pkg", "index.html", None), ("/", "index.html", None), ("/pkg", "../secret", None), ("/pkg", "package.json", None),
    ],
)  # fmt: skip
def test_read_keys_are_exactly_the_keys_of_the_path(path: str, document: str, keys: tuple[str, str, str] | None) -> None:
    from registry_gen.objectstore import read_keys

    assert read_keys(path, document) == keys
