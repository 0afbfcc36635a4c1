"""The semantic cache: embeds questions, searches and stores them in the vector store.

The answer itself lives in the exact store under the entry id; the vector store is an index over
questions, so removing an entry from the exact store removes its semantic hits too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from deja.embedding.base import Embedder
from deja.errors import EmbedderError, VectorStoreError, VerifierError
from deja.observability.tracing import Tracing
from deja.semantic.index import SOURCES_FIELD, ScoredPoint, VectorPoint, VectorStore
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
        point = VectorPoint(
            entry_id=entry_id,
            vector=vector,
            scope=query.scope,
            question=query.text,
            created_at=created_at,
            expires_at=created_at + ttl,
            extra={"embedder": self.embedder.model_id, "dim": self.embedder.dim},
        )
        if sources:
            point.extra[SOURCES_FIELD] = sources
        await self.store.upsert([point])

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
