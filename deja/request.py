"""The pipeline's input: one validated client request."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from deja.cache.keys import Endpoint


@dataclass(frozen=True, slots=True)
class CachePolicy:
    """The cache permissions of one request."""

    read: bool = True
    write: bool = True
    max_age: float | None = None
    ttl: int = 86_400
    #: X-Deja-Threshold: a stricter similarity threshold for this request (never a looser one).
    min_similarity: float | None = None


PATHS: dict[Endpoint, str] = {"chat": "/v1/chat/completions", "completion": "/v1/completions"}


class Outcome(StrEnum):
    """What the cache did for a request; sent as ``X-Deja-Cache``."""

    EXACT = "exact"
    SEMANTIC = "semantic"
    MISS = "miss"
    BYPASS = "bypass"
    OFF = "off"


@dataclass(frozen=True, slots=True)
class GatewayRequest:
    """A parsed, validated request. ``raw`` is forwarded to the replica byte for byte."""

    endpoint: Endpoint
    body: dict[str, Any]
    raw: bytes
    model: str
    stream: bool
    include_usage: bool
    #: False when the request can never be answered from or stored in the cache (n > 1, logprobs).
    cacheable: bool
    tenant: str
    policy: CachePolicy
    #: ``X-Prefix-Hash`` from the client: overrides the computed routing key.
    prefix_override: str | None = None
    #: ``X-Deja-Namespace``: a partition inside the tenant (part of every cache key and scope).
    namespace: str = ""
    #: The tenant's cache switch and own θ (from the keys file).
    cache: bool = True
    tenant_threshold: float | None = None
    #: ``X-Request-Id`` from the client, or one deja made; echoed and logged.
    request_id: str = ""
    #: When the request must be done, streams included (``time.monotonic()``; arrival +
    #: ``request_timeout_seconds``). None: the upstream client's default from now.
    deadline: float | None = None

    @property
    def path(self) -> str:
        return PATHS[self.endpoint]
