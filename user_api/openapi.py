"""The OpenAPI 3.1 document, built from the same constants the validators use (so it cannot drift)."""

from __future__ import annotations

from typing import Any, Final

from registry_gen.advisories import SEVERITIES
from registry_gen.settings import Settings
from user_api.models import (
    EMAIL_MAX,
    EMAIL_PATTERN,
    FULL_NAME_MAX,
    PASSWORD_MAX,
    PASSWORD_MIN,
    ROLES,
    STATUSES,
    TEXT_PATTERN,
    USERNAME_MAX,
    USERNAME_PATTERN,
)
from user_api.negotiation import MERGE_PATCH_JSON
from user_api.params import (
    AUDIT_MAX_LIMIT, AUDIT_NAME_MAX, DEFAULT_SIZE, DELIVERIES_MAX_LIMIT, KEYWORD_MAX, LIST_MAX_PAGE, MAX_SIZE, SEARCH_MAX_PAGE, SEARCH_TOTAL_CAP,
)  # fmt: skip
from user_api.problems import PROBLEM_TYPES_BY_ERROR, TYPE_PREFIX

# Not blank, no control characters (the rules of params.parse_keyword).
KEYWORD_PATTERN: Final = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
SUCCESS_TYPES: Final = ("application/json", "application/xml", "text/xml")
XML_TYPES: Final = ("application/xml", "text/xml")
# What an XML 1.0 text node can carry unchanged (no C0 controls; CR would be normalised to LF).
XML_TEXT_PATTERN: Final = r"^[^\x00-\x08\x0b-\x1f\ufffe\uffff]*$"
UUID_SCHEMA: Final = {"type": "string", "format": "uuid"}
# The package names this document describes for the admin routes: `<word>-<word>`, which no reserved
# name, tree file or Windows device name has. The server accepts any npm name (registry_gen.names).
PACKAGE_NAME_PATTERN: Final = r"^[a-z0-9]{1,20}-[a-z0-9]{1,20}$"
# Plain x.y.z versions: a subset of what npm's ranges may say (the server reads any node-semver range).
VERSION_PATTERN: Final = r"^[0-9]{1,4}\.[0-9]{1,4}\.[0-9]{1,4}$"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _header(description: str, schema: dict[str, Any] | None = None, *, required: bool = True) -> dict[str, Any]:
    return {"description": description, "required": required, "schema": schema or {"type": "string"}}


def _success(
    description: str, schema: str, xml_schema: str | None = None, headers: dict[str, Any] | None = None
) -> dict[str, Any]:
    content = {
        media: {"schema": _ref(schema if media == "application/json" else (xml_schema or schema))}
        for media in SUCCESS_TYPES
    }
    response: dict[str, Any] = {"description": description, "content": content}
    if headers:
        response["headers"] = headers
    return response


PROBLEM_HEADERS: Final = {
    401: {"WWW-Authenticate": _header('Bearer realm="registry", with error="invalid_token" for a rejected token')},
    415: {"Accept": _header("The media types a body may have")},
    429: {"Retry-After": _header("Seconds to wait", {"type": "string", "pattern": "^[0-9]+$"})},
    503: {"Retry-After": _header("Seconds to wait", {"type": "string", "pattern": "^[0-9]+$"})},
}
PROBLEM_DESCRIPTIONS: Final = {
    400: "Malformed query or body, unknown or repeated parameter, more than 10 parameters, page out of range",
    401: "No bearer token, or a token that is not valid (or wrong credentials on login)",
    403: "Authenticated, but not allowed (see AUTH.md), or currentPassword missing or wrong",
    404: "No such user (also after deletion)",
    406: "Accept lists neither JSON nor XML",
    409: "The username is taken, or the last active administrator would go",
    412: "If-Match does not match the user's current ETag",
    413: "The body is larger than the limit",
    414: "The query string is longer than 2048 bytes",
    415: "The body is neither application/json nor application/xml (UTF-8)",
    422: "The body parsed, but fields break the rules; `errors` points at each",
    429: "Rate limited",
    500: "The user is deleted, but its email may remain in the damaged package metas `errors` names "
         "(erasure-incomplete) until an operator fixes each and runs `registry-gen user erase-email NAME`",
    503: "The database is unavailable",
}


