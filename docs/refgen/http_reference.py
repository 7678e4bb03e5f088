"""The HTTP references: the user service from the OpenAPI document it serves at
`/-/user-api/openapi.json`, and the npm protocol's dynamic routes from `user_api.registry_routes.ROUTES`
(with `route_descriptions.yaml` beside this module saying what each is for)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from refgen.text import MissingDescription, code, escaped, slug, table

ROUTE_DESCRIPTIONS_FILE = Path(__file__).with_name("route_descriptions.yaml")
METHODS = ("get", "put", "post", "patch", "delete")
SCHEMA_REF = "#/components/schemas/"


def openapi_document() -> dict[str, Any]:
    """The document `registry-gen serve`/`api` serve, for the default settings (as
    user_api.app.create_user_app builds it)."""
    from registry_gen.settings import Settings
    from user_api.openapi import build_openapi
    from user_api.web import web_limits

    settings = Settings()
    return build_openapi(settings, max_body_bytes=web_limits(settings).max_body_bytes)


def schema_link(name: str) -> str:
    return f"[{name}](#{slug(name)})"


def type_of(schema: dict[str, Any]) -> str:
    """A schema's type in a few words, `$ref`s as links to their section."""
    if "$ref" in schema:
        return schema_link(schema["$ref"].removeprefix(SCHEMA_REF))
    if "const" in schema:
        return code(str(schema["const"]))
    if "enum" in schema:
        return "one of " + ", ".join(code(str(value)) for value in schema["enum"])
    kind = schema.get("type", "any")
    if isinstance(kind, list):
        kind = " or ".join(kind)
    if kind == "array":
        return f"array of {type_of(schema.get('items', {}))}"
    return f"{kind} ({schema['format']})" if "format" in schema else str(kind)


CONSTRAINTS = (
    ("minLength", "at least {} characters"), ("maxLength", "at most {} characters"),
    ("minimum", "≥ {}"), ("maximum", "≤ {}"), ("minItems", "items: at least {}"), ("maxItems", "items: at most {}"),
    ("default", "default {}"),
)


def constraints(schema: dict[str, Any]) -> str:
    said = [template.format(schema[key]) for key, template in CONSTRAINTS if key in schema]
    if "pattern" in schema:
        said.append("pattern " + code(schema["pattern"]))
    said += [word for key, word in (("readOnly", "read-only"), ("writeOnly", "write-only"), ("deprecated", "deprecated")) if schema.get(key)]
    return "; ".join(said)


def property_rows(schema: dict[str, Any], prefix: str = "") -> list[tuple[str, ...]]:
    """One row per property, nested objects (and arrays of them) flattened as `a.b` / `a[].b`."""
    rows: list[tuple[str, ...]] = []
    required = set(schema.get("required", ()))
    for name, prop in schema.get("properties", {}).items():
        path = f"{prefix}{name}"
        rows.append((code(path), type_of(prop), "yes" if name in required else "", constraints(prop),
                     escaped(prop.get("description", ""))))
        inner = prop.get("items", {}) if prop.get("type") == "array" else prop
        if "properties" in inner:
            rows += property_rows(inner, f"{path}[]." if inner is not prop else f"{path}.")
    return rows


def schema_section(name: str, schema: dict[str, Any]) -> str:
    parts = [f"### {name}"]
    if schema.get("description"):
        parts.append(escaped(schema["description"]))
    rows = property_rows(schema)
    if rows:
        parts.append(table(("Property", "Type", "Required", "Constraints", "What it is"), rows))
    else:
        parts.append(f"Type: {type_of(schema)}.")
    return "\n\n".join(parts)


def authentication(operation: dict[str, Any], default: list[dict[str, Any]]) -> str:
    security = operation.get("security", default)
    if not security:
        return "none"
    if {} in security:
        return "optional (a bearer token, or none)"
    return "a bearer token (`Authorization: Bearer …`)"


def media_schemas(content: dict[str, Any]) -> str:
    """`application/json`: [User]; … with the media types that share a schema together."""
    by_schema: dict[str, list[str]] = {}
    for media, body in content.items():
        by_schema.setdefault(type_of(body.get("schema", {})), []).append(code(media))
    return "; ".join(f"{', '.join(medias)}: {schema}" for schema, medias in by_schema.items())


