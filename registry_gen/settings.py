"""One immutable settings object, built at the edge (CLI) from registry.yaml, env and options."""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from registry_gen.access import AccessRules, parse_rules
from registry_gen.errors import ConfigError
from registry_gen.layout import STATE_DATABASE, STATE_SUFFIX
from registry_gen.mirror.config import Uplink, parse_uplinks
from registry_gen.purge import PurgeSettings, parse_purge

DEFAULT_CONFIG_FILE = "registry.yaml"
CONFIG_ENV = "REGISTRY_GEN_CONFIG"
DATABASE_URL_ENV = "REGISTRY_DATABASE_URL"
STORAGE_ENV = "REGISTRY_STORAGE"
TREE_ENV = "REGISTRY_TREE"
# `registry-gen check` profiles: npm's documented rules (default), or the specification's stricter ones too.
CHECK_PROFILES = ("npm", "commonjs")
# Who reads the tree bucket (`tree_readers:`): anyone (a plain bucket, a CDN) or only the emitted nginx config.
TREE_READERS = ("any", "nginx")
SIGNING_KEY_ENV = "REGISTRY_GEN_SIGNING_KEY"  # the signing key's PEM text, for hosts that inject secrets as variables


@dataclass(frozen=True)
class Limits:
    """Caps on what an archive may hold; enforced while streaming (see SECURITY.md)."""

    max_archive_bytes: int = 200 * 1024 * 1024
    max_unpacked_bytes: int = 1024 * 1024 * 1024
    max_members: int = 100_000
    max_manifest_bytes: int = 1024 * 1024
    max_readme_bytes: int = 1024 * 1024
    max_compression_ratio: int = 200


@dataclass(frozen=True)
class AuthLimits:
    """Rates of the login paths, sign-up and npm web login (registry.yaml `auth_limits:`; user_api
    applies them, see user_api/AUTH.md). Attempts are counted, right or wrong."""

    login_per_account_per_minute: float = 10  # per account (an address that logged in to it has its own)
    login_per_account_burst: int = 10
    login_per_address_per_minute: float = 30  # per address, whatever the account
    login_per_address_burst: int = 30
    signup_per_minute: float = 5  # anonymous sign-ups (`signup: open`), per address
    signup_burst: int = 5
    web_login_seconds: int = 600  # how long an npm web login stays valid
    web_login_sessions: int = 1000  # in progress at once; the oldest unauthenticated is evicted
    web_login_per_address: int = 5  # in progress per starting address


@dataclass(frozen=True)
class HookSettings:
    """Webhooks (registry.yaml `hooks:`; registry_gen.hooks). `allow_networks`: address ranges a hook
    may reach beyond the public internet (SECURITY.md, "Hooks"); `secret_key`: the key that encrypts
    hook secrets at rest, shared by every instance (or $REGISTRY_HOOKS_KEY)."""

    allow_networks: tuple[str, ...] = ()
    secret_key: str | None = field(default=None, repr=False)
    max_per_user: int = 100
    timeout_seconds: float = 5.0  # one attempt: connect, send and read the answer
    retry_base_seconds: float = 10.0  # the first retry's delay; each next one doubles (with jitter)
    park_after_seconds: float = 86400.0  # a delivery still failing this long after its event is parked


