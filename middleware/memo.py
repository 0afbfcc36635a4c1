"""A memo of byte-identical requests, in front of validation and canonical-key hashing.

Clients that repeat a question send the same bytes: the same body, the same headers. For those,
parsing the JSON, validating it, reading the cache headers, running the temporal rules and
hashing the canonical request give the same result every time. Profiled with py-spy under wrk
(an exact hit of a 544-byte answer), those steps were about a fifth of the gateway's CPU per
hit; the memo replaces them with one dict lookup.

What it maps, and why that keeps every promise:

- request bytes + the tenant + every header that shapes the request → a :class:`Prepared`: the
  validated request and the exact key. **Never → an answer**: every hit still reads the exact
  store, so an entry that is invalidated, flushed or expired is a miss the moment it is gone,
  whatever the memo holds.
- authentication and the rate limit run before the memo, on every request.
- the tenant (the object the key ring returned: name, cache switch, TTL, θ) is part of the memo
  key, so two tenants sending the same bytes never share an entry.
- only requests that validated are memoised; a request that fails validation is validated (and
  fails) every time.

Bounded: at most ``max_entries`` entries and ``MAX_BYTES`` of request bodies; a body over
``MAX_BODY_BYTES`` is never memoised. The oldest entry goes first.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass

from deja.request import GatewayRequest

#: The request headers that validation and the cache policy read. A new header read while
#: building a ``GatewayRequest`` must be added here, or two requests that differ only in it
#: would share a memo entry.
NAMESPACE_HEADER = "x-deja-namespace"
CORPUS_HEADER = "x-deja-corpus"
CONTEXT_ID_HEADER = "x-deja-context-id"
CORPUS_FILTER_HEADER = "x-deja-corpus-filter"
SHAPING_HEADERS = (
    "cache-control",
    "x-deja-ttl",
    "x-deja-threshold",
    "x-prefix-hash",
    NAMESPACE_HEADER,
    CORPUS_HEADER,
    CONTEXT_ID_HEADER,
    CORPUS_FILTER_HEADER,
)
#: Larger bodies are validated every time (long conversations rarely repeat byte for byte).
MAX_BODY_BYTES = 64 * 1024
#: Sum of the memoised bodies' sizes (each entry also holds the parsed body, a few times that).
MAX_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Prepared:
    """What the request path derives from a request's bytes alone: the validated request (its
    ``request_id`` is set per request), the exact key (None: not cacheable, or bypassed) and
    the bypass reason."""

    req: GatewayRequest
    entry_id: str | None
    bypass: str | None


def memo_key(endpoint: str, tenant: Hashable, raw: bytes, headers: Mapping[str, str]) -> Hashable:
    """The key of one request in the memo: everything a ``Prepared`` is derived from."""
    get = headers.get
    # spelled out (not a loop over SHAPING_HEADERS): this runs on every request
    return (
        endpoint,
        tenant,
        raw,
        get("cache-control"),
        get("x-deja-ttl"),
        get("x-deja-threshold"),
        get("x-prefix-hash"),
        get(NAMESPACE_HEADER),
        get(CORPUS_HEADER),
        get(CONTEXT_ID_HEADER),
        get(CORPUS_FILTER_HEADER),
    )


class RequestMemo:
    """Memo key → ``Prepared``, bounded by entries and body bytes, oldest out first."""

    def __init__(self, max_entries: int, max_bytes: int = MAX_BYTES) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: dict[Hashable, tuple[int, Prepared]] = {}
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> Prepared | None:
        found = self._entries.get(key)
        return found[1] if found is not None else None

    def put(self, key: Hashable, prepared: Prepared) -> None:
        size = len(prepared.req.raw)
        if self.max_entries <= 0 or size > MAX_BODY_BYTES or key in self._entries:
            return
        while self._entries and (
            len(self._entries) >= self.max_entries or self._bytes + size > self.max_bytes
        ):
            oldest = next(iter(self._entries))
            self._bytes -= self._entries.pop(oldest)[0]
        self._entries[key] = (size, prepared)
        self._bytes += size

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0
