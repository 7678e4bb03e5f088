"""An HTTP client for npm-protocol registries: retries with backoff, clear errors naming the entry.

Concurrency lives in the orchestrator (a bounded thread pool calls these methods)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from registry_gen.importers.model import ImportProblem
from registry_gen.importers.upstream import document_url, same_origin

USER_AGENT = "registry-gen-import (+npm-protocol)"
RETRIED_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RegistryClient:
    registry: str
    token: str | None = None
    attempts: int = 4
    backoff: float = 0.5  # seconds before the second attempt; doubles each time
    timeout: float = 60.0
    max_bytes: int = 512 * 1024 * 1024

    def document(self, name: str) -> dict[str, Any]:
        """The full package document (times included: the abbreviated form lacks them)."""
        raw = self.get(document_url(self.registry, name), name, accept="application/json")
        try:
            doc = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ImportProblem(f"{name}: the registry's answer is not JSON ({exc})") from exc
        if not isinstance(doc, dict) or not isinstance(doc.get("versions"), dict):
            raise ImportProblem(f"{name}: the registry's answer is not a package document")
        return doc

    def get(self, url: str, entry: str, accept: str = "*/*") -> bytes:
        headers = {"User-Agent": USER_AGENT, "Accept": accept}
        if self.token and same_origin(url, self.registry):
            headers["Authorization"] = f"Bearer {self.token}"
        delay = self.backoff
        for attempt in range(1, self.attempts + 1):
            try:
                with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=self.timeout) as reply:  # noqa: S310 - http(s) only, checked by the caller
                    data = reply.read(self.max_bytes + 1)
                if len(data) > self.max_bytes:
                    raise ImportProblem(f"{entry}: {url} is larger than {self.max_bytes} bytes")
                return data
            except urllib.error.HTTPError as error:
                if error.code not in RETRIED_STATUSES or attempt == self.attempts:
                    raise ImportProblem(f"{entry}: {url} answered {error.code}{_hint(error.code)}") from None
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as error:
                if attempt == self.attempts:
                    reason = getattr(error, "reason", error)
                    raise ImportProblem(f"{entry}: cannot reach {url} ({reason}); check the URL and the network") from None
            time.sleep(delay)  # backoff between retries of a failed request, not synchronisation
            delay *= 2
        raise AssertionError("unreachable")


def _hint(status: int) -> str:
    if status in (401, 403):
        return " (the registry wants a login: pass --token)"
    if status == 404:
        return " (no such package or file on that registry)"
    return ""