@dataclass(frozen=True)
class Settings:
    content_dir: Path = Path("content")
    out_dir: Path = Path("public")
    base_url: str = "http://127.0.0.1:4873/"
    site_title: str = "Private npm registry"
    template_dir: Path | None = None
    strict: bool = False
    prune: bool = False
    gzip: bool = True
    data_dir: Path = Path("data")
    database_url: str | None = None
    # Who may create accounts. `admin` by default: on a registry that hosts a team's code, open
    # sign-up is a choice the operator makes knowingly (registry.yaml `signup: open`).
    signup: str = "admin"
    # The embedded server (serve/api): open connections at most, and seconds a connection may stay
    # silent (idle keep-alive, or a client that sends nothing) before it is closed.
    connection_limit: int = 1000
    idle_timeout: int = 10
    # The long-running writers (the API, watch mode) rewrite the documents that list every package
    # (-/all, -/search.json) this many seconds after a change instead of in it, so a publish costs
    # the same at any registry size; 0 rewrites them in every build. CLI builds always do.
    index_refresh_seconds: float = 10.0
    host: str = "127.0.0.1"
    port: int = 4873
    limits: Limits = field(default_factory=Limits)
    auth_limits: AuthLimits = field(default_factory=AuthLimits)
    hooks: HookSettings = field(default_factory=HookSettings)
    check_profile: str = "npm"
    check_ignore: tuple[str, ...] = ()
    config_file: Path | None = None
    state_dir: Path | None = None  # the build's state; None: OUT_DIR.state beside the tree (registry_gen.layout)
    signing_key: Path | None = None  # PEM private key that signs every version (registry_gen.signing)
    signing_key_pem: str | None = field(default=None, repr=False)  # the same, from $REGISTRY_GEN_SIGNING_KEY
    packages: AccessRules = field(default_factory=AccessRules)  # who may read what (registry_gen.access)
    audit_keep_days: int | None = None  # the audit log's retention (`registry-gen audit-prune`); None: kept for good
    uplinks: tuple[Uplink, ...] = ()  # the registries `packages:` patterns may proxy (registry_gen.mirror)
    purge: PurgeSettings = field(default_factory=PurgeSettings)  # the caches in front (registry_gen.purge)
    # ---- the content store (docs/deploying/object-store.md): None keeps archives and metas in content_dir;
    # `s3://BUCKET/PREFIX` puts them in an S3-compatible bucket ($REGISTRY_STORAGE).
    storage: str | None = None
    storage_endpoint_url: str | None = None  # None: $AWS_ENDPOINT_URL_S3 / $AWS_ENDPOINT_URL, else AWS itself
    # Whether the store honours `PUT If-None-Match: *`; None (`auto`): probe it once.
    storage_conditional_writes: bool | None = None
    # Where `registry-gen api` puts the built tree when content is in a bucket ($REGISTRY_TREE);
    # None: the same bucket, under `<PREFIX>/_tree` (registry_gen.objectstore).
    tree: str | None = None
    # Who reads the tree bucket (docs/deploying/object-store.md, "Who reads the tree"): `any` (a plain
    # bucket or CDN too: each JSON document also under its folder's key, `<name>` beside
    # `<name>/index.html`), or `nginx` (only the config `host-config nginx --from-bucket` emits, which
    # reads `<name>/index.html`: one key per document, two PUTs fewer per publish).
    tree_readers: str = "any"
    # Whether base_url came from registry.yaml or an option (False: the built-in default, which only
    # this machine reaches; `build` warns, `serve` derives it from the address it binds).
    base_url_given: bool = field(default=False, compare=False)
    # `warning:` lines about the config file itself (a key set twice), for the CLI to print.
    config_warnings: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ConfigError(f"base_url must be an absolute http(s) URL, got {self.base_url!r}")
        if not self.base_url.endswith("/"):
            object.__setattr__(self, "base_url", self.base_url + "/")
        if self.signup not in ("open", "closed", "admin"):
            raise ConfigError(f"signup must be one of open, closed, admin; got {self.signup!r}")
        refresh = self.index_refresh_seconds
        if isinstance(refresh, bool) or not isinstance(refresh, (int, float)) or not 0 <= refresh <= 3600:
            raise ConfigError(f"index_refresh_seconds must be a number of seconds from 0 to 3600; got {refresh!r}")
        if self.audit_keep_days is not None and (isinstance(self.audit_keep_days, bool) or not 1 <= self.audit_keep_days <= 36500):
            raise ConfigError(f"audit_keep_days must be a number of days from 1 to 36500, or null (keep every entry), got {self.audit_keep_days!r}")
        for key in ("connection_limit", "idle_timeout"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"{key} must be a positive integer; got {value!r}")
        if self.check_profile not in CHECK_PROFILES:
            raise ConfigError(f"check_profile must be one of {', '.join(CHECK_PROFILES)}; got {self.check_profile!r}")
        ignore = () if self.check_ignore is None else self.check_ignore
        if not isinstance(ignore, (list, tuple)) or not all(isinstance(rule, str) for rule in ignore):
            raise ConfigError(f"check_ignore must be a list of rule ids; got {self.check_ignore!r}")
        object.__setattr__(self, "check_ignore", tuple(ignore))
        self._check_proxies()
        self._check_storage()

    def _check_proxies(self) -> None:
        known = {uplink.name for uplink in self.uplinks}
        for rule in self.packages.rules:
            if rule.proxy is not None and rule.proxy not in known:
                defined = ", ".join(sorted(known)) or "none"
                raise ConfigError(f"packages.{rule.pattern!r}.proxy names the uplink {rule.proxy!r}, which uplinks: does not define (defined: {defined})")

    def uplink(self, name: str) -> Uplink:
        return next(uplink for uplink in self.uplinks if uplink.name == name)

    def _check_storage(self) -> None:
        from registry_gen.storage.location import parse_s3_url

        if self.storage is not None:
            parse_s3_url(self.storage)
        if self.tree is not None:
            parse_s3_url(self.tree)
            if self.storage is None:
                raise ConfigError("tree is set but storage is not: the tree goes to a bucket only with the content (add storage: s3://BUCKET/PREFIX), or remove it")
        endpoint = self.storage_endpoint_url
        if endpoint is not None:
            if not isinstance(endpoint, str) or not re.fullmatch(r"https?://[^/\s]+/?", endpoint):
                raise ConfigError(f"storage_endpoint_url must be an http(s) URL such as http://127.0.0.1:9000; got {endpoint!r}")
            if self.storage is None:
                raise ConfigError("storage_endpoint_url is set but storage is not: add storage: s3://BUCKET/PREFIX, or remove it")
        if self.storage_conditional_writes not in (None, True, False):
            raise ConfigError(f"storage_conditional_writes must be auto, true or false; got {self.storage_conditional_writes!r}")
        if self.tree_readers not in TREE_READERS:
            raise ConfigError(f"tree_readers must be one of {', '.join(TREE_READERS)}; got {self.tree_readers!r}")
        if self.tree_readers != "any" and self.storage is None:
            raise ConfigError(f"tree_readers is {self.tree_readers} but storage is not set: it says how the tree bucket is read; add storage: s3://BUCKET/PREFIX, or remove it")

    def with_updates(self, **changes: Any) -> Settings:
        """A copy with some values replaced; None values are ignored (unset CLI options)."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    @property
    def state_folder(self) -> Path:
        """Where the build keeps its state: `state_dir`, else OUT_DIR.state next to the tree."""
        if self.state_dir is not None:
            return self.state_dir
        out = self.out_dir if self.out_dir.name else self.out_dir.resolve()
        return out.with_name(out.name + STATE_SUFFIX)

    @property
    def state_file(self) -> Path:
        return self.state_folder / STATE_DATABASE

    @property
    def lock_file(self) -> Path:
        return self.out_dir.parent / f".{self.out_dir.name}.lock"


def default_base_url_warning(settings: Settings) -> str | None:
    """One line when the tree is built for the built-in URL (tarballs only this machine can fetch)."""
    if settings.base_url_given:
        return None
    return (
        f"warning: no base_url configured: tarball URLs point at {settings.base_url} (the built-in default), "
        "which only this machine reaches; pass --base-url URL or set base_url in registry.yaml (`registry-gen init` writes one)"
    )


def loopback_address(url: str) -> tuple[str, int] | None:
    """(host, port) of `url` when it names this machine (localhost, 127.0.0.0/8, ::1), else None:
    then the server answers it only on that port, while a public name may sit in front of it
    (nginx) on another one."""
    import ipaddress
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        if host != "localhost" and not host.endswith(".localhost") and not ipaddress.ip_address(host).is_loopback:
            return None
    except ValueError:  # a name that is not an address, or a port out of range
        return None
    return host, port


_PATH_KEYS = {"content_dir", "out_dir", "state_dir", "template_dir", "data_dir", "signing_key"}
_NULLABLE_KEYS = {"audit_keep_days", "template_dir", "database_url", "check_ignore", "signing_key", "state_dir", "storage", "storage_endpoint_url", "tree"}
# What registry.yaml may hold per key: YAML gives str/int/bool; paths are strings relative to the file.
_YAML_TYPES: dict[str, tuple[type | tuple[type, ...], str]] = {
    "content_dir": (str, "a path (string)"),
    "out_dir": (str, "a path (string)"),
    "state_dir": (str, "a path (string)"),
    "template_dir": (str, "a path (string)"),
    "data_dir": (str, "a path (string)"),
    "base_url": (str, "a string"),
    "site_title": (str, "a string"),
    "database_url": (str, "a string"),
    "signup": (str, "a string"),
    "host": (str, "a string"),
    "strict": (bool, "true or false"),
    "gzip": (bool, "true or false"),
    "port": (int, "an integer"),
    "prune": (bool, "true or false"),
    "check_profile": (str, "a string"),
    "check_ignore": (list, "a list of rule ids"),
    "signing_key": (str, "a path (string)"),
    "connection_limit": (int, "an integer"),
    "idle_timeout": (int, "an integer"),
    "index_refresh_seconds": ((int, float), "a number of seconds"),
    "audit_keep_days": (int, "a number of days, or null"),
    # the content store
    "storage": (str, "a string such as s3://BUCKET/PREFIX"),
    "storage_endpoint_url": (str, "a URL (string)"),
    "storage_conditional_writes": (bool, "auto, true or false"),
    "tree": (str, "a string such as s3://BUCKET/PREFIX"),
    "tree_readers": (str, "any or nginx"),
}


def check_type(key: str, value: Any, expected: type | tuple[type, ...], wanted: str) -> None:
    """One line naming the key and the type it needs (a bool is not an int; "false" is not false)."""
    if isinstance(value, expected) and not (expected is not bool and isinstance(value, bool)):
        return
    shown = f"the string {value!r}" if isinstance(value, str) else f"{type(value).__name__} {value!r}"
    raise ConfigError(f"{key} must be {wanted}, got {shown}")


def _limits_from(value: Any) -> Limits:
    if not isinstance(value, dict):
        raise ConfigError(f"limits must be a mapping, got {type(value).__name__} {value!r}")
    limit_keys = {f.name for f in dataclasses.fields(Limits)}
    for key, number in value.items():
        if key not in limit_keys:
            raise ConfigError(f"unknown key limits.{key} (known: {', '.join(sorted(limit_keys))})")
        check_type(f"limits.{key}", number, int, "a positive integer")
        if number <= 0:
            raise ConfigError(f"limits.{key} must be a positive integer, got {number!r}")
    return Limits(**value)


def _auth_limits_from(value: Any) -> AuthLimits:
    if not isinstance(value, dict):
        raise ConfigError(f"auth_limits must be a mapping, got {type(value).__name__} {value!r}")
    types = {f.name: f.type for f in dataclasses.fields(AuthLimits)}  # "float" (a rate) or "int"
    checked: dict[str, Any] = {}
    for key, number in value.items():
        if key not in types:
            raise ConfigError(f"unknown key auth_limits.{key} (known: {', '.join(sorted(types))})")
        # A rate may be fractional (0.5 a minute); counts and seconds are whole numbers.
        expected, wanted = (float, "a positive number") if types[key] == "float" else (int, "a positive integer")
        if expected is float and isinstance(number, int) and not isinstance(number, bool):
            number = float(number)
        check_type(f"auth_limits.{key}", number, expected, wanted)
        if number <= 0:
            raise ConfigError(f"auth_limits.{key} must be {wanted}, got {number!r}")
        checked[key] = number
    return AuthLimits(**checked)


def _hooks_from(value: Any) -> HookSettings:
    if not isinstance(value, dict):
        raise ConfigError(f"hooks must be a mapping, got {type(value).__name__} {value!r}")
    numbers = {"max_per_user": int, "timeout_seconds": float, "retry_base_seconds": float, "park_after_seconds": float}
    known = sorted([*numbers, "allow_networks", "secret_key"])
    checked: dict[str, Any] = {}
    for key, item in value.items():
        if key not in known:
            raise ConfigError(f"unknown key hooks.{key} (known: {', '.join(known)})")
        if key == "secret_key":
            if item is not None:  # null: the default (a generated key, or $REGISTRY_HOOKS_KEY)
                check_type("hooks.secret_key", item, str, "a string")
        elif key == "allow_networks":
            item = _networks_from(item)
        else:
            wanted = "a positive integer" if numbers[key] is int else "a positive number"
            check_type(f"hooks.{key}", item, (int, float) if numbers[key] is float else int, wanted)
            if item <= 0:
                raise ConfigError(f"hooks.{key} must be {wanted}, got {item!r}")
        checked[key] = item
    return HookSettings(**checked)


def _networks_from(value: Any) -> tuple[str, ...]:
    import ipaddress

    if not isinstance(value, list):
        raise ConfigError(f"hooks.allow_networks must be a list of address ranges such as 127.0.0.0/8, got {value!r}")
    networks = []
    for index, item in enumerate(value):
        try:
            networks.append(str(ipaddress.ip_network(str(item), strict=False)))
        except ValueError:
            raise ConfigError(f"hooks.allow_networks[{index}] is not an address range: {item!r} (e.g. 10.0.0.0/8)") from None
    return tuple(networks)


def _conditional_writes_from(value: Any) -> bool | None:
    """`auto` (None: probe the store once), true or false."""
    if value == "auto" or value is None:
        return None
    check_type("storage_conditional_writes", value, bool, "auto, true or false")
    return bool(value)


def _value_from(key: str, value: Any, source: Path) -> Any:
    if key == "limits":
        return _limits_from(value)
    if key == "auth_limits":
        return _auth_limits_from(value)
    if key == "packages":
        return parse_rules(value)
    if key == "uplinks":
        return tuple(parse_uplinks(value).values())
    if key == "hooks":
        return _hooks_from(value)
    if key == "purge":
        return parse_purge(value)
    if value is None and key in _NULLABLE_KEYS:
        return None
    if key == "storage_conditional_writes":
        return _conditional_writes_from(value)
    expected, wanted = _YAML_TYPES[key]
    check_type(key, value, expected, wanted)
    return source.parent / value if key in _PATH_KEYS else value


def _from_mapping(data: dict[str, Any], source: Path) -> dict[str, Any]:
    known = set(_YAML_TYPES) | {"limits", "auth_limits", "packages", "uplinks", "hooks", "purge"}
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in known:
            raise ConfigError(f"{source}: unknown key {key!r} (known: {', '.join(sorted(known))})")
        try:
            values[key] = _value_from(str(key), value, source)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from exc
    return values


# The command-line spelling of the settings an option can set, for errors about a value given there.
OPTION_NAMES = {"base_url": "--base-url", "host": "--host", "port": "--port", "out_dir": "--out", "check_profile": "--profile"}


def repeated_keys(lines_by_key: dict[str, list[int]], source: Path) -> list[str]:
    """One `warning:` line per key a mapping sets more than once, with its lines. YAML keeps the
    last value: still so, but said (a second `signing_key:` appended below init's used to win silently)."""
    warnings = []
    for key, lines in lines_by_key.items():
        if len(lines) > 1:
            shown = ", ".join(map(str, lines[:-1])) + f" and {lines[-1]}"
            warnings.append(
                f"warning: {source}: {key} is set more than once (lines {shown}); the last one (line {lines[-1]}) "
                "is used: keep only one"
            )
    return warnings


def read_config(path: Path) -> tuple[Any, list[str]]:
    """The YAML document in `path`, and a warning per key set twice in one of its mappings."""
    import yaml  # here, not at the top: `registry-gen --help` never reads a config

    warnings: list[str] = []

    class KeyLineLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, yaml.MappingNode):  # before merges (`<<`) are flattened into it
                lines: dict[str, list[int]] = {}
                for key_node, _ in node.value:
                    if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                        lines.setdefault(str(key_node.value), []).append(key_node.start_mark.line + 1)
                warnings.extend(repeated_keys(lines, path))
            return super().construct_mapping(node, deep)

    loader = KeyLineLoader(path.read_text(encoding="utf-8"))
    try:
        return loader.get_single_data(), warnings
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    finally:
        loader.dispose()


