"""The semantic cache: embeds questions, searches and stores them in the vector store.

The answer itself lives in the exact store under the entry id; the vector store is an index over
questions, so removing an entry from the exact store removes its semantic hits too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from deja.cache.entry import CachedAnswer, source_keys
from deja.embedding.base import Embedder
from deja.errors import EmbedderError, VectorStoreError, VerifierError
from deja.observability.tracing import Tracing
from deja.semantic.index import ALIAS_FIELD, SOURCES_FIELD, ScoredPoint, VectorPoint, VectorStore
from deja.semantic.scope import SemanticQuery

log = logging.getLogger("deja.semantic")


class SemanticCache:
    """Embeds questions and searches/stores them in the vector store."""

    def __init__(
        self,
        embedder: Embedder,
        store: VectorStore,
        on_embedded: Callable[[float], None] | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.embedder = embedder
        self.store = store
        self.on_embedded = on_embedded
        self.tracing = tracing or Tracing()

    async def embed(self, query: SemanticQuery) -> list[float]:
        """The question's unit vector (timed, and a span of its own)."""
        started = time.perf_counter()
        with self.tracing.span("deja.embed"):
            vector = await self.embedder.embed(query.text)
        if self.on_embedded is not None:
            self.on_embedded(time.perf_counter() - started)
        return vector

    async def search(
        self, query: SemanticQuery, vector: list[float], *, max_age: float | None, limit: int = 1
    ) -> list[ScoredPoint]:
        """The ``limit`` nearest unexpired neighbours of ``vector`` in the query's scope (any
        score), best first."""
        now = time.time()
        created_after = now - max_age if max_age is not None else None
        return await self.store.search(
            vector, query.scope, now=now, limit=limit, created_after=created_after
        )

    async def add(
        self,
        query: SemanticQuery,
        *,
        entry_id: str,
        vector: list[float] | None,
        created_at: float,
        ttl: int,
        sources: list[str] | None = None,
    ) -> None:
        """Index a stored answer's question (embedding it first if the lookup did not), with
        the ``corpus/document`` keys of a RAG answer's sources."""
        if vector is None:
            vector = await self.embedder.embed(query.text)
        await self.store.upsert(
            [self.point(query, entry_id, vector, created_at, created_at + ttl, sources)]
        )

    async def add_alias(
        self, query: SemanticQuery, *, key: str, vector: list[float] | None, entry: CachedAnswer
    ) -> None:
        """Index ``query`` as an alias of ``entry`` under its own key: it inherits the entry's
        age, expiry and sources (``deja.cache.exact.aliases``)."""
        if vector is None:
            vector = await self.embedder.embed(query.text)
        sources = source_keys(entry.sources)
        point = self.point(query, key, vector, entry.created_at, entry.expires_at, sources)
        point.extra[ALIAS_FIELD] = entry.entry_id
        await self.store.upsert([point])

    def point(
        self,
        query: SemanticQuery,
        entry_id: str,
        vector: list[float],
        created_at: float,
        expires_at: float,
        sources: list[str] | None,
    ) -> VectorPoint:
        point = VectorPoint(
            entry_id=entry_id,
            vector=vector,
            scope=query.scope,
            question=query.text,
            created_at=created_at,
            expires_at=expires_at,
            extra={"embedder": self.embedder.model_id, "dim": self.embedder.dim},
        )
        if sources:
            point.extra[SOURCES_FIELD] = sources
        return point

    async def sweep(self) -> int:
        """Delete expired points; returns how many went."""
        try:
            removed = await self.store.delete_expired(time.time())
        except VectorStoreError as exc:
            log.warning("semantic sweep failed: %s", exc)
            return 0
        if removed:
            log.info("semantic sweep removed %d expired entries", removed)
        return removed


SEMANTIC_ERRORS = (EmbedderError, VectorStoreError, VerifierError, TimeoutError)
