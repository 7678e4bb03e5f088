"""The demo registry in content/: small packages this project writes itself, byte for byte.

    python -m tests.demo_packages content      # (re)write the demo archives into content/

Every archive is deterministic (sorted entries, fixed mtimes and owners, gzip without a name or
a time), so regenerating gives the bytes that are committed, and a test proves it. Each package
shows one thing the registry must carry; see DEMO_PACKAGES.

Every package but the imperfect one has a `registry-meta.json` that records old publish times:
builds of a fresh checkout are then byte-identical (no time falls back to a file's mtime), and
pnpm's minimum-release-age check never sees a demo version as "just published".
"""

from __future__ import annotations

import io
import json
import sys
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from registry_gen.archive import build_npm_tarball

# Zip entries need a DOS date; npm's own fixed tarball mtime keeps the two kinds alike.
ZIP_DATE_TIME = (1985, 10, 26, 8, 15, 0)
SCOPE = "@demo"
IMPERFECT_NAME = "demo-imperfect-js"
LIFECYCLE_LOG = "demo-lifecycle.log"  # written by demo-lifecycle's scripts into $INIT_CWD

# name -> what the package demonstrates (printed by `python -m tests.demo_packages --list`).
DEMO_PACKAGES: dict[str, str] = {
    "demo-core": "several versions (1.0.0, 1.1.0, 1.2.0) and a prerelease (2.0.0-beta.1, dist-tag next); "
    "old publish times in registry-meta.json",
    "@demo/strings": "a scoped package (lib/ main), a dependency of demo-greeter",
    "demo-greeter": "bin command demo-greet; depends on demo-core ^1.1.0 and @demo/strings ^1.0.0; a test script; "
    "the spec's bin/ lib/ doc/ test/ layout",
    "demo-lifecycle": "preinstall, install, postinstall, uninstall and test scripts that append to "
    f"$INIT_CWD/{LIFECYCLE_LOG} and print",
    "demo-zipped": "a .zip archive (package.json at the zip's root), repacked by the build",
    "demo-nomain": "no main field: require() falls back to index.js",
    IMPERFECT_NAME: "a descriptor that breaks the specification's lint rules but still builds and installs",
}

_MAINTAINER = {"name": "Demo Maintainer", "email": "maintainer@example.org", "web": "https://example.org/maintainer"}
_CONTRIBUTOR = {"name": "Demo Author", "email": "author@example.org", "web": "https://example.org/author"}


def _spec_complete(name: str, version: str, description: str, keywords: list[str], **fields: Any) -> dict[str, Any]:
    """A descriptor with every field the specification requires, so `registry-gen check` is clean."""
    slug = name.replace("@", "").replace("/", "-")
    manifest: dict[str, Any] = {
        "name": name,
        "version": version,
        "description": description,
        "keywords": keywords,
        "maintainers": [_MAINTAINER],
        "contributors": [_CONTRIBUTOR],
        "author": {"name": _CONTRIBUTOR["name"], "email": _CONTRIBUTOR["email"]},
        "bugs": {"url": f"https://example.org/demo/{slug}/issues"},
        "homepage": f"https://example.org/demo/{slug}",
        "license": "MIT",
        "licenses": [{"type": "MIT", "url": "https://opensource.org/licenses/MIT"}],
        "repository": {"type": "git", "url": f"https://example.org/demo/{slug}.git"},
        "dependencies": {},
    }
    manifest.update(fields)
    return manifest


def _readme(name: str, body: str) -> str:
    return f"# {name}\n\n{body}\n\nPart of the registry-gen demo registry.\n"


def _files(
    manifest: Mapping[str, Any], files: Mapping[str, str], executables: Sequence[str] = ()
) -> list[tuple[str, int, bytes]]:
    entries = [("package.json", 0o644, (json.dumps(manifest, indent=2) + "\n").encode())]
    for path, text in files.items():
        entries.append((path, 0o755 if path in executables else 0o644, text.encode()))
    return entries


