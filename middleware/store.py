"""Step 8 of the request path: a complete, cacheable answer is stored, off the response path,
in the exact layer and then (its question) in the semantic layer.

Called once per replica call, by the producer (``middleware.produce``), whether one client or a
whole flight of identical requests waits for the answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from deja.cache.entry import CachedAnswer, source_keys
from deja.cache.exact.base import ExactStore
from deja.errors import CacheUnavailableError
from deja.observability.metrics import Metrics
from deja.observability.tracing import Tracing
from deja.request import GatewayRequest
from deja.semantic.cache import SEMANTIC_ERRORS
from deja.semantic.scope import question_text
from middleware.lookup import Lookup
from middleware.semantic import SemanticStep
from middleware.tasks import BackgroundTasks


class StoreStep:
    """Writes answers in a background task: the response never waits for the stores."""

    def __init__(
        self,
        exact: ExactStore,
        metrics: Metrics,
        tracing: Tracing,
        background: BackgroundTasks,
        semantic_step: SemanticStep | None = None,
    ) -> None:
        self.exact = exact
        self.metrics = metrics
        self.tracing = tracing
        self.background = background
        self.semantic_step = semantic_step

    def store(
        self,
        req: GatewayRequest,
        lookup: Lookup,
        answer: CachedAnswer,
        sources: list[dict[str, Any]] | None,
    ) -> asyncio.Task[None] | None:
        """8. store ``answer`` under the lookup's entry id, with the RAG ``sources`` it was
        built from (the exact entry holds the records, the question's vector their
        ``corpus/document`` keys, which provenance invalidation matches on). Returns the
        background write, which a cross-process flight lock is held until."""
        if lookup.entry_id is None:
            return None
        return self.background.spawn(self.write(req, lookup.entry_id, lookup, answer, sources))

    async def write(
        self,
        req: GatewayRequest,
        entry_id: str,
        lookup: Lookup,
        built: CachedAnswer,
        sources: list[dict[str, Any]] | None,
    ) -> None:
        """The background task: the exact entry, then the question's vector. A miss whose
        lookup failed before the temporal classifier saw it is classified first, and not
        stored when it is time-dependent or cannot be classified (``SemanticStep.settle``)."""
        semantic = self.semantic_step
        if semantic is not None:
            settled = await semantic.settle(lookup)
            if settled is None:
                return
            lookup = settled
        ttl = req.policy.ttl
        answer = dataclasses.replace(
            built,
            tenant=req.tenant,
            namespace=req.namespace,
            question=question_text(req) or None,
            expires_at=built.created_at + ttl,
            sources=sources,
        )
        with self.tracing.span("deja.store"):
            try:
                await self.exact.set(entry_id, answer, ttl)
            except CacheUnavailableError:
                self.metrics.count(self.metrics.store_errors, "exact")
                return  # already logged by the store; the answer was served regardless
            if semantic is None or lookup.query is None:
                return
            try:
                await semantic.cache.add(
                    lookup.query,
                    entry_id=entry_id,
                    vector=lookup.vector,
                    created_at=answer.created_at,
                    ttl=ttl,
                    sources=source_keys(sources),
                )
            except SEMANTIC_ERRORS as exc:
                self.metrics.count(self.metrics.store_errors, "semantic")
                semantic.failed(exc)