def _problem(status: int) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": PROBLEM_DESCRIPTIONS[status],
        "content": {
            "application/problem+json": {"schema": _ref("Problem")},
            "application/problem+xml": {"schema": _ref("ProblemXml")},
        },
    }
    if status in PROBLEM_HEADERS:
        response["headers"] = PROBLEM_HEADERS[status]
    return response


def _responses(success: dict[str, dict[str, Any]], problems: tuple[int, ...]) -> dict[str, Any]:
    responses: dict[str, Any] = dict(success)
    for status in sorted({400, 406, 414, 503, *problems}):
        responses[str(status)] = _problem(status)
    return responses


def _body(schema: str) -> dict[str, Any]:
    """JSON bodies use `schema`; XML ones `<schema>Xml`: no nulls (an absent element is no value)."""
    content = {"application/json": {"schema": _ref(schema)}}
    content.update({media: {"schema": _ref(f"{schema}Xml")} for media in XML_TYPES})
    return {"required": True, "content": content}


def _xml_variant(schema: dict[str, Any]) -> dict[str, Any]:
    """The XML twin of a request schema: null alternatives dropped, secrets limited to XML text."""
    properties = {}
    for name, prop in schema["properties"].items():
        if "anyOf" in prop:
            prop = {**next(p for p in prop["anyOf"] if p.get("type") != "null")}
            prop["description"] = "Omit the element for no value"
        if prop.get("writeOnly"):
            prop = {**prop, "pattern": XML_TEXT_PATTERN}
        properties[name] = prop
    return {**schema, "properties": properties}