def npm_tarball(manifest: Mapping[str, Any], files: Mapping[str, str], executables: Sequence[str] = ()) -> bytes:
    """A deterministic npm tarball (package/ prefix) of package.json plus `files`."""
    return build_npm_tarball(_files(manifest, files, executables))


def deterministic_zip(manifest: Mapping[str, Any], files: Mapping[str, str], *, top: str = "") -> bytes:
    """A zip with package.json at its root (or under `top`), fixed dates and modes, sorted entries."""
    entries = sorted(_files(manifest, files), key=lambda e: e[0])
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, mode, data in entries:
            info = zipfile.ZipInfo(top + path, date_time=ZIP_DATE_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3  # unix, so external_attr carries the mode
            info.external_attr = (0o100000 | mode) << 16
            archive.writestr(info, data)
    return buffer.getvalue()


def _meta(name: str, times: Mapping[str, str], **fields: Any) -> bytes:
    data: dict[str, Any] = {"name": name, **fields, "time": dict(sorted(times.items()))}
    return (json.dumps(data, indent=2) + "\n").encode()


# ---------------------------------------------------------------- the packages


def _core_files(version: str) -> dict[str, str]:
    return {
        "README.md": _readme(
            "demo-core", "Tiny text helpers. Several versions and a prerelease live in the demo registry."
        ),
        "lib/core.js": (
            f"exports.version = {json.dumps(version)};\n"
            "exports.shout = function shout(text) {\n"
            "  return String(text).toUpperCase() + '!';\n"
            "};\n"
        ),
    }


DEMO_CORE_TIMES = {
    "1.0.0": "2020-01-15T10:00:00.000Z",
    "1.1.0": "2020-06-01T10:00:00.000Z",
    "1.2.0": "2021-03-10T10:00:00.000Z",
    "2.0.0-beta.1": "2021-09-20T10:00:00.000Z",
}


def demo_core() -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for version in DEMO_CORE_TIMES:
        manifest = _spec_complete(
            "demo-core", version, "Tiny text helpers for the demo registry", ["demo", "text"], main="lib/core.js"
        )
        files[f"demo-core/demo-core-{version}.tgz"] = npm_tarball(manifest, _core_files(version))
    files["demo-core/registry-meta.json"] = _meta(
        "demo-core",
        DEMO_CORE_TIMES,
        **{"dist-tags": {"next": "2.0.0-beta.1"}, "maintainers": [{"name": "demo", "email": "maintainer@example.org"}]},
    )
    return files


def demo_strings() -> dict[str, bytes]:
    name = f"{SCOPE}/strings"
    manifest = _spec_complete(
        name, "1.0.0", "Scoped string helpers for the demo registry", ["demo", "scoped"], main="lib/strings.js"
    )
    tarball = npm_tarball(
        manifest,
        {
            "README.md": _readme(name, "A scoped package: its folder in the tree is `@demo/strings/`."),
            "lib/strings.js": (
                "exports.capitalize = function capitalize(text) {\n"
                "  text = String(text);\n"
                "  return text.charAt(0).toUpperCase() + text.slice(1);\n"
                "};\n"
            ),
        },
    )
    return {
        "@demo/strings/demo-strings-1.0.0.tgz": tarball,
        "@demo/strings/registry-meta.json": _meta(name, {"1.0.0": "2021-04-01T10:00:00.000Z"}),
    }


def demo_greeter() -> dict[str, bytes]:
    manifest = _spec_complete(
        "demo-greeter",
        "1.0.0",
        "Greets from the command line; depends on two other demo packages",
        ["demo", "cli", "greeting"],
        main="lib/greeter.js",
        bin={"demo-greet": "bin/demo-greet.js"},
        directories={"lib": "lib", "bin": "bin", "doc": "doc", "test": "test"},
        dependencies={"@demo/strings": "^1.0.0", "demo-core": "^1.1.0"},
        scripts={"test": "node test/greeter.test.js"},
    )
    tarball = npm_tarball(
        manifest,
        {
            "README.md": _readme("demo-greeter", "Run `demo-greet NAME` after `npm install -g demo-greeter`."),
            "bin/demo-greet.js": (
                "#!/usr/bin/env node\n"
                "'use strict';\n"
                "const { greet } = require('../lib/greeter.js');\n"
                "console.log(greet(process.argv[2] || 'world'));\n"
            ),
            "doc/usage.md": "# Usage\n\n    demo-greet NAME\n",
            "lib/greeter.js": (
                "'use strict';\n"
                "const core = require('demo-core');\n"
                "const { capitalize } = require('@demo/strings');\n"
                "exports.greet = function greet(name) {\n"
                "  return 'Hello, ' + capitalize(name) + ' (demo-core ' + core.version + ')';\n"
                "};\n"
            ),
            "test/greeter.test.js": (
                "'use strict';\n"
                "const assert = require('assert');\n"
                "const { greet } = require('../lib/greeter.js');\n"
                "assert.strictEqual(greet('ada').split(' (')[0], 'Hello, Ada');\n"
                "console.log('demo-greeter tests passed');\n"
            ),
        },
        executables=["bin/demo-greet.js"],
    )
    return {
        "demo-greeter/demo-greeter-1.0.0.tgz": tarball,
        "demo-greeter/registry-meta.json": _meta("demo-greeter", {"1.0.0": "2021-05-01T10:00:00.000Z"}),
    }


LIFECYCLE_STEPS = ("preinstall", "install", "postinstall", "uninstall", "test")

_MARK_SCRIPT = f"""'use strict';
// Appends "<step>" to $INIT_CWD/{LIFECYCLE_LOG} (the folder npm was started in) and says so, so a
// test (or a person) can see which lifecycle scripts ran and in which order.
const fs = require('fs');
const path = require('path');
const step = process.argv[2];
const folder = process.env.INIT_CWD || process.cwd();
fs.appendFileSync(path.join(folder, '{LIFECYCLE_LOG}'), step + '\\n');
console.log('demo-lifecycle: ' + step + ' script ran');
"""


def demo_lifecycle() -> dict[str, bytes]:
    manifest = _spec_complete(
        "demo-lifecycle",
        "1.0.0",
        "Lifecycle scripts that leave a trace",
        ["demo", "scripts"],
        main="index.js",
        scripts={step: f"node scripts/mark.js {step}" for step in LIFECYCLE_STEPS},
    )
    tarball = npm_tarball(
        manifest,
        {
            "README.md": _readme(
                "demo-lifecycle", f"Each lifecycle script appends its name to `$INIT_CWD/{LIFECYCLE_LOG}`."
            ),
            "index.js": "module.exports = 'demo-lifecycle';\n",
            "scripts/mark.js": _MARK_SCRIPT,
        },
    )
    return {
        "demo-lifecycle/demo-lifecycle-1.0.0.tgz": tarball,
        "demo-lifecycle/registry-meta.json": _meta("demo-lifecycle", {"1.0.0": "2021-06-01T10:00:00.000Z"}),
    }


def demo_zipped() -> dict[str, bytes]:
    manifest = _spec_complete(
        "demo-zipped",
        "1.0.0",
        "Shipped as a zip archive; the build repacks it as an npm tarball",
        ["demo", "zip"],
        main="main.js",
    )
    archive = deterministic_zip(
        manifest,
        {
            "README.md": _readme("demo-zipped", "This package reached the registry as a `.zip`."),
            "main.js": "module.exports = 'demo-zipped from a zip';\n",
        },
    )
    return {
        "demo-zipped/demo-zipped-1.0.0.zip": archive,
        "demo-zipped/registry-meta.json": _meta("demo-zipped", {"1.0.0": "2021-07-01T10:00:00.000Z"}),
    }


def demo_nomain_tarball(version: str = "1.0.0") -> bytes:
    """Also used by tests that add a new version to a copy of the demo content."""
    manifest = _spec_complete("demo-nomain", version, "No main field: loaded through index.js", ["demo", "index"])
    return npm_tarball(
        manifest,
        {
            "README.md": _readme("demo-nomain", "No `main` in package.json, so Node loads `index.js`."),
            "index.js": f"module.exports = {json.dumps('demo-nomain ' + version + ' via index.js')};\n",
        },
    )


def demo_nomain() -> dict[str, bytes]:
    return {
        "demo-nomain/demo-nomain-1.0.0.tgz": demo_nomain_tarball(),
        "demo-nomain/registry-meta.json": _meta("demo-nomain", {"1.0.0": "2021-08-01T10:00:00.000Z"}),
    }


def imperfect_manifest() -> dict[str, Any]:
    """Breaks the specification's descriptor rules, but nothing npm needs: it builds and installs.

    No registry-meta.json either: its publish time is the archive's mtime (the fallback).
    """
    return {
        "name": IMPERFECT_NAME,  # the word "js" only says "JavaScript module" (name-discouraged-word)
        "version": "0.1.0",
        # description missing (description-required), keywords missing (keywords-required)
        "maintainers": ["Jane Doe <jane@example.org>"],  # strings, not {name, email, web} (maintainers-object)
        "contributors": [{"name": "John Roe", "email": "not-a-mail-address", "web": "example.org"}],
        "bugs": "please tell someone",  # neither a web address nor a mail address (bugs-address)
        "licenses": "MIT",  # not an array of {type, url} (licenses-format)
        "repositories": "somewhere on a disk",  # not a list (repositories-list)
        "homepage": "example.org/imperfect",  # not an http(s) address (homepage-url)
        # dependencies missing (dependencies-required)
        "os": ["linux", "macos", "darwin", "beos"],  # npm's spelling (os-spelling), unknown (os-value)
        "cpu": ["x86_64", "x64", "arm64"],  # npm's spelling (cpu-spelling), not allowed (cpu-value)
        "engine": ["v8", "rhino"],  # rhino is not an allowed engine (engine-value)
        "builtin": "no",  # not a boolean (builtin-boolean)
        "implements": "CommonJS Modules/1.0",  # not a list (implements-list)
    }


def demo_imperfect() -> dict[str, bytes]:
    tarball = npm_tarball(
        imperfect_manifest(),
        {
            "README.md": _readme(IMPERFECT_NAME, "Its package.json breaks the specification's lint rules on purpose."),
            "index.js": "module.exports = 'imperfect but installable';\n",
        },
    )
    return {f"{IMPERFECT_NAME}/{IMPERFECT_NAME}-0.1.0.tgz": tarball}


def demo_files() -> dict[str, bytes]:
    """Relative path under content/ -> bytes, for the whole demo registry."""
    files: dict[str, bytes] = {}
    for part in (demo_core, demo_strings, demo_greeter, demo_lifecycle, demo_zipped, demo_nomain, demo_imperfect):
        files.update(part())
    return dict(sorted(files.items()))


def write_demo(target: Path) -> list[Path]:
    """Writes the demo files under `target`; files already holding the same bytes are left alone."""
    written = []
    for relative, data in demo_files().items():
        path = target / relative
        if path.is_file() and path.read_bytes() == data:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        written.append(path)
    return written


def copy_committed_demo(source: Path, target: Path) -> Path:
    """Copies only the demo's own files from `source` (mtimes kept, as a copied checkout would).

    content/ may also hold what a developer published through `make run`; tests must not see it.
    """
    import shutil

    for relative in demo_files():
        destination = target / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / relative, destination)
    return target


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--list"]:
        for name, shows in DEMO_PACKAGES.items():
            print(f"{name}: {shows}")
        return 0
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python -m tests.demo_packages CONTENT_DIR | --list", file=sys.stderr)
        return 2
    target = Path(args[0])
    written = write_demo(target)
    print(f"{len(demo_files())} demo files in {target}, {len(written)} rewritten")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