def yaml_scalar(value: str) -> str:
    """`value` as a YAML scalar that reads back as the same string (plain when it can be)."""
    import json

    import yaml

    try:
        if value and yaml.safe_load(f"k: {value}") == {"k": value}:
            return value
    except yaml.YAMLError:
        pass
    return json.dumps(value)  # a JSON string is a YAML double-quoted scalar


def with_top_level_value(text: str, key: str, value: str) -> tuple[str, str]:
    """`text` (a registry.yaml) with `key: value` set on the line that has the key, its comment
    kept; later lines setting it again are dropped (they would win); appended when absent. Also
    says what changed, for the user."""
    lines = text.splitlines(keepends=True)
    setting = re.compile(rf"^{re.escape(key)}\s*:(?P<value>.*?)(?P<comment>\s+#.*)?$")
    found = [index for index, line in enumerate(lines) if setting.match(line.rstrip("\r\n"))]
    if not found:
        separator = "" if not text or text.endswith("\n") else "\n"
        return f"{text}{separator}{key}: {value}\n", f"added {key} at its end"
    original = lines[found[0]].rstrip("\r\n")
    match = setting.match(original)
    assert match is not None
    head = f"{key}: {value}"
    if match.group("comment"):
        hash_column = original.index("#", match.start("comment"))
        head = f"{head.ljust(hash_column - 1)} {original[hash_column:]}"
    dropped = [index + 1 for index in found[1:]]
    for index in reversed(found):
        del lines[index : continuation_end(lines, index)]
    lines.insert(found[0], head + "\n")
    said = f"set {key} on line {found[0] + 1}"
    if dropped:
        said += f", removed its repeats on line {', '.join(map(str, dropped))}"
    return "".join(lines), said


