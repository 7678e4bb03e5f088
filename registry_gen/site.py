"""The HTML site: jinja2 pages rendered from site_template/ into `/-/web/` (pure rendering).

Every function here turns documents into {relative path: bytes}; build.py writes them. Links
between pages are relative (`../../package/x/index.html`), so the site works under any base
path, on hosts without index-file lookup and from a plain folder. Only the install commands
and the not-found page, which can be shown at any URL, use the configured base_url.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit


from registry_gen.errors import ConfigError
from registry_gen.manifest import keyword_list
from registry_gen.names import package_dir, split_name, tarball_path
from registry_gen.settings import Settings
from registry_gen.versions import sort_versions

if TYPE_CHECKING:  # jinja2 and the Markdown renderer load when a page is first rendered, not with every import of the build
    import jinja2
    from markupsafe import Markup

    from registry_gen.markdown import RepositoryFiles

WEB_ROOT = "-/web"
FRONT_PAGE = f"{WEB_ROOT}/index.html"
NOT_FOUND_PAGE = f"{WEB_ROOT}/404.html"
STATIC_FOLDER = "static"
PAGE_SIZE = 100
RECENT_COUNT = 8
# What the Code tab (static/code.js) reads in the browser: a tarball up to `tarball` bytes, inflated
# up to `unpacked` bytes, listing up to `entries` files, showing a text file up to `shown` bytes.
# Past them it says so and offers the download: the browser's memory and time stay bounded.
CODE_TAB_LIMITS = {"tarball": 20 * 1024 * 1024, "unpacked": 256 * 1024 * 1024, "entries": 20_000, "shown": 1024 * 1024}


def _default_template_dir() -> Path:
    """site_template/ of a checkout, else the copy a wheel installs inside this package."""
    here = Path(__file__).resolve().parent
    checkout = here.parent / "site_template"
    return checkout if checkout.is_dir() else here / "site_template"


DEFAULT_TEMPLATE_DIR = _default_template_dir()
# Cache-busting suffix of the static assets per template-folder set, refreshed by every build.
_asset_versions: dict[tuple[str, ...], str] = {}
# Dependency kinds shown on a package page, in this order, with their headings.
DEPENDENCY_KINDS = (
    ("dependencies", "Dependencies"),
    ("peerDependencies", "Peer dependencies"),
    ("optionalDependencies", "Optional dependencies"),
    ("devDependencies", "Development dependencies"),
)
_SHORTHAND_HOSTS = {"github": "https://github.com/", "gitlab": "https://gitlab.com/", "bitbucket": "https://bitbucket.org/"}
_SHORTHAND = re.compile(r"^(?:(github|gitlab|bitbucket):)?([\w.-]+/[\w.-]+)$")


# ---------------------------------------------------------------- templates


def template_dirs(settings: Settings) -> tuple[Path, ...]:
    """The user's template folder first (it may override any single file), then the defaults."""
    folders = [settings.template_dir] if settings.template_dir else []
    return tuple(dict.fromkeys([*folders, DEFAULT_TEMPLATE_DIR]))


def template_dir(settings: Settings) -> Path:
    return settings.template_dir or DEFAULT_TEMPLATE_DIR


def _template_files(settings: Settings) -> dict[str, Path]:
    """relative path -> the file that wins (user folder over defaults)."""
    if settings.template_dir is not None and not settings.template_dir.is_dir():
        raise ConfigError(f"template_dir {settings.template_dir} is not a folder")
    files: dict[str, Path] = {}
    for folder in reversed(template_dirs(settings)):
        if folder.is_dir():
            for path in sorted(folder.rglob("*")):
                if path.is_file() and not path.name.startswith("."):
                    files[path.relative_to(folder).as_posix()] = path
    return files


def template_fingerprint(settings: Settings) -> str:
    """Changes when any template or asset changes, so the whole site is re-rendered.

    Every build asks for it first, so it also refreshes the assets' cache-busting suffix.
    """
    digest = hashlib.sha256()
    for relative, path in sorted(_template_files(settings).items()):
        digest.update(relative.encode() + b"\0" + path.read_bytes() + b"\0")
    fingerprint = digest.hexdigest()
    _asset_versions[_folder_key(settings)] = fingerprint[:12]
    return fingerprint