def _schemas(max_body_bytes: int) -> dict[str, Any]:
    username = {"type": "string", "minLength": 1, "maxLength": USERNAME_MAX, "pattern": USERNAME_PATTERN}
    email = {"type": "string", "maxLength": EMAIL_MAX, "pattern": EMAIL_PATTERN}
    full_name = {"type": "string", "minLength": 1, "maxLength": FULL_NAME_MAX, "pattern": TEXT_PATTERN}
    password = {"type": "string", "minLength": PASSWORD_MIN, "maxLength": PASSWORD_MAX, "writeOnly": True}
    role = {"type": "string", "enum": list(ROLES)}
    status = {"type": "string", "enum": list(STATUSES)}
    timestamp = {"type": "string", "format": "date-time", "readOnly": True}
    user_properties = {
        "id": {**UUID_SCHEMA, "readOnly": True},
        "username": username,
        "email": {**email, "description": "Shown to the user themself and to admins only"},
        "fullName": full_name,
        "role": {**role, "description": "Shown to the user themself and to admins only"},
        "status": {**status, "description": "Shown to the user themself and to admins only"},
        "createdAt": timestamp,
        "updatedAt": {**timestamp, "description": "Shown to the user themself and to admins only"},
    }
    page_meta = {
        "number": {"type": "integer", "minimum": 1, "description": "1-based page number (Spring's is 0-based)"},
        "size": {"type": "integer", "minimum": 1, "maximum": MAX_SIZE},
        "totalElements": {"type": "integer", "minimum": 0},
        "totalPages": {"type": "integer", "minimum": 0},
    }
    nullable_email = {"anyOf": [email, {"type": "null"}], "description": "null or absent: no email"}
    nullable_name = {"anyOf": [full_name, {"type": "null"}]}
    # What PUT replaces and PATCH changes; PUT also names the id.
    editable = {"username": username, "email": nullable_email, "fullName": nullable_name, "password": password,
                "currentPassword": password, "role": role, "status": status}
    problem_properties = {
        "type": {"type": "string", "description": f"about:blank or {TYPE_PREFIX}<slug>"},
        "title": {"type": "string"},
        "status": {"type": "integer", "minimum": 400, "maximum": 599},
        "detail": {"type": "string"},
        "instance": {"type": "string", "description": "urn:uuid:<request id>, also in X-Request-Id"},
    }
    field_error = {
        "type": "object",
        "required": ["detail"],
        "properties": {
            "detail": {"type": "string"},
            "pointer": {"type": "string", "description": "JSON Pointer into the body, e.g. #/email"},
            "parameter": {"type": "string", "description": "Name of the query parameter"},
        },
    }
    schemas: dict[str, Any] = {
        "User": {
            "type": "object",
            "description": "The public view (id, username, fullName, createdAt) or, for the user themself "
            "and admins, the private view. Never a password, hash or token.",
            "required": ["id", "username", "createdAt"],
            "additionalProperties": False,
            "properties": user_properties,
            "xml": {"name": "user"},
        },
        "UserCreate": {
            "type": "object",
            "description": "role and status other than the defaults need an admin (403 forbidden-field).",
            "required": ["username", "password"],
            "additionalProperties": False,
            "properties": {
                "username": username,
                "password": password,
                "email": nullable_email,
                "fullName": nullable_name,
                "role": {**role, "default": "user"},
                "status": {**status, "default": "active"},
            },
            "xml": {"name": "user"},
        },
        "UserUpdate": {
            "type": "object",
            "description": "Full replacement: id and username are required; email and fullName are replaced "
            "too (absent or null clears them, so send them to keep them); password, role and status change "
            "only when sent. Changing your own email or password needs currentPassword. Non-admins may not "
            "change username, role or status. To change some fields only, use PATCH /user/{id}.",
            "required": ["id", "username"],
            "additionalProperties": False,
            "properties": {"id": UUID_SCHEMA, **editable},
            "xml": {"name": "user"},
        },
        "UserPatch": {
            "type": "object",
            "description": "A JSON Merge Patch (RFC 7396): members sent change, null removes email or fullName, "
            "absent members keep their value. currentPassword is needed only when your own email or password "
            "actually changes. Non-admins may not change username, role or status. In XML: a partial <user>, "
            "an empty element removes the field.",
            "additionalProperties": False,
            "properties": editable,
            "xml": {"name": "user"},
        },
        "UserPage": {
            "type": "object",
            "required": ["content", "page"],
            "additionalProperties": False,
            "properties": {
                "content": {"type": "array", "items": _ref("User")},
                "page": {
                    "type": "object",
                    "required": list(page_meta),
                    "additionalProperties": False,
                    "properties": page_meta,
                },
            },
        },
        "UserPageXml": {
            "type": "object",
            "description": "XML mirror of UserPage; the page metadata sits under the root element.",
            "required": ["content", *page_meta],
            "properties": {
                "content": {"type": "array", "items": _ref("User"), "xml": {"wrapped": True}},
                **page_meta,
            },
            "xml": {"name": "page"},
        },
        "Credentials": {
            "type": "object",
            "required": ["username", "password"],
            "additionalProperties": False,
            "properties": {
                "username": {"type": "string", "minLength": 1},
                "password": {"type": "string", "minLength": 1, "writeOnly": True},
            },
            "xml": {"name": "credentials"},
        },
        "Token": {
            "type": "object",
            "required": ["token", "key", "readonly", "created"],
            "additionalProperties": False,
            "properties": {
                "token": {"type": "string", "description": "Shown once; send as Authorization: Bearer <token>"},
                "key": {"type": "string", "description": "Public id of the token"},
                "readonly": {"type": "boolean"},
                "created": {"type": "string", "format": "date-time"},
            },
            "xml": {"name": "token"},
        },
        **_token_schemas(),
        **_admin_schemas(username),
        "Problem": {
            "type": "object",
            "description": "RFC 9457 problem details",
            "required": ["type", "title", "status", "instance"],
            "properties": {
                **problem_properties,
                "errors": {"type": "array", "items": field_error},
            },
        },
        "ProblemXml": {
            "type": "object",
            "description": "RFC 9457 Appendix B: <problem xmlns=\"urn:ietf:rfc:7807\">, arrays as <i> items",
            "properties": {
                **problem_properties,
                "errors": {"type": "array", "items": {**field_error, "xml": {"name": "i"}}, "xml": {"wrapped": True}},
            },
            "xml": {"name": "problem", "namespace": "urn:ietf:rfc:7807"},
        },
    }
    for name in ("UserCreate", "UserUpdate", "UserPatch", "Credentials", "Claim"):
        schemas[f"{name}Xml"] = _xml_variant(schemas[name])
    return schemas