def continuation_end(lines: list[str], index: int) -> int:
    """The index after line `index` and the indented lines continuing its value."""
    end = index + 1
    while end < len(lines) and lines[end][:1] in (" ", "\t") and lines[end].strip():
        end += 1
    return end


def blamed(exc: Exception, values: dict[str, Any], from_options: set[str]) -> ConfigError:
    """The error about a value, named after where the value came from: an option, or the file."""
    message = str(exc)
    for key in from_options:
        if message.startswith(f"{key} "):
            return ConfigError(f"{OPTION_NAMES.get(key, key)}{message.removeprefix(key)}")
    return ConfigError(f"{values.get('config_file') or 'options'}: {message}")


def load_settings(config_file: Path | str | None = None, **overrides: Any) -> Settings:
    """Defaults < registry.yaml (or $REGISTRY_GEN_CONFIG, or `config_file`) < env < overrides."""
    explicit = config_file or os.environ.get(CONFIG_ENV)
    path = Path(explicit) if explicit else Path(DEFAULT_CONFIG_FILE)
    values: dict[str, Any] = {}
    if path.exists():
        data, warnings = read_config(path)
        data = data or {}
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: the top level must be a mapping")
        values.update(_from_mapping(data, path))
        values["config_file"] = path
        values["config_warnings"] = tuple(warnings)
    elif explicit:
        raise ConfigError(f"{path}: config file not found")
    if os.environ.get(DATABASE_URL_ENV):
        values["database_url"] = os.environ[DATABASE_URL_ENV]
    if os.environ.get(STORAGE_ENV):
        values["storage"] = os.environ[STORAGE_ENV]
    if os.environ.get(TREE_ENV):
        values["tree"] = os.environ[TREE_ENV]
    if os.environ.get(SIGNING_KEY_ENV):
        values["signing_key_pem"] = os.environ[SIGNING_KEY_ENV]
    given = {k: v for k, v in overrides.items() if v is not None}
    values.update(given)
    values.setdefault("base_url_given", "base_url" in values)
    try:
        return Settings(**values)
    except (TypeError, ConfigError) as exc:
        raise blamed(exc, values, set(given)) from exc