def _folder_key(settings: Settings) -> tuple[str, ...]:
    return tuple(str(f) for f in template_dirs(settings))


def static_assets(settings: Settings) -> dict[str, bytes]:
    """`static/*` of the template folders, as tree paths under -/web/static/."""
    return {
        f"{WEB_ROOT}/{relative}": path.read_bytes()
        for relative, path in _template_files(settings).items()
        if relative.startswith(STATIC_FOLDER + "/")
    }


def format_time(stamp: Any) -> str:
    """ISO time -> `2024-01-02 03:04 UTC` (absolute, so pages stay byte-identical between builds)."""
    if not isinstance(stamp, str) or not stamp:
        return ""
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return stamp
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def format_size(count: Any) -> str:
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        return ""
    size = float(count)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return ""


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def short_url(url: Any) -> str:
    """`https://example.org/x/` -> `example.org/x` for display; the link keeps the full URL."""
    text = str(url or "")
    for prefix in ("https://", "http://"):
        text = text.removeprefix(prefix)
    return text.rstrip("/")


@lru_cache(maxsize=4)
def _environment(folders: tuple[str, ...], fingerprint: str) -> jinja2.Environment:
    """One environment per template set: a file added to the override folder must win at once,
    which jinja's own reload check (per already-loaded file) would miss."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader([jinja2.FileSystemLoader(f) for f in folders]),
        autoescape=jinja2.select_autoescape(default=True, default_for_string=True),
        # Package data is whatever publishers wrote: a missing optional field (a maintainer without
        # an email, say) renders as nothing instead of failing the package's page.
        undefined=jinja2.ChainableUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        auto_reload=False,  # an edited template changes the fingerprint, hence the environment: no stat per render
    )
    env.filters["when"] = format_time
    env.filters["filesize"] = format_size
    env.filters["shorturl"] = short_url
    return env


def _render(settings: Settings, template: str, **context: Any) -> bytes:
    folders = _folder_key(settings)
    if folders not in _asset_versions:
        template_fingerprint(settings)
    env = _environment(folders, _asset_versions[folders])
    import jinja2

    try:
        html = env.get_template(template).render(
            settings=settings,
            site_title=settings.site_title,
            asset_version=_asset_versions[folders],
            registry_origin=origin_of(settings.base_url),
            **context,
        )
    except jinja2.TemplateNotFound as exc:
        raise ConfigError(f"template {exc.name} not found in {', '.join(folders)}") from exc
    except jinja2.TemplateSyntaxError as exc:
        raise ConfigError(f"template {exc.filename or exc.name}, line {exc.lineno}: {exc.message}") from exc
    except jinja2.TemplateError as exc:
        raise ConfigError(f"template {template}: {exc}") from exc
    return html.encode("utf-8")


# ---------------------------------------------------------------- paths


BROWSE_ROOT = f"{WEB_ROOT}/browse"  # front-page listing by name range: -/web/browse/<key>/
SEARCH_SHARD_ROOT = f"{WEB_ROOT}/search"  # client-side search by token prefix: -/web/search/<key>.json
_NOT_KEY_CHARACTER = re.compile(r"[^a-z0-9]")


def name_key(name: str) -> str:
    """A name as the browse pages sort and split it: a scope's `@` skipped, lower-cased, anything
    but a-z0-9 as `-`, at least two characters."""
    return _NOT_KEY_CHARACTER.sub("-", name.lstrip("@").lower()).ljust(2, "-")


def browse_key(name: str) -> str:
    """The name range a package is listed under on the front page: its key's first two characters."""
    return name_key(name)[:2]


def search_shard_path(key: str) -> str:
    return f"{SEARCH_SHARD_ROOT}/{key}.json"


def search_leaf_id(bound: str) -> str:
    """The file name of a shard's leaf (`bound`: the first name it may hold): a digest, since
    names may hold `@`, `/` and any letter."""
    return hashlib.blake2s(bound.encode(), digest_size=6).hexdigest()


def search_leaf_path(key: str, bound: str) -> str:
    """A leaf of a shard that has outgrown one file: -/web/search/<key>/<id>.json."""
    return f"{SEARCH_SHARD_ROOT}/{key}/{search_leaf_id(bound)}.json"