def _token_schemas() -> dict[str, Any]:
    """An account's tokens as `GET /user/{id}/tokens` lists them (never the token itself)."""
    info = {
        "type": "object",
        "required": ["key", "tokenPrefix", "readonly", "cidrWhitelist", "created"],
        "additionalProperties": False,
        "properties": {
            "key": {"type": "string", "description": "Public id of the token (DELETE /user/{id}/tokens/{key})"},
            "description": {"type": ["string", "null"], "description": "What created it (npm login, npm token create...)"},
            "tokenPrefix": {"type": "string", "description": "The token's first characters, to recognise it"},
            "readonly": {"type": "boolean"},
            "cidrWhitelist": {"type": "array", "items": {"type": "string", "xml": {"name": "cidr"}}, "xml": {"wrapped": True, "name": "cidrWhitelist"}},
            "created": {"type": "string", "format": "date-time"},
        },
        "xml": {"name": "token"},
    }
    return {
        "TokenInfo": info,
        "TokenList": {
            "type": "object",
            "required": ["content"],
            "additionalProperties": False,
            "properties": {"content": {"type": "array", "items": _ref("TokenInfo")}},
        },
        "TokenListXml": {
            "type": "object",
            "properties": {"content": {"type": "array", "items": _ref("TokenInfo"), "xml": {"wrapped": True}}},
            "xml": {"name": "tokens"},
        },
    }


def _admin_schemas(username: dict[str, Any]) -> dict[str, Any]:
    """Bodies of the administrators' routes: binding a maintainer name, recording an advisory."""
    package = {"type": "string", "pattern": PACKAGE_NAME_PATTERN}
    return {
        "Claim": {
            "type": "object",
            "required": ["package", "username"],
            "additionalProperties": False,
            "properties": {"package": package, "username": username},
            "xml": {"name": "claim"},
        },
        "ClaimResult": {
            "type": "object",
            "required": ["package", "username", "changed"],
            "additionalProperties": False,
            "properties": {"package": {"type": "string"}, "username": {"type": "string"},
                           "changed": {"type": "boolean", "description": "false: the account already was a maintainer"}},
            "xml": {"name": "claim"},
        },
        **_advisory_schemas(package),
        **_audit_schemas(),
        **_delivery_schemas(),
    }


def _audit_schemas() -> dict[str, Any]:
    names = {"type": "object", "additionalProperties": {"type": "string"}}
    entry = {
        "type": "object",
        "required": ["seq", "time", "actor", "actor_id", "who", "event", "package", "versions", "detail"],
        "additionalProperties": False,
        "properties": {
            "seq": {"type": "integer", "minimum": 1, "description": "The entry's number: entries are listed in this order"},
            "time": {"type": "string", "description": "When the write was made (ISO 8601, UTC)"},
            "actor": {"type": "string", "description": "The account's name, or the command of a CLI write"},
            "actor_id": {"type": ["string", "null"], "description": "The account's immutable id"},
            "who": {**names, "description": "Where the write came from: token_key (the token's key, never the token), "
                    "address and user_agent of an HTTP write; command and os_user of a CLI write"},
            "event": {"type": "string", "description": "What happened, as npm's hooks name it (package:publish...)"},
            "package": {"type": "string"},
            "versions": {"type": "array", "items": {"type": "string"}},
            "detail": {"type": "object", "description": "Tags, owners, messages: before and after where it matters"},
        },
    }
    account_entry = {
        "type": "object",
        "required": ["account_seq", "time", "actor", "actor_id", "who", "event", "account", "detail"],
        "additionalProperties": False,
        "properties": {
            "account_seq": {"type": "integer", "minimum": 1, "description": "The change's number in the account log"},
            "time": {"type": "string", "description": "When the change was made (ISO 8601, UTC)"},
            "actor": {"type": "string", "description": "Who made it: an account's name, or the command of a CLI change"},
            "actor_id": {"type": ["string", "null"], "description": "The acting account's immutable id"},
            "who": {**names, "description": "Where the change came from, as for a package write"},
            "event": {"type": "string", "description": "user:create, user:remove, user:role, token:create, hook:add..."},
            "account": {"type": "string", "description": "The account changed"},
            "detail": {"type": "object", "description": "Before and after where it matters; never a secret or an email"},
        },
    }
    return {"AccountAuditPage": _audit_page(account_entry, "the log's end"), "AuditPage": _audit_page(entry, "the journal's end")}


def _audit_page(entry: dict[str, Any], end: str) -> dict[str, Any]:
    """A page of an audit route: its entries and the `since` of the next page."""
    return {
        "type": "object",
        "required": ["entries", "next"],
        "additionalProperties": False,
        "properties": {
            "entries": {"type": "array", "items": entry},
            "next": {"type": ["string", "null"], "description": f"The `since` of the next page; null at {end}"},
        },
    }


