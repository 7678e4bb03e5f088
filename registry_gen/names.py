"""npm package names: validation and their place in the static tree (pure functions)."""

from __future__ import annotations

import functools
import re
from urllib.parse import quote

from registry_gen.errors import InvalidName

MAX_NAME_LENGTH = 214
# File systems store 255 bytes per name; the atomic writer's temp file adds ".", ".XXXXXXXX.tmp".
MAX_TARBALL_FILENAME = 240
# Names that would collide with the generator's own `/-/` tree or with files clients never fetch.
# 404.html is GitHub Pages' error page; /user belongs to the user API in `serve` and behind nginx.
RESERVED_NAMES = frozenset({"-", "node_modules", "favicon.ico", "404.html", "user"})
# The tree's own file names: `index.html` at the root is an S3 website's index document, and a
# package folder holding these would shadow its documents (and their .gz siblings).
TREE_FILE_NAMES = frozenset({"index.html", "abbreviated.json", "index.html.gz", "abbreviated.json.gz"})
# Windows device names: a folder called so cannot be created or copied there (case-insensitive).
DEVICE_NAMES = frozenset({"con", "nul", "aux", "prn"} | {f"com{i}" for i in range(1, 10)} | {f"lpt{i}" for i in range(1, 10)})
# npm's rule for new packages: URL-safe, lowercase, no leading dot or underscore.
_PART = re.compile(r"^[a-z0-9\-~][a-z0-9\-._~]*$")
# What the public registry still hosts from before that rule (validate-npm-package-name's
# "valid for old packages"): capitals and the characters encodeURIComponent leaves alone.
_LEGACY_PART = re.compile(r"^[A-Za-z0-9\-~!*'()][A-Za-z0-9\-._~!*'()]*$")


def validate_name(name: object, *, legacy: bool = False) -> str:
    """Return `name` if npm and the static layout can both carry it, else raise InvalidName.

    The default is npm's rule for new packages (what the write API accepts for a new name);
    `legacy=True` is what the public registry still hosts from older packages (`JSONStream`,
    `Base64`), which the build serves as written.
    """
    if not isinstance(name, str):
        raise InvalidName("name must be a string")
    if not name:
        raise InvalidName("name must not be empty")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidName(f"name is longer than {MAX_NAME_LENGTH} characters")
    if name != name.strip():
        raise InvalidName("name must not have leading or trailing spaces")
    if not legacy and name.lower() != name:
        raise InvalidName("name must be lowercase (npm's rule for new packages)")
    if name.lower() in RESERVED_NAMES:
        raise InvalidName(f"name {name!r} is reserved")
    scope, bare = split_name(name)
    if bare.lower() in TREE_FILE_NAMES or bare.lower() in DEVICE_NAMES:
        raise InvalidName(f"name {name!r} is reserved ({bare!r} is a file name of the tree or a Windows device)")
    part = _LEGACY_PART if legacy else _PART
    if scope is not None and not part.match(scope[1:]):
        raise InvalidName(f"scope {scope!r} contains characters that are not URL-safe")
    # npm's rule is about the whole name: `@scope/_x` is valid (it does not start with "_").
    # A leading dot stays refused under a scope too: it would be a hidden folder of the tree.
    if bare.startswith(".") or (scope is None and bare.startswith("_")):
        raise InvalidName("name must not start with a dot or an underscore")
    checked = bare[1:] if scope is not None and bare.startswith("_") and len(bare) > 1 else bare
    if not part.match(checked) or bare in (".", ".."):
        if legacy:
            raise InvalidName("name may only contain letters, digits and - . _ ~ ! * ' ( )")
        raise InvalidName("name may only contain lowercase letters, digits and - . _ ~")
    return name


def validate_hosted_name(name: object) -> str:
    """A name the build serves: anything the public registry hosts (see validate_name)."""
    if isinstance(name, str):
        return _hosted(name)
    return validate_name(name, legacy=True)


@functools.lru_cache(maxsize=1 << 12)
def _hosted(name: str) -> str:
    # A build asks about the same names for every version, file and link (thousands of times per
    # publish); the answer is pure, so it is remembered. Refusals raise and are not cached. A
    # publish asks about a few hundred names (the package, its links, a browse page's rows); a full
    # build about every name, and 65,536 remembered held ~11 MB (~180 B each) until the process ended.
    return validate_name(name, legacy=True)


def split_name(name: str) -> tuple[str | None, str]:
    """'@scope/pkg' -> ('@scope', 'pkg'); 'pkg' -> (None, 'pkg')."""
    if name.startswith("@"):
        scope, sep, bare = name.partition("/")
        if not sep or not bare or "/" in bare or scope == "@":
            raise InvalidName("a scoped name must look like @scope/name")
        return scope, bare
    if "/" in name:
        raise InvalidName("an unscoped name must not contain a slash")
    return None, name


def is_valid_name(name: object, *, legacy: bool = False) -> bool:
    try:
        validate_name(name, legacy=legacy)
    except InvalidName:
        return False
    return True


def package_dir(name: str) -> str:
    """Relative folder of a package in the tree: 'pkg' or '@scope/pkg' (a real slash)."""
    validate_hosted_name(name)
    return name


def tarball_filename(name: str, version: str) -> str:
    """npm's conventional tarball name: the bare name (no scope), a dash, the version."""
    filename = f"{split_name(name)[1]}-{version}.tgz"
    if len(filename.encode("utf-8")) > MAX_TARBALL_FILENAME:
        # A valid name (214) plus a valid version (256) can exceed what a file system stores.
        raise InvalidName(f"name and version make a tarball file name longer than {MAX_TARBALL_FILENAME} bytes")
    return filename


def tarball_path(name: str, version: str) -> str:
    """Relative path of a tarball in the tree: '<pkgdir>/-/<bare>-<version>.tgz'."""
    return f"{package_dir(name)}/-/{tarball_filename(name, version)}"


def escaped_name(name: str) -> str:
    """The form npm puts in URLs: '@scope%2fpkg' (lower-case, as npm-package-arg writes it)."""
    return quote(name, safe="@").replace("%2F", "%2f")


def url_spellings(name: str) -> list[str]:
    """Every path under which clients ask for a packument (npm, pnpm, yarn)."""
    scope, bare = split_name(name)
    if scope is None:
        return [f"/{name}"]
    return [f"/{scope}%2f{bare}", f"/{scope}%2F{bare}", f"/{scope}/{bare}"]