def browse_folder(prefix: str) -> str:
    """Where the page of names starting with `prefix` lives: a folder per character after the
    first two (-/web/browse/sy/n/-/), so a range's sub-ranges are its subfolders."""
    return f"{BROWSE_ROOT}/{prefix[:2]}" + "".join(f"/{c}" for c in prefix[2:])


DOWNLOADS_FILE = "downloads.json"  # beside a package's page: its download counts (registry-gen stats)


def package_folder(name: str) -> str:
    return f"{WEB_ROOT}/package/{package_dir(name)}"


def package_page_path(name: str) -> str:
    return f"{package_folder(name)}/index.html"


def browse_page_path(prefix: str) -> str:
    return f"{browse_folder(prefix)}/index.html"


def relative_root(page_path: str) -> str:
    """From a page under -/web/ back up to -/web/ itself, as `../` steps."""
    inside = page_path[len(WEB_ROOT) + 1 :]
    return "../" * inside.count("/")


def page_href(root: str, name: str) -> str:
    return f"{root}package/{quote(package_dir(name), safe='/@')}/index.html"


# ---------------------------------------------------------------- links


def http_url(value: Any) -> str | None:
    """`value` if it is an absolute http(s) URL, else None (so javascript: and friends never link)."""
    if not isinstance(value, str):
        return None
    url = value.strip()
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc or any(c in url for c in "\"'<>` \t\r\n"):
        return None
    return url


def repository_url(value: Any) -> str | None:
    """A browsable http(s) URL for package.json's `repository` (object, URL or shorthand)."""
    url = value.get("url") if isinstance(value, Mapping) else value
    if not isinstance(url, str):
        return None
    url = url.strip()
    shorthand = _SHORTHAND.match(url)
    if shorthand:
        return _SHORTHAND_HOSTS[shorthand.group(1) or "github"] + shorthand.group(2).removesuffix(".git")
    if url.startswith("git+"):
        url = url[4:]
    found = http_url(url)
    return found.removesuffix(".git") if found else None


def repository_text(value: Any) -> str:
    url = value.get("url") if isinstance(value, Mapping) else value
    return url.strip() if isinstance(url, str) else ""


def bugs_url(value: Any) -> str | None:
    return http_url(value.get("url") if isinstance(value, Mapping) else value)


def license_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("type"), str):
        return value["type"]
    return ""


def person_text(value: Any) -> str:
    if isinstance(value, Mapping) and isinstance(value.get("name"), str):
        return value["name"]
    if isinstance(value, str):
        return value.split("<")[0].split("(")[0].strip()
    return ""


def latest_manifest(packument: Mapping[str, Any]) -> Mapping[str, Any]:
    latest = packument.get("dist-tags", {}).get("latest")
    return packument.get("versions", {}).get(latest, {})


def linked_names(packument: Mapping[str, Any]) -> list[str]:
    """Every dependency name the package page may link to: the page changes when one appears or goes."""
    latest = latest_manifest(packument)
    names: set[str] = set()
    for kind, _ in DEPENDENCY_KINDS:
        deps = latest.get(kind)
        if isinstance(deps, Mapping):
            names.update(k for k in deps if isinstance(k, str))
    return sorted(names)


# ---------------------------------------------------------------- package page


@dataclass(frozen=True)
class Dependency:
    name: str
    range: str
    href: str | None


@dataclass(frozen=True)
class VersionExtras:
    """What a version's pages need from its archive beyond the manifest (from the build's cache)."""

    readme: str | None = None
    readme_filename: str | None = None
    files: tuple[tuple[str, int], ...] | None = None  # (path, size) by path; None: not known


ExtrasLoader = Callable[[str], VersionExtras]  # version -> its extras, asked only for pages rendered


@dataclass
class PackageSite:
    """A package's pages: those rendered now, those whose inputs did not change (kept as they are
    on disk), and the input key of every version's pages for the next build to compare."""

    pages: dict[str, bytes]
    kept: list[str]
    keys: dict[str, str]


def _dependencies(latest: Mapping[str, Any], root: str, registry_names: Container[str]) -> list[tuple[str, list[Dependency]]]:
    groups = []
    for kind, title in DEPENDENCY_KINDS:
        deps = latest.get(kind)
        if not isinstance(deps, Mapping) or not deps:
            continue
        entries = [
            Dependency(str(name), str(spec), page_href(root, name) if name in registry_names else None)
            for name, spec in sorted(deps.items())
        ]
        groups.append((title, entries))
    return groups