def _advisory_schemas(package: dict[str, Any]) -> dict[str, Any]:
    recorded = {
        "type": "object",
        "required": ["id", "package", "severity", "vulnerable_versions"],
        "additionalProperties": False,
        "properties": {
            "id": {"type": "string", "description": "The advisory's own id (GHSA-..., CVE-..., the operator's)"},
            "package": {"type": "string"},
            "severity": {"type": "string", "enum": list(SEVERITIES)},
            "vulnerable_versions": {"type": "string", "description": "A node-semver range"},
        },
        "xml": {"name": "advisory"},
    }
    affected = {
        "type": "object",
        "required": ["package", "versions"],
        "additionalProperties": False,
        "properties": {
            "package": {"type": "object", "required": ["ecosystem", "name"], "additionalProperties": False,
                        "properties": {"ecosystem": {"type": "string", "const": "npm"}, "name": package}},
            "versions": {"type": "array", "minItems": 1, "maxItems": 5,
                         "items": {"type": "string", "pattern": VERSION_PATTERN}},
        },
    }
    return {
        "Advisory": {
            "type": "object",
            "description": "An OSV advisory (https://ossf.github.io/osv-schema/) naming npm packages. This "
            "document describes the smallest useful form; the server also reads every other OSV field "
            "(ranges, database_specific.severity, references...) and GitHub's advisory object "
            "(`vulnerabilities`, `severity`).",
            "required": ["id", "affected"],
            "additionalProperties": False,
            "properties": {
                "id": {"type": "string", "pattern": "^[A-Za-z0-9-]{1,40}$"},
                "summary": {"type": "string", "maxLength": 300},
                "affected": {"type": "array", "minItems": 1, "maxItems": 3, "items": affected},
            },
        },
        "AdvisoryList": {
            "type": "object",
            "required": ["advisories"],
            "additionalProperties": False,
            "properties": {"advisories": {"type": "array", "items": recorded}},
        },
        "AdvisoryListXml": {
            "type": "object",
            "properties": {"advisories": {"type": "array", "items": recorded, "xml": {"wrapped": True}}},
            "xml": {"name": "advisories"},
        },
    }


def _account_audit_path(audit_parameters: list[dict[str, Any]]) -> dict[str, Any]:
    """The audit log's account changes: the package writes' paging and actor, plus the account."""
    account = {"name": "account", "in": "query", "required": False, "description": "Only the changes to this account",
               "schema": {"type": "string", "maxLength": AUDIT_NAME_MAX}}  # fmt: skip
    return {
        "/-/user-api/audit/accounts": {
            "get": {
                "operationId": "readAccountAudit",
                "summary": "Read the audit log's account changes (accounts created, removed, roles, passwords, "
                "tokens, groups, hooks), oldest first, a page at a time (admins only; `registry-gen audit-log "
                "--account`). Append-only: no route changes or removes an entry.",
                "parameters": [
                    *[p for p in audit_parameters if p["name"] in ("since", "from", "limit", "actor")],
                    account,
                ],
                "responses": _responses({"200": {"description": "A page of account changes", "content": {
                    "application/json": {"schema": _ref("AccountAuditPage")}}}}, (401, 403)),
            },
        },
    }


