"""Step 4 of the request path: the semantic layer. Embed the question, search its scope, and
serve the nearest cached question's answer when it clears θ and the verifier accepts it.

Any failure (embedder, vector store, verifier, the per-lookup timeout) makes the request a plain
miss: a semantic hit is never served unchecked.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from deja.cache.exact.base import ExactStore
from deja.errors import CacheUnavailableError, EmbedderError
from deja.observability.metrics import Metrics
from deja.observability.outage import Outage
from deja.request import GatewayRequest, Outcome
from deja.semantic.cache import SEMANTIC_ERRORS, SemanticCache
from deja.semantic.scope import ContextRule, semantic_query
from deja.semantic.verifier import Candidate, Verifier
from deja.tenancy.thresholds import Thresholds
from middleware.lookup import Lookup

log = logging.getLogger("deja.pipeline")

Spawn = Callable[[Coroutine[Any, Any, None]], None]


@dataclass(frozen=True, slots=True)
class SemanticSettings:
    """How the semantic layer runs (θ lives in ``Thresholds``: it is tuned while running)."""

    timeout: float
    context_rule: ContextRule = "conversation"


class SemanticStep:
    """The semantic lookup and its failure accounting."""

    def __init__(
        self,
        cache: SemanticCache,
        exact: ExactStore,
        *,
        settings: SemanticSettings,
        thresholds: Thresholds,
        metrics: Metrics,
        spawn: Spawn,
        verifier: Verifier | None = None,
    ) -> None:
        self.cache = cache
        self.exact = exact
        self.settings = settings
        self.thresholds = thresholds
        self.metrics = metrics
        self.verifier = verifier
        self._spawn = spawn
        self.outage = Outage(
            log, "semantic layer skipped (serving as miss)", "semantic layer answering again"
        )

    async def lookup(self, req: GatewayRequest, lookup: Lookup) -> Lookup:
        """A semantic hit, or ``lookup`` with what storing the answer later needs."""
        if lookup.entry_id is None or lookup.outcome is Outcome.OFF:
            return lookup  # answers live in the exact store: with it off, a hit can't be served
        query = semantic_query(req, self.settings.context_rule, req.namespace)
        if query is None:
            return lookup
        lookup = dataclasses.replace(lookup, query=query)
        if not req.policy.read:
            return lookup
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.settings.timeout):
                vector, point = await self.cache.search(query, max_age=req.policy.max_age)
        except SEMANTIC_ERRORS as exc:
            self.failed(exc)
            return dataclasses.replace(lookup, query=None)
        finally:  # every attempt counts, failed ones too (the timeout alert divides by it)
            self.metrics.lookup("semantic", time.perf_counter() - started)
        self.outage.ok()
        score = point.score if point is not None else None
        if score is not None:
            self.metrics.similarity.observe(score)
        lookup = dataclasses.replace(lookup, vector=vector, similarity=score)
        configured = self.thresholds.resolve(req.tenant, req.model, req.tenant_threshold)
        threshold = max(configured, req.policy.min_similarity or 0.0)
        if point is None or point.score < threshold:
            return lookup
        try:
            answer = await self.exact.get(point.entry_id)
        except CacheUnavailableError:
            return lookup
        if answer is None:  # the entry expired or was evicted: drop its stale point
            self._spawn(self.forget(point.entry_id))
            return lookup
        candidate = Candidate(point=point, answer=answer)
        if self.verifier is not None and not await self.verifier.accept(query, candidate):
            return lookup
        return dataclasses.replace(lookup, outcome=Outcome.SEMANTIC, answer=answer)

    def failed(self, exc: BaseException) -> None:
        """Count and log (once per outage) a semantic failure."""
        kind = (
            "timeout"
            if isinstance(exc, TimeoutError)
            else "embedder"
            if isinstance(exc, EmbedderError)
            else "store"
        )
        self.metrics.count(self.metrics.semantic_errors, kind)
        self.outage.failed(exc)

    async def forget(self, entry_id: str) -> None:
        try:
            await self.cache.store.delete([entry_id])
        except SEMANTIC_ERRORS as exc:
            self.failed(exc)