def version_folder(name: str, version: str) -> str:
    return f"{package_folder(name)}/v/{version}"


def version_page_path(name: str, version: str) -> str:
    return f"{version_folder(name, version)}/index.html"


def version_href(root: str, name: str, version: str) -> str:
    return f"{root}package/{quote(package_dir(name), safe='/@')}/v/{quote(version, safe='')}/index.html"


def bin_commands(manifest: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The commands installing the package puts on PATH, with the file each runs (npm's rules:
    a string `bin` is named after the package, without its scope)."""
    declared = manifest.get("bin")
    if isinstance(declared, str) and declared.strip() and isinstance(manifest.get("name"), str):
        return [(split_name(manifest["name"])[1], declared)]
    if isinstance(declared, Mapping):
        return sorted((str(k), v) for k, v in declared.items() if isinstance(v, str) and str(k).strip())
    return []


def engines(manifest: Mapping[str, Any]) -> list[tuple[str, str]]:
    declared = manifest.get("engines")
    if not isinstance(declared, Mapping):
        return []
    return sorted((str(k), v) for k, v in declared.items() if isinstance(v, str))


def types_package(name: str) -> str:
    """The DefinitelyTyped package of `name`: `@types/x`, `@types/scope__x` for `@scope/x`."""
    scope, bare = split_name(name)
    return f"@types/{scope[1:]}__{bare}" if scope else f"@types/{bare}"


def _declaration_candidates(manifest: Mapping[str, Any]) -> set[str]:
    """Where TypeScript looks for types when package.json names none: index.d.ts, next to main."""
    found = {"index.d.ts"}
    main = manifest.get("main")
    if isinstance(main, str) and main.strip():
        path = posixpath.normpath(main.strip()).lstrip("/")
        stem = re.sub(r"\.(c|m)?js$", "", path)
        found.update({f"{stem}.d.ts", f"{path}/index.d.ts"})
    return found


def types_badge(
    manifest: Mapping[str, Any], files: Sequence[tuple[str, int]] | None, root: str, registry_names: Container[str]
) -> dict[str, Any] | None:
    """How the package is typed: its own declarations (`types`/`typings`, or a bundled .d.ts where
    TypeScript finds it), else a DefinitelyTyped package present in this registry, else None."""
    for field_name in ("types", "typings"):
        value = manifest.get(field_name)
        if isinstance(value, str) and value.strip():
            return {"kind": "bundled", "title": f"Bundled TypeScript declarations ({value.strip()})"}
    if files and _declaration_candidates(manifest) & {path for path, _ in files}:
        return {"kind": "bundled", "title": "Bundled TypeScript declarations"}
    typed = types_package(str(manifest.get("name", "")))
    if typed in registry_names:
        return {"kind": "definitely-typed", "title": f"Types in {typed}", "name": typed, "href": page_href(root, typed)}
    return None


def _tags_by_version(packument: Mapping[str, Any]) -> dict[str, list[str]]:
    tags: dict[str, list[str]] = {}
    for tag, version in sorted(packument.get("dist-tags", {}).items()):
        tags.setdefault(version, []).append(tag)
    return tags


def has_pages(packument: Mapping[str, Any], version: str, tarball_sizes: Mapping[str, int]) -> bool:
    """Whether a version has its own pages: every version does, but in a mirrored package only
    those whose tarball this registry holds (their files are known; the rest are fetched from
    the upstream when first asked for)."""
    return "_mirror" not in packument or version in tarball_sizes


def mirror_context(packument: Mapping[str, Any]) -> dict[str, Any] | None:
    """Where a mirrored package comes from, when it was last refreshed, and the versions the
    registry's policy holds back with the reason for each (none of them is in the document)."""
    marker = packument.get("_mirror")
    if not isinstance(marker, Mapping):
        return None
    held = marker.get("held") if isinstance(marker.get("held"), Mapping) else {}
    return {
        "uplink": str(marker.get("uplink", "")),
        "url": http_url(marker.get("url")),
        "refreshed": str(marker.get("refreshed", "")),
        "held": [(version, str(reason)) for version, reason in held.items()],
    }


def _versions(packument: Mapping[str, Any], root: str, tree_root: str, tarball_sizes: Mapping[str, int]) -> list[dict[str, Any]]:
    tags_by_version = _tags_by_version(packument)
    times = packument.get("time", {})
    rows = []
    for version in reversed(sort_versions(packument.get("versions", {}))):
        doc = packument["versions"][version]
        dist = doc.get("dist", {})
        rows.append(
            {
                "version": version,
                "href": version_href(root, packument["name"], version) if has_pages(packument, version, tarball_sizes) else None,
                "tags": tags_by_version.get(version, []),
                "time": times.get(version, ""),
                "deprecated": doc.get("deprecated") if isinstance(doc.get("deprecated"), str) else None,
                "unpacked_size": dist.get("unpackedSize"),
                "file_count": dist.get("fileCount"),
                "tarball_size": tarball_sizes.get(version),
                "integrity": dist.get("integrity", ""),
                "shasum": dist.get("shasum", ""),
                "tarball_href": tree_root + quote(tarball_path(packument["name"], version), safe="/@"),
            }
        )
    return rows


def code_tab(version: str, tarball_href: str, tarball_size: int | None) -> dict[str, Any]:
    """What the Code tab of a page needs: which tarball it reads (relative, so from this tree), its
    size when known (a tarball past the cap is refused without a request) and the caps."""
    return {"version": version, "tarball_href": tarball_href, "tarball_size": tarball_size, "limits": CODE_TAB_LIMITS}


def install_commands(name: str, base_url: str) -> list[tuple[str, str]]:
    return [
        ("npm", f"npm install {name} --registry={base_url}"),
        ("pnpm", f"pnpm add {name} --registry={base_url}"),
        ("yarn", f"yarn add {name} --registry={base_url}"),
    ]


def npmrc_line(name: str, base_url: str) -> str:
    """What to put in .npmrc so plain `npm install <name>` finds this registry."""
    scope, _ = split_name(name)
    return f"{scope}:registry={base_url}" if scope else f"registry={base_url}"


def readme_files(source: Mapping[str, Any]) -> RepositoryFiles | None:
    """Where the README's relative URLs point, from `repository` (URL and `directory`)."""
    repository = source.get("repository")
    directory = repository.get("directory") if isinstance(repository, Mapping) else None
    from registry_gen.markdown import repository_files

    return repository_files(repository_url(repository), directory)


def readme_html(readme: str | None, filename: str | None, source: Mapping[str, Any]) -> Markup:
    """The README as safe HTML (the Markdown renderer loads with the first page rendered)."""
    from registry_gen.markdown import render_readme

    return render_readme(readme, filename, readme_files(source))


def _common_context(packument: Mapping[str, Any], settings: Settings, root: str) -> dict[str, Any]:
    name = packument["name"]
    return {
        "pkg": packument,
        "name": name,
        "root": root,
        "package_href": page_href(root, name),
        "description": packument.get("description") if isinstance(packument.get("description"), str) else "",
        "latest_version": packument.get("dist-tags", {}).get("latest", ""),
        "npmrc": npmrc_line(name, settings.base_url),
        "document_href": root + "../../" + quote(package_dir(name), safe="/@") + "/index.html",
    }


def package_context(
    packument: Mapping[str, Any],
    settings: Settings,
    *,
    registry_names: Container[str],
    tarball_sizes: Mapping[str, int],
    dependents: Sequence[str] = (),
    latest_files: Sequence[tuple[str, int]] | None = None,
) -> dict[str, Any]:
    """Everything package.html needs, computed once here so templates stay simple to restyle.
    Like every static page it names other packages only when anyone may read them."""
    name = packument["name"]
    registry_names = settings.packages.public_only(registry_names)
    root = relative_root(package_page_path(name))
    latest = latest_manifest(packument)
    versions = _versions(packument, root, root + "../../", tarball_sizes)
    latest_version = packument.get("dist-tags", {}).get("latest", "")
    latest_row = next((row for row in versions if row["version"] == latest_version), None)
    keywords = keyword_list(packument.get("keywords"))
    return {
        **_common_context(packument, settings, root),
        "latest": latest_row,
        "deprecated": latest_row["deprecated"] if latest_row else None,
        "dist_tags": [(tag, version, version_href(root, name, version)) for tag, version in sorted(packument.get("dist-tags", {}).items())],
        "install": install_commands(name, settings.base_url),
        "readme": readme_html(packument.get("readme"), packument.get("readmeFilename"), packument),
        "versions": versions,
        "dependency_groups": _dependencies(latest, root, registry_names),
        "dependents": [(n, page_href(root, n)) for n in sorted(dependents) if settings.packages.is_public(n)],
        "bin": bin_commands(latest),
        "engines": engines(latest),
        "types": types_badge(latest, latest_files, root, registry_names) if latest else None,
        "code": code_tab(latest_version, latest_row["tarball_href"], latest_row["tarball_size"]) if latest_row else None,
        "keywords": [(k, f"{root}index.html?q={quote(k, safe='')}") for k in keywords],
        "license": license_text(packument.get("license")),
        "homepage": http_url(packument.get("homepage")),
        "homepage_text": packument.get("homepage") if isinstance(packument.get("homepage"), str) else "",
        "repository": repository_url(packument.get("repository")),
        "repository_text": repository_text(packument.get("repository")),
        "bugs": bugs_url(packument.get("bugs")),
        "author": person_text(packument.get("author")),
        "maintainers": [m for m in packument.get("maintainers", []) if isinstance(m, Mapping) and m.get("name")],
        "created": packument.get("time", {}).get("created", ""),
        "modified": packument.get("time", {}).get("modified", ""),
        "mirror": mirror_context(packument),
    }


def version_context(
    packument: Mapping[str, Any],
    version: str,
    settings: Settings,
    extras: VersionExtras,
    *,
    registry_names: Container[str],
    tarball_size: int | None,
    page_path: str,
) -> dict[str, Any]:
    """What version.html needs for one version (its own README, manifest, files)."""
    name = packument["name"]
    registry_names = settings.packages.public_only(registry_names)
    root = relative_root(page_path)
    manifest = packument["versions"][version]
    dist = manifest.get("dist", {})
    files = list(extras.files) if extras.files is not None else None
    tarball_href = root + "../../" + quote(tarball_path(name, version), safe="/@")
    return {
        **_common_context(packument, settings, root),
        "version": version,
        "tags": _tags_by_version(packument).get(version, []),
        "time": packument.get("time", {}).get(version, ""),
        "deprecated": manifest.get("deprecated") if isinstance(manifest.get("deprecated"), str) else None,
        "version_description": manifest.get("description") if isinstance(manifest.get("description"), str) else "",
        "install": install_commands(f"{name}@{version}", settings.base_url),
        "readme": readme_html(extras.readme, extras.readme_filename, manifest),
        "dependency_groups": _dependencies(manifest, root, registry_names),
        "bin": bin_commands(manifest),
        "engines": engines(manifest),
        "types": types_badge(manifest, files, root, registry_names),
        "license": license_text(manifest.get("license")),
        "unpacked_size": dist.get("unpackedSize"),
        "file_count": dist.get("fileCount"),
        "tarball_size": tarball_size,
        "integrity": dist.get("integrity", ""),
        "shasum": dist.get("shasum", ""),
        "tarball_href": tarball_href,
        "code": code_tab(version, tarball_href, tarball_size),
    }


def version_page_key(
    packument: Mapping[str, Any], version: str, settings: Settings, registry_names: Container[str], tarball_size: int | None
) -> str:
    """Changes whenever a version's pages would: its manifest (whose shasum fixes README and
    files), tags, time, size, which of its dependencies are here, the settings and templates."""
    described, folders = _settings_key(settings)
    if folders not in _asset_versions:
        template_fingerprint(settings)
    registry_names = settings.packages.public_only(registry_names)  # as version_context links them
    manifest = packument["versions"][version]
    linked = sorted(n for kind, _ in DEPENDENCY_KINDS if isinstance(manifest.get(kind), Mapping) for n in manifest[kind] if n in registry_names)
    typed = types_package(packument["name"]) in registry_names
    inputs = [
        described, folders, _asset_versions[folders], packument["name"], version, manifest,
        _tags_by_version(packument).get(version, []), packument.get("time", {}).get(version, ""), tarball_size, linked, typed,
    ]
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()


_settings_keys: dict[int, tuple[Settings, str, tuple[str, ...]]] = {}


def _settings_key(settings: Settings) -> tuple[str, tuple[str, ...]]:
    """repr(settings) and its template folders, once per Settings object: every version of a
    package has its page key computed in each build of it (the repr alone took ~40 µs)."""
    held = _settings_keys.get(id(settings))
    if held is None or held[0] is not settings:
        _settings_keys.clear()  # a process builds with one Settings at a time
        held = _settings_keys[id(settings)] = (settings, repr(settings), _folder_key(settings))
    return held[1], held[2]


def version_pages(
    packument: Mapping[str, Any],
    version: str,
    settings: Settings,
    extras: VersionExtras,
    *,
    registry_names: Container[str],
    tarball_size: int | None,
) -> dict[str, bytes]:
    """One version's page (its files are the page's Code tab, read from the tarball in the browser)."""
    path = version_page_path(packument["name"], version)
    context = version_context(packument, version, settings, extras, registry_names=registry_names, tarball_size=tarball_size, page_path=path)
    return {path: _render(settings, "version.html", **context)}


def package_page(
    packument: Mapping[str, Any],
    settings: Settings,
    *,
    registry_names: Container[str],
    tarball_sizes: Mapping[str, int],
    dependents: Sequence[str] = (),
    latest_files: Sequence[tuple[str, int]] | None = None,
) -> dict[str, bytes]:
    """The package's own page (latest README, versions, dependencies and dependents)."""
    context = package_context(
        packument, settings, registry_names=registry_names, tarball_sizes=tarball_sizes, dependents=dependents, latest_files=latest_files
    )
    return {package_page_path(packument["name"]): _render(settings, "package.html", **context)}


def render_package_site(
    packument: Mapping[str, Any],
    settings: Settings,
    *,
    registry_names: Container[str] = frozenset(),
    tarball_sizes: Mapping[str, int] | None = None,
    dependents: Sequence[str] = (),
    extras: ExtrasLoader | None = None,
    previous_keys: Mapping[str, str] | None = None,
) -> PackageSite:
    """The package page and every version's pages. A version whose key is in `previous_keys`
    (its pages are on disk, rendered from the same inputs) is not rendered again, nor its extras read."""
    sizes = tarball_sizes or {}
    load = extras or (lambda version: VersionExtras())
    previous = previous_keys or {}
    name = packument["name"]
    latest_version = packument.get("dist-tags", {}).get("latest")
    own_pages = [v for v in sort_versions(packument.get("versions", {})) if has_pages(packument, v, sizes)]
    latest_extras = load(latest_version) if latest_version in own_pages else VersionExtras()
    main = package_page(
        packument, settings, registry_names=registry_names, tarball_sizes=sizes, dependents=dependents, latest_files=latest_extras.files
    )
    result = PackageSite(main, [], {})
    for version in own_pages:
        key = version_page_key(packument, version, settings, registry_names, sizes.get(version))
        result.keys[version] = key
        if previous.get(version) == key:
            result.kept.append(version_page_path(name, version))
            continue
        found = latest_extras if version == latest_version else load(version)
        result.pages.update(
            version_pages(packument, version, settings, found, registry_names=registry_names, tarball_size=sizes.get(version))
        )
    return result


def package_pages(
    packument: Mapping[str, Any],
    settings: Settings,
    *,
    registry_names: Container[str] | None = None,
    tarball_sizes: Mapping[str, int] | None = None,
    dependents: Sequence[str] = (),
    extras: ExtrasLoader | None = None,
) -> dict[str, bytes]:
    """Every page of the package, rendered. Dependencies link only to names in `registry_names`."""
    return render_package_site(
        packument, settings, registry_names=registry_names or frozenset(), tarball_sizes=tarball_sizes,
        dependents=dependents, extras=extras,
    ).pages


# ---------------------------------------------------------------- front page, name ranges, search shards
#
# A change rewrites a bounded number of these files, each of bounded size: the front page (recent
# packages, the total, one link per name range), the pages of the changed package's range, and the
# search shards of its words (see browse_key above and site_search.search_keys).


def web_href(root: str, path: str) -> str:
    """A tree path under -/web/ as a link from a page whose way back up to -/web/ is `root`."""
    return root + path[len(WEB_ROOT) + 1 :]


def search_entries(summaries: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """What the search box filters on and shows: one small record per package."""
    return [
        {
            "name": s["name"],
            "description": s.get("description") or "",
            "keywords": s.get("keywords") or [],
            "maintainers": [m.get("name", "") for m in s.get("maintainers", []) if isinstance(m, Mapping)],
            "version": s.get("version") or "",
            "modified": s.get("modified") or "",
        }
        for s in summaries
    ]


def search_shard(summaries: Sequence[Mapping[str, Any]]) -> bytes:
    """One search shard (`search_shard_path(key)`): its packages' records by name, compact JSON,
    the same bytes for the same members whatever order they come in."""
    return join_search_shard([search_entry(s) for s in sorted(summaries, key=lambda s: s["name"])])


def search_entry(summary: Mapping[str, Any]) -> bytes:
    """One package's record in the shards, serialised once when the package changes (the build
    keeps it in its state) so that writing a shard is a join, not a parse and a dump."""
    (entry,) = search_entries([summary])
    return json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode()


def join_search_shard(entries: Sequence[bytes]) -> bytes:
    """The shard of `entries` (already by name): the same bytes as dumping their list."""
    return b'{"packages":[' + b",".join(entries) + b"]}"


def search_shard_index(bounds: Sequence[str]) -> bytes:
    """A shard cut into leaves (more packages share its words than one file should hold): the
    ids of its leaves, in name order, which the search box fetches and joins. A shard of one leaf
    is that leaf's records instead (`join_search_shard`): one fetch, as most shards are."""
    return json.dumps({"leaves": [search_leaf_id(bound) for bound in bounds]}, separators=(",", ":")).encode()


def _row(summary: Mapping[str, Any], root: str) -> dict[str, Any]:
    return {**summary, "href": page_href(root, summary["name"])}


def range_groups(ranges: Sequence[tuple[str, int]], root: str) -> list[tuple[str, list[dict[str, Any]]]]:
    """The name ranges by their first character, each with its package count and link."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for key, count in ranges:
        href = web_href(root, browse_page_path(key))
        groups.setdefault(key[0], []).append({"key": key, "count": count, "href": href})
    return list(groups.items())


def front_page(recent: Sequence[Mapping[str, Any]], total: int, ranges: Sequence[tuple[str, int]], settings: Settings) -> dict[str, bytes]:
    """-/web/index.html: the search box, the `recent` packages (newest first, as given), the
    total and every name range with its count. Its size does not grow with the registry's."""
    root = relative_root(FRONT_PAGE)
    page = _render(
        settings,
        "index.html",
        root=root,
        recent=[_row(s, root) for s in recent[:RECENT_COUNT]],
        total=total,
        range_groups=range_groups(ranges, root),
        search_root=web_href(root, SEARCH_SHARD_ROOT) + "/",
    )
    return {FRONT_PAGE: page}


def browse_page(
    prefix: str, total: int, packages: Sequence[Mapping[str, Any]], children: Sequence[tuple[str, int]], settings: Settings
) -> dict[str, bytes]:
    """The page of names starting with `prefix` (`total` of them). A range of at most PAGE_SIZE
    lists its packages; a bigger one lists its sub-ranges (`children`: one more character, with
    counts) and only the packages whose key is the prefix itself. Either way at most PAGE_SIZE
    rows plus 37 links, so the page stays small however many packages share a prefix."""
    path = browse_page_path(prefix)
    root = relative_root(path)
    crumbs = [{"key": prefix[:n], "href": web_href(root, browse_page_path(prefix[:n]))} for n in range(2, len(prefix))]
    page = _render(
        settings,
        "browse.html",
        root=root,
        key=prefix,
        total=total,
        crumbs=crumbs,
        packages=[_row(s, root) for s in packages],
        children=[{"key": k, "count": c, "href": web_href(root, browse_page_path(k))} for k, c in children],
    )
    return {path: page}


def site_assets(settings: Settings) -> dict[str, bytes]:
    """What does not depend on the packages: the not-found page and the static assets."""
    files = {NOT_FOUND_PAGE: _render(settings, "404.html", root=settings.base_url + WEB_ROOT + "/")}
    files.update(static_assets(settings))
    return files