def _admin_paths() -> dict[str, Any]:
    def query(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
        return {"name": name, "in": "query", "required": False, "description": description, "schema": schema}

    audit_parameters = [
        query("since", "Entries after this sequence number (the `next` of the page before)",
              {"type": "integer", "minimum": 0, "maximum": 999_999_999}),
        query("from", "Entries of this day (UTC) on", {"type": "string", "format": "date", "maxLength": 10}),
        query("limit", "Entries per page", {"type": "integer", "minimum": 1, "maximum": AUDIT_MAX_LIMIT, "default": 100}),
        query("package", "Only the writes to this package", {"type": "string", "maxLength": AUDIT_NAME_MAX}),
        query("actor", "Only the writes of this user", {"type": "string", "maxLength": AUDIT_NAME_MAX}),
    ]
    return {
        "/-/user-api/audit": {
            "get": {
                "operationId": "readAuditLog",
                "summary": "Read the audit log: every accepted write with who made it, oldest first, a page at a time "
                "(admins only; `registry-gen audit-log`). Append-only: no route changes or removes an entry.",
                "parameters": audit_parameters,
                "responses": _responses({"200": {"description": "A page of entries", "content": {
                    "application/json": {"schema": _ref("AuditPage")}}}}, (401, 403)),
            },
        },
        **_account_audit_path(audit_parameters),
        **_hook_delivery_paths(),
        "/-/user-api/owners": {
            "post": {
                "operationId": "claimOwner",
                "summary": "Bind a package's maintainer name to an account (admins only; "
                "`registry-gen owner claim`).",
                "requestBody": _body("Claim"),
                "responses": {**_responses({"200": _success("Bound (or already bound)", "ClaimResult")},
                                           (401, 403, 404, 413, 415, 422)),
                              "404": {**_problem(404), "description": "No such package, or no active user of that name"}},
            },
        },
        "/-/user-api/advisories": {
            "post": {
                "operationId": "recordAdvisory",
                "summary": "Record an advisory that `npm audit` then reports (admins only; "
                "`registry-gen advisory add`). It is stored in the content source's advisories/ folder, "
                "named after its id (the same id replaces it).",
                "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("Advisory")}}},
                "responses": {**_responses({"201": _success("Recorded", "AdvisoryList", "AdvisoryListXml")},
                                           (401, 403, 413, 415)),
                              "400": {**_problem(400), "description": "Not JSON, neither OSV nor a GitHub "
                                      "advisory, no npm package named, or a range npm cannot read"}},
            },
        },
    }


def _hook_delivery_paths() -> dict[str, Any]:
    uuid_schema = {"type": "string", "format": "uuid"}
    hook = {"name": "hook", "in": "path", "required": True, "description": "The hook's id (npm hook ls)", "schema": uuid_schema}
    delivery = {"name": "delivery", "in": "path", "required": True, "description": "The delivery's id (its x-npm-delivery header)",
                "schema": uuid_schema}
    paging = [
        {"name": "offset", "in": "query", "required": False, "description": "Deliveries to skip (the `next` of the page before)",
         "schema": {"type": "integer", "minimum": 0, "default": 0}},
        {"name": "limit", "in": "query", "required": False, "description": "Deliveries per page",
         "schema": {"type": "integer", "minimum": 1, "maximum": DELIVERIES_MAX_LIMIT, "default": 50}},
    ]
    not_found = {**_problem(404), "description": "No such hook (or delivery of it), or the caller is not an administrator"}
    return {
        "/-/user-api/hooks/{hook}/deliveries": {
            "get": {
                "operationId": "listHookDeliveries",
                "summary": "Read a hook's delivery log, newest first: status, attempts, last answer or error, latency "
                "(admins only; `registry-gen hooks deliveries`). To anyone else the hook is not there (404).",
                "parameters": [hook, *paging],
                "responses": {**_responses({"200": {"description": "A page of deliveries", "content": {
                    "application/json": {"schema": _ref("DeliveryPage")}}}}, (401,)), "404": not_found},
            },
        },
        "/-/user-api/hooks/{hook}/deliveries/{delivery}/redeliver": {
            "post": {
                "operationId": "redeliverHookDelivery",
                "summary": "Queue a delivery again (a parked one too), due now, with the same delivery id "
                "(admins only; `registry-gen hooks redeliver`). The running deliverer attempts it within seconds.",
                "parameters": [hook, delivery],
                "responses": {**_responses({"202": {"description": "Queued", "content": {
                    "application/json": {"schema": _ref("Delivery")}}}}, (401, 403)), "404": not_found},
            },
        },
    }


def _delivery_schemas() -> dict[str, Any]:
    optional_text, optional_int = {"type": ["string", "null"]}, {"type": ["integer", "null"]}
    delivery = {
        "type": "object",
        "required": ["id", "hook", "seq", "event", "package", "status", "attempts"],
        "additionalProperties": False,
        "properties": {
            "id": {"type": "string", "description": "The delivery id (x-npm-delivery), the same on every attempt"},
            "hook": {"type": "string"}, "seq": {"type": "integer", "description": "The journal entry delivered"},
            "event": {"type": "string"}, "package": {"type": "string"},
            "status": {"type": "string", "enum": ["pending", "delivered", "parked"]},
            "attempts": {"type": "integer"}, "last_attempt": optional_text, "response_code": optional_int,
            "last_error": optional_text, "latency_ms": optional_int,
        },
    }
    page = {"type": "object", "required": ["deliveries", "next"], "additionalProperties": False,
            "properties": {"deliveries": {"type": "array", "items": _ref("Delivery")},
                           "next": {"type": ["integer", "null"], "description": "The `offset` of the next page; null at the end"}}}
    return {"Delivery": delivery, "DeliveryPage": page}


def _token_paths(user_id: dict[str, Any]) -> dict[str, Any]:
    key = {"name": "key", "in": "path", "required": True,
           "schema": {"type": "string", "pattern": "^[0-9a-fA-F-]{32,36}$"}}
    return {
        "/user/{id}/tokens": {
            "get": {
                "operationId": "listUserTokens",
                "summary": "List a user's tokens (admins: anyone's; users: their own)",
                "parameters": [user_id],
                "responses": _responses({"200": _success("The tokens", "TokenList", "TokenListXml")}, (401, 403, 404)),
            },
            "delete": {
                "operationId": "revokeUserTokens",
                "summary": "Revoke every token of a user (admins: anyone's; users: their own)",
                "parameters": [user_id],
                "responses": _responses({"204": {"description": "Revoked"}}, (401, 403, 404)),
            },
        },
        "/user/{id}/tokens/{key}": {
            "delete": {
                "operationId": "revokeUserToken",
                "summary": "Revoke one token of a user by its key",
                "parameters": [user_id, key],
                "responses": _responses({"204": {"description": "Revoked"}}, (401, 403, 404)),
            },
        },
    }


def _paging_parameters(max_page: int) -> list[dict[str, Any]]:
    return [
        {"name": "page", "in": "query", "required": False, "description": "1-based page number",
         "schema": {"type": "integer", "minimum": 1, "maximum": max_page, "default": 1}},
        {"name": "size", "in": "query", "required": False, "description": "Items per page",
         "schema": {"type": "integer", "minimum": 1, "maximum": MAX_SIZE, "default": DEFAULT_SIZE}},
    ]


def build_openapi(settings: Settings, *, max_body_bytes: int) -> dict[str, Any]:
    """The document served at /-/user-api/openapi.json."""
    keyword_schema = {"type": "string", "minLength": 1, "maxLength": KEYWORD_MAX, "pattern": KEYWORD_PATTERN}
    page_headers = {
        "Link": _header("RFC 8288 first/prev/next/last links (same parameters, other page)"),
        "X-Total-Count": _header("Total number of matching users", {"type": "string", "pattern": "^[0-9]+$"}),
    }
    user_headers = {"ETag": _header("Strong validator of the user's state; send it back in If-Match")}
    user_id = {"name": "id", "in": "path", "required": True, "schema": UUID_SCHEMA}
    problem_slugs = sorted({kind.slug for kind in PROBLEM_TYPES_BY_ERROR.values() if kind.slug})
    created_links = {
        "GetUser": {"operationId": "getUser", "parameters": {"id": "$response.body#/id"}},
        "DeleteUser": {"operationId": "deleteUser", "parameters": {"id": "$response.body#/id"}},
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Registry user service",
            "version": "1.0.0",
            "description": (
                "The `/user` resource. Representations are JSON or XML, chosen by `Accept` (406 otherwise); "
                "bodies are JSON or XML by `Content-Type` (415 otherwise), at most "
                f"{max_body_bytes} bytes (413). At most 10 query parameters, repeats included; unknown or "
                "repeated parameters are a 400. Errors are RFC 9457 problems; their `type` is `about:blank` "
                f"or `{TYPE_PREFIX}<slug>` with slug one of: {', '.join(problem_slugs)}. "
                f"Sign-up policy of this registry: `{settings.signup}`. Who may do what: AUTH.md."
            ),
        },
        "components": {
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
            "schemas": _schemas(max_body_bytes),
        },
        "security": [{"bearerAuth": []}],
        "paths": {
            "/user": {
                "get": {
                    "operationId": "listUsers",
                    "summary": "List users in pages (sign-up order)",
                    "parameters": _paging_parameters(LIST_MAX_PAGE),
                    "responses": _responses(
                        {"200": _success("A page of users", "UserPage", "UserPageXml", page_headers)}, (401,)
                    ),
                },
                "post": {
                    "operationId": "createUser",
                    "summary": "Create a user (sign-up policy: open, admin or closed)",
                    "security": [{}, {"bearerAuth": []}],
                    "requestBody": _body("UserCreate"),
                    "responses": _responses(
                        {"201": {**_success("Created", "User", headers={
                            **user_headers, "Location": _header("/user/{id} of the new user")}),
                            "links": created_links}},
                        (401, 403, 409, 413, 415, 422, 429),
                    ),
                },
                "put": {
                    "operationId": "updateUser",
                    "summary": "Update the user whose id is in the body",
                    "parameters": [{"name": "If-Match", "in": "header", "required": False,
                                    "description": "ETag from a previous read; 412 when it no longer matches",
                                    "schema": {"type": "string"}}],
                    "requestBody": _body("UserUpdate"),
                    "responses": _responses(
                        {"200": _success("Updated", "User", headers=user_headers)},
                        (401, 403, 404, 409, 412, 413, 415, 422),
                    ),
                },
            },
            "/user/search": {
                "get": {
                    "operationId": "searchUsers",
                    "summary": "Search users, one rule for every keyword length: a case-insensitive substring "
                    "of username or full name (and email, for admins); username exact and prefix matches "
                    f"first, then the rest in sign-up order. totalElements and X-Total-Count stop at {SEARCH_TOTAL_CAP} "
                    "(the most a client can page through).",
                    "parameters": [
                        *_paging_parameters(SEARCH_MAX_PAGE),
                        {"name": "keyword", "in": "query", "required": True, "schema": keyword_schema},
                        {"name": "keywork", "in": "query", "required": False, "deprecated": True,
                         "description": "Alias of keyword (the spelling of the spec's interface table). "
                         "Sending both with different values is a 400.",
                         "schema": keyword_schema},
                    ],
                    "responses": _responses(
                        {"200": _success("A page of matching users", "UserPage", "UserPageXml", page_headers)},
                        (401,),
                    ),
                },
            },
            "/user/{id}": {
                "get": {
                    "operationId": "getUser",
                    "summary": "Read one user",
                    "parameters": [user_id],
                    "responses": _responses({"200": _success("The user", "User", headers=user_headers)}, (401, 404)),
                },
                "patch": {
                    "operationId": "patchUser",
                    "summary": "Change some fields of a user (JSON Merge Patch, RFC 7396)",
                    "parameters": [user_id, {"name": "If-Match", "in": "header", "required": False,
                                             "description": "ETag from a previous read; 412 when it no longer "
                                             "matches", "schema": {"type": "string"}}],
                    "requestBody": {"required": True, "content": {
                        MERGE_PATCH_JSON: {"schema": _ref("UserPatch")},
                        **{media: {"schema": _ref("UserPatchXml")} for media in XML_TYPES}}},
                    "responses": {**_responses(
                        {"200": _success("Updated", "User", headers=user_headers)},
                        (401, 403, 404, 409, 412, 413, 422),
                    ), "415": {**_problem(415), "description": "The body is neither application/merge-patch+json "
                               "nor application/xml (UTF-8)", "headers": {
                                   "Accept-Patch": _header("The media types a PATCH body may have")}}},
                },
                "delete": {
                    "operationId": "deleteUser",
                    "summary": "Delete a user (admins only); the username stays reserved",
                    "parameters": [user_id],
                    "responses": _responses({"204": {"description": "Deleted"}}, (401, 403, 404, 409, 500)),
                },
            },
            **_token_paths(user_id),
            **_admin_paths(),
            "/-/user-api/tokens": {
                "post": {
                    "operationId": "createToken",
                    "summary": "Log in: credentials in the body, a bearer token back",
                    "security": [],
                    "requestBody": _body("Credentials"),
                    "responses": _responses(
                        {"201": _success("A new token", "Token")}, (401, 413, 415, 422, 429)
                    ),
                },
            },
            "/-/user-api/openapi.json": {
                "get": {
                    "operationId": "getOpenApi",
                    "summary": "This document",
                    "security": [],
                    "responses": {
                        "200": {
                            "description": "OpenAPI 3.1",
                            "content": {"application/json": {"schema": {"type": "object"}}},
                        },
                        **{str(s): _problem(s) for s in (400, 406, 414)},
                    },
                },
            },
        },
    }