def parameter_rows(operation: dict[str, Any]) -> list[tuple[str, ...]]:
    return [
        (code(p["name"]), p["in"], "yes" if p.get("required") else "", type_of(p.get("schema", {})),
         "; ".join(filter(None, [escaped(p.get("description", "")), constraints(p.get("schema", {})),
                                 "deprecated" if p.get("deprecated") else ""])))
        for p in operation.get("parameters", ())
    ]


def response_rows(operation: dict[str, Any]) -> list[tuple[str, ...]]:
    rows = []
    for status, response in operation["responses"].items():
        headers = ", ".join(code(name) for name in response.get("headers", {}))
        rows.append((status, escaped(response.get("description", "")), media_schemas(response.get("content", {})),
                     headers))
    return rows


def operation_section(method: str, path: str, operation: dict[str, Any], default_security: list[dict[str, Any]]) -> str:
    parts = [f"### {method.upper()} {path}", escaped(operation["summary"]),
             f"Authentication: {authentication(operation, default_security)}."]
    if operation.get("parameters"):
        parts.append(table(("Parameter", "In", "Required", "Type", "Notes"), parameter_rows(operation)))
    if "requestBody" in operation:
        parts.append("Request body: " + media_schemas(operation["requestBody"]["content"]) + ".")
    parts.append(table(("Status", "Meaning", "Body", "Headers"), response_rows(operation)))
    return "\n\n".join(parts)


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(method, path, op) for path, item in document["paths"].items() for method, op in item.items() if method in METHODS]


def user_api_reference() -> str:
    """The generated part of reference/user-api.md."""
    document = openapi_document()
    found = operations(document)
    missing = [f"{method.upper()} {path}" for method, path, op in found if not op.get("summary", "").strip()]
    if missing:
        raise MissingDescription("operations of the OpenAPI document (give them a summary)", missing)
    info = document["info"]
    parts = [f"Version {info['version']} of the {escaped(info['title'])} ({code('openapi ' + document['openapi'])}).",
             escaped(info["description"]), "## Operations"]
    parts += [operation_section(method, path, op, document.get("security", [])) for method, path, op in found]
    parts.append("## Schemas")
    parts += [schema_section(name, schema) for name, schema in document["components"]["schemas"].items()]
    return "\n\n".join(parts) + "\n"


def route_path(rule: str) -> str:
    """A Bottle rule as a reader spells the path: `<name:pkg>` as `{name}`, CouchDB's user ids
    as `org.couchdb.user:{username}`."""
    rule = re.sub(r"<(\w+):couch>", r"org.couchdb.user:{\1}", rule)
    return re.sub(r"<(\w+)(?::[^>]*)?>", r"{\1}", rule)


def route_descriptions() -> dict[str, str]:
    from user_api.registry_routes import ROUTES

    notes = yaml.safe_load(ROUTE_DESCRIPTIONS_FILE.read_text(encoding="utf-8")) or {}
    keys = [f"{route.method} {route.rule}" for route in ROUTES]
    missing = [key for key in keys if not str(notes.get(key) or "").strip()]
    missing += [f"{key} (no such route: remove it from {ROUTE_DESCRIPTIONS_FILE.name})" for key in notes if key not in keys]
    if missing:
        raise MissingDescription(f"npm routes (describe them in {ROUTE_DESCRIPTIONS_FILE.name})", missing)
    return {key: str(text) for key, text in notes.items()}


def npm_routes_reference() -> str:
    """The generated part of reference/npm-api.md: every dynamic route, in matching order."""
    from user_api.registry_routes import ROUTES

    notes = route_descriptions()
    rows = [
        (route.method, code(route_path(route.rule)), escaped(notes[f"{route.method} {route.rule}"]),
         code(f"{route.handler.__module__.rpartition('.')[2]}.{route.handler.__name__}"))
        for route in ROUTES
    ]
    return table(("Method", "Path", "What it is for", "Handler (user_api)"), rows) + "\n"
