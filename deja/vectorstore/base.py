"""The vector store interface of the semantic layer (step 4), shared by Qdrant Edge (embedded
default) and the Qdrant server client. One contract test suite runs against both.

A point is one cached question: its vector, and a payload holding the scope it may be served in,
the exact-cache entry id its answer lives under, and its lifetime. Search filters by scope and by
``expires_at > now`` inside the search, never after it.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

#: Payload keys that scope a lookup; each gets a keyword payload index.
SCOPE_FIELDS: tuple[str, ...] = ("tenant", "namespace", "model", "params_hash", "context_hash")


#: Keyword payload index on the provenance of RAG answers: ``corpus/document`` of each source.
SOURCES_FIELD = "sources"
#: Float payload indexes next to the keyword ones on ``SCOPE_FIELDS``.
FLOAT_PAYLOAD_FIELDS: tuple[str, ...] = ("expires_at", "created_at")
#: Payload key of the compound scope keyword (stored with each point, stripped from results).
SCOPE_KEY_FIELD = "scope_key"


def scope_key(scope: Scope) -> str:
    """All scope fields as one keyword: a JSON array in ``SCOPE_FIELDS`` order, injective, so
    equal keys mean equal scopes."""
    return json.dumps([getattr(scope, name) for name in SCOPE_FIELDS], separators=(",", ":"))


def stored_payload(point: VectorPoint) -> dict[str, Any]:
    """What is stored with a point: its payload plus the compound scope key."""
    payload = point.payload()
    payload[SCOPE_KEY_FIELD] = scope_key(point.scope)
    return payload


def point_id(entry_id: str) -> str:
    """Qdrant point ids must be UUIDs or integers: the entry id's first 128 bits as a UUID."""
    return str(uuid.UUID(hex=entry_id[:32]))


def collection_name(embedder_id: str, dim: int) -> str:
    """A collection per embedder identity and dimension, so vectors of different models never
    meet: e.g. ``deja_all-minilm-l6-v2-int8_384``."""
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in embedder_id.lower())
    return f"deja_{safe}_{dim}"


@dataclass(frozen=True, slots=True)
class Scope:
    """Where a cached question may be served. Every field must match exactly."""

    tenant: str
    model: str
    params_hash: str
    context_hash: str
    namespace: str = ""

    def as_payload(self) -> dict[str, str]:
        return {name: getattr(self, name) for name in SCOPE_FIELDS}


@dataclass(frozen=True, slots=True)
class VectorPoint:
    """One cached question to upsert."""

    entry_id: str
    vector: list[float]
    scope: Scope
    question: str
    created_at: float
    expires_at: float
    extra: dict[str, Any] = field(default_factory=dict)

    def payload(self) -> dict[str, Any]:
        return {
            **self.scope.as_payload(),
            "entry_id": self.entry_id,
            "question": self.question,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            **self.extra,
        }


@dataclass(frozen=True, slots=True)
class ScoredPoint:
    """A search result: cosine similarity in [-1, 1] and the stored payload."""

    entry_id: str
    score: float
    payload: dict[str, Any]


class VectorStore(Protocol):
    """Cosine-similarity store of cached questions. Implementations raise
    ``deja.errors.VectorStoreError`` for any backend failure."""

    name: str
    collection: str

    async def open(self) -> None:
        """Create the collection and its payload indexes when missing (idempotent)."""

    async def upsert(self, points: list[VectorPoint]) -> None:
        """Insert or replace points (by entry id)."""

    async def search(
        self,
        vector: list[float],
        scope: Scope,
        *,
        now: float,
        limit: int = 1,
        created_after: float | None = None,
    ) -> list[ScoredPoint]:
        """Nearest points in ``scope`` with ``expires_at > now`` (and ``created_at >=
        created_after`` when given), best first."""

    async def neighbours(
        self, vector: list[float], *, match: dict[str, str], now: float, limit: int
    ) -> list[ScoredPoint]:
        """Nearest unexpired points whose payload equals ``match`` on the given scope fields
        (any subset of tenant, namespace, model), best first — for the admin API."""

    async def delete(self, entry_ids: list[str]) -> None:
        """Remove points by entry id (missing ids are ignored)."""

    async def delete_expired(self, now: float) -> int:
        """Remove every point with ``expires_at <= now``; returns how many were removed."""

    async def delete_sourced(self, tenant: str, sources: list[str]) -> list[str]:
        """Remove the tenant's points whose ``sources`` payload names any of ``sources``
        (``corpus/document`` keys); returns their entry ids so the exact layer can drop the
        answers too (provenance invalidation)."""

    async def count(self) -> int:
        """How many points the collection holds (expired ones not yet swept included)."""

    async def close(self) -> None:
        """Release what the store created (flush to disk for the embedded store)."""
