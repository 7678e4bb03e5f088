"""npm audit's endpoints, answered from the operator's advisories (registry_gen.advisories).

- `POST /-/npm/v1/security/advisories/bulk` (npm 7 and later): the advisories recorded for the
  requested package names.
- `POST /-/npm/v1/security/audits/quick` (npm 6): not supported; 404 with a message.
- No advisory folder: both answer 404 with a message naming the fix, so `npm audit` says the audit
  failed instead of printing "found 0 vulnerabilities".
"""

from __future__ import annotations

import json
import logging
import zlib
from typing import Any, Final

from registry_gen.advisories import advisory_folder, bulk_report, load_advisories
from registry_gen.settings import Settings

BULK_PATH: Final = "/-/npm/v1/security/advisories/bulk"
QUICK_PATH: Final = "/-/npm/v1/security/audits/quick"
MAX_INFLATED: Final = 16 * 1024 * 1024
MAX_BODY: Final = 1024 * 1024
NOT_SUPPORTED: Final = (
    "this registry has no advisory source, so it cannot audit: it does not claim your dependencies are safe. "
    "An operator can record advisories with `registry-gen advisory add FILE` (OSV or GitHub advisory JSON)."
)
logger = logging.getLogger(__name__)

def decode_bulk_body(raw: bytes, encoding: str) -> dict[str, Any]:
    """npm's gzip-compressed `{name: [versions]}`; ValueError when it is something else."""
    if encoding.strip().lower() == "gzip":
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        raw = inflater.decompress(raw, MAX_INFLATED)
        if inflater.unconsumed_tail:
            raise ValueError(f"the audit request inflates to more than {MAX_INFLATED} bytes")
    data = json.loads(raw or b"{}")
    if not isinstance(data, dict):
        raise ValueError("the audit request must be a JSON object of package names")
    return data


def audit_answer(settings: Settings, path: str, raw: bytes, encoding: str) -> tuple[str, Any]:
    """(status, body) for an audit request: the whole handler, without WSGI."""
    loaded = load_advisories(advisory_folder(settings))
    if loaded is None:
        return "404 Not Found", {"error": NOT_SUPPORTED}
    if path == QUICK_PATH:
        return "404 Not Found", {"error": "this registry answers npm 7+'s bulk advisory endpoint only; upgrade npm to audit"}
    advisories, problems = loaded
    for problem in problems:
        logger.warning("advisory skipped: %s", problem)
    try:
        request = decode_bulk_body(raw, encoding)
    except (ValueError, zlib.error) as exc:
        return "400 Bad Request", {"error": f"unreadable audit request: {exc}"}
    return "200 OK", bulk_report(advisories, request)
