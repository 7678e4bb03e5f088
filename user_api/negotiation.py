"""JSON or XML: choosing a response type from Accept, reading a body by Content-Type, and encoding.

XML is parsed only with defusedxml and with DTDs forbidden, so entity bombs and external entities
are refused before anything is expanded or fetched. The body size is bounded before parsing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from xml.etree import ElementTree

import defusedxml.ElementTree as SafeElementTree
from defusedxml import DefusedXmlException

from user_api.errors import MalformedBody, NotAcceptable, UnsupportedMediaType, UnsupportedPatchType

JSON: Final = "json"
XML: Final = "xml"

# media type -> (format, specificity rank used to break q ties in favour of JSON)
_OFFERS: Final = {
    "application/json": JSON,
    "application/xml": XML,
    "text/xml": XML,
}
# PATCH bodies: RFC 7396 merge patches, or a partial <user> in XML with the same meaning.
MERGE_PATCH_JSON: Final = "application/merge-patch+json"
PATCH_TYPES: Final = (MERGE_PATCH_JSON, "application/xml", "text/xml")
PROBLEM_TYPES: Final = {JSON: "application/problem+json", XML: "application/problem+xml"}
PROBLEM_NAMESPACE: Final = "urn:ietf:rfc:7807"
# XML 1.0 cannot carry these; they are replaced rather than emitting a broken document.
_NOT_XML_CHARS: Final = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


@dataclass(frozen=True)
class MediaChoice:
    format: str
    content_type: str


DEFAULT_CHOICE: Final = MediaChoice(JSON, "application/json")


def parse_accept(header: str) -> list[tuple[str, float]]:
    """(media range, q) of each part of an Accept header, lower-cased; a bad q counts as 0.
    The one Accept parser: the /user app negotiates with it, the static tree picks the abbreviated document."""
    ranges: list[tuple[str, float]] = []
    for part in header.split(","):
        pieces = [p.strip() for p in part.split(";")]
        media = pieces[0].lower()
        if not media:
            continue
        quality = 1.0
        for param in pieces[1:]:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
                if not 0.0 <= quality <= 1.0:
                    quality = 0.0
        ranges.append((media, quality))
    return ranges


def _quality(offer: str, ranges: list[tuple[str, float]]) -> float:
    """The q of the most specific range matching `offer` (RFC 9110 §12.5.1)."""
    kind, _, _sub = offer.partition("/")
    best: tuple[int, float] | None = None
    for media, quality in ranges:
        if media == offer:
            specificity = 2
        elif media == f"{kind}/*":
            specificity = 1
        elif media == "*/*":
            specificity = 0
        else:
            continue
        if best is None or specificity > best[0]:
            best = (specificity, quality)
    return 0.0 if best is None else best[1]


def negotiate(accept: str | None) -> MediaChoice:
    """JSON unless Accept prefers XML; NotAcceptable (406) when neither is acceptable."""
    if accept is None or not accept.strip():
        return DEFAULT_CHOICE
    ranges = parse_accept(accept)
    scored = [(_quality(offer, ranges), -index, offer) for index, offer in enumerate(_OFFERS)]
    quality, _, offer = max(scored)
    if quality <= 0.0:
        raise NotAcceptable()
    return MediaChoice(_OFFERS[offer], offer)


# ---- request bodies -------------------------------------------------------------------------


def body_format(content_type: str | None, offers: Mapping[str, str] = _OFFERS,
                refusal: type[UnsupportedMediaType] = UnsupportedMediaType) -> str:
    """JSON or XML from Content-Type (charset allowed, UTF-8 only); `refusal` (415) otherwise."""
    if not content_type:
        raise refusal()
    media, *params = [p.strip() for p in content_type.split(";")]
    fmt = offers.get(media.lower())
    if fmt is None:
        raise refusal()
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip().strip('"').lower() not in ("utf-8", "utf8"):
            raise UnsupportedMediaType("Bodies must be UTF-8.")
    return fmt


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise MalformedBody("The JSON object repeats a member name.")
        result[key] = value
    return result


def _refuse_constant(name: str) -> Any:
    raise MalformedBody("NaN and Infinity are not JSON.")


def parse_json_object(raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates, parse_constant=_refuse_constant)
    except MalformedBody:
        raise
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise MalformedBody("The body is not valid UTF-8 JSON.") from None
    if not isinstance(data, dict):
        raise MalformedBody("The body must be a JSON object.")
    return data


def parse_xml_object(raw: bytes, *, root: str) -> dict[str, str | None]:
    """`<root><field>text</field>...</root>` -> {field: text}; anything else is malformed."""
    try:
        element = SafeElementTree.fromstring(raw, forbid_dtd=True, forbid_entities=True, forbid_external=True)
    except DefusedXmlException:
        raise MalformedBody("XML bodies may not contain a DTD, entities or external references.") from None
    except (ElementTree.ParseError, ValueError):
        raise MalformedBody("The body is not well-formed XML.") from None
    if element.tag != root or element.attrib:
        raise MalformedBody(f"The XML root element must be <{root}> without attributes.")
    if (element.text or "").strip():
        raise MalformedBody(f"<{root}> may hold only elements.")
    fields: dict[str, str | None] = {}
    for child in element:
        if not isinstance(child.tag, str) or "}" in child.tag or len(child) or child.attrib:
            raise MalformedBody("Each field must be a plain element holding text.")
        if child.tag in fields:
            raise MalformedBody("The XML body repeats an element.")
        if (child.tail or "").strip():
            raise MalformedBody(f"<{root}> may hold only elements.")
        fields[child.tag] = child.text or None  # XML has no null: an empty element means "no value"
    return fields


def parse_body(raw: bytes, content_type: str | None, *, xml_root: str) -> dict[str, Any]:
    fmt = body_format(content_type)
    if fmt == JSON:
        return parse_json_object(raw)
    return parse_xml_object(raw, root=xml_root)


def parse_patch_body(raw: bytes, content_type: str | None, *, xml_root: str) -> dict[str, Any]:
    """A merge patch: application/merge-patch+json, or XML where an empty element is null."""
    offers = {MERGE_PATCH_JSON: JSON, "application/xml": XML, "text/xml": XML}
    fmt = body_format(content_type, offers, UnsupportedPatchType)
    if fmt == JSON:
        return parse_json_object(raw)
    return parse_xml_object(raw, root=xml_root)


# ---- responses --------------------------------------------------------------------------------


def encode_json(data: Mapping[str, Any]) -> bytes:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _xml_text(value: Any) -> str:
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return _NOT_XML_CHARS.sub("\ufffd", text)


def _build(parent: ElementTree.Element, name: str, value: Any, item_names: Mapping[str, str]) -> None:
    if value is None:
        return  # absent optional fields are omitted, as in JSON
    child = ElementTree.SubElement(parent, name)
    if isinstance(value, Mapping):
        for key, inner in value.items():
            _build(child, key, inner, item_names)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _build(child, item_names.get(name, "i"), item, item_names)
    else:
        child.text = _xml_text(value)


def encode_xml(root: str, data: Mapping[str, Any], *, item_names: Mapping[str, str] | None = None,
               namespace: str | None = None) -> bytes:
    """Elements named after the JSON members, no attributes; list items named per `item_names`."""
    element = ElementTree.Element(root)
    if namespace:
        element.set("xmlns", namespace)
    for key, value in data.items():
        _build(element, key, value, item_names or {})
    declaration = b'<?xml version="1.0" encoding="UTF-8"?>\n'
    return declaration + ElementTree.tostring(element, encoding="utf-8", xml_declaration=False)
