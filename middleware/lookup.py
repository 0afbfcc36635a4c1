"""Steps 1-4 of the request path: policy → bypass → exact → semantic, into a :class:`Lookup`.

1. policy: ``req.policy`` (``Cache-Control``, ``X-Deja-*``), parsed at admission
   (``middleware.policy``).
2. bypass: a question whose answer depends on when it is asked skips both cache layers and is
   not stored (the temporal rules; the classifier on the embedding runs in step 4).
3. exact: the canonical request's key (``cache_key``, the entry id) → ``AliasedStore.get`` (an
   alias resolves to its entry's answer).
4. semantic: ``middleware.semantic.SemanticStep`` (embed, search the scope, verify).

The :class:`Lookup` is either an answer to replay, or what a miss needs downstream: the entry id,
the question and its vector, and :attr:`Lookup.storable`, the one decision "may this request's
answer be stored".
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass
from typing import Protocol

from deja.cache.entry import CachedAnswer
from deja.cache.exact.aliases import AliasedStore
from deja.cache.keys import cache_key
from deja.diskspace import DiskSpace
from deja.errors import CacheUnavailableError
from deja.observability.metrics import Metrics
from deja.observability.tracing import Tracing
from deja.request import GatewayRequest, Outcome
from deja.semantic.scope import SemanticQuery, question_text
from deja.temporal.rules import TemporalDetector
from middleware.memo import Prepared


@dataclass(slots=True)
class Lookup:
    """An answer to replay, or what a miss needs to be stored. Treat it as immutable (derive
    with ``dataclasses.replace``); not ``frozen`` only because a frozen ``__init__`` costs
    ~2 µs more on every request (it sets each field through ``object.__setattr__``).

    ``entry_id`` is this request's cache key, the id its answer is (or would be) stored under in
    every layer; None when the request may not be cached at all.
    """

    outcome: Outcome
    entry_id: str | None
    answer: CachedAnswer | None = None
    bypass: str | None = None
    similarity: float | None = None
    verifier_score: float | None = None
    query: SemanticQuery | None = None
    vector: list[float] | None = None
    #: The question's vector still being made when the semantic lookup gave up (a timeout),
    #: for the store step to await instead of embedding the question twice.
    embedding: asyncio.Future[list[float]] | None = None
    #: The replica's answer to this request may be stored (set only by :meth:`miss`).
    storable: bool = False

    @classmethod
    def miss(cls, outcome: Outcome, entry_id: str | None, req: GatewayRequest) -> Lookup:
        """A miss, and the one place that decides whether its answer may be stored: it has an
        entry id (cacheable, not bypassed, an exact store to hold it) and the request's policy
        writes (no ``no-store``, no ``X-Deja-TTL: 0``)."""
        return cls(outcome, entry_id, storable=entry_id is not None and req.policy.write)


def servable(req: GatewayRequest, answer: CachedAnswer | None) -> CachedAnswer | None:
    """``answer`` when this request may be served it from the exact store: it reads the cache
    (not ``Cache-Control: no-cache``) and the answer is within its ``max-age``. The one rule for
    step 3 and for a single-flight leader's second read (``FlightStep.stored_meanwhile``)."""
    if answer is None or not req.policy.read or answer.older_than(req.policy.max_age):
        return None
    return answer


class SemanticLookup(Protocol):
    """Step 4 as step 3 sees it (``middleware.semantic.SemanticStep``, which builds on
    :class:`Lookup`): a protocol, so the import points one way."""

    async def lookup(self, req: GatewayRequest, lookup: Lookup) -> Lookup: ...


class LookupStep:
    """Steps 1-4: a hit to replay, or a miss that says whether and where to store its answer."""

    def __init__(
        self,
        exact: AliasedStore | None,
        metrics: Metrics,
        tracing: Tracing,
        *,
        semantic_step: SemanticLookup | None = None,
        temporal: TemporalDetector | None = None,
        space: DiskSpace | None = None,
    ) -> None:
        self.exact = exact
        #: The data disk: below its reserve a miss is served but not stored (no entry id).
        self.space = space
        self.metrics = metrics
        self.tracing = tracing
        self.semantic_step = semantic_step
        self.temporal = temporal

    def prepare(self, req: GatewayRequest) -> Prepared:
        """What steps 2 and 3 derive from the request alone, so a byte-identical request can
        reuse it (``middleware.memo``): the bypass reason and the exact key."""
        reason = self.bypass(req)
        entry_id = None
        if reason is None and self.exact is not None and req.cache and req.cacheable:
            entry_id = cache_key(req.tenant, req.endpoint, req.body, req.key_namespace)
        return Prepared(req, entry_id, reason)

    async def lookup(self, req: GatewayRequest, prepared: Prepared) -> Lookup:
        """Steps 2-4 (step 1, ``req.policy``, was parsed at admission)."""
        reason = prepared.bypass
        if reason is not None:
            self.metrics.count(self.metrics.bypasses, reason)
            return Lookup(Outcome.BYPASS, None, bypass=reason)
        with self.tracing.span("deja.exact"):
            lookup = await self.exact_lookup(req, prepared.entry_id)
        if lookup.answer is None and self.semantic_step is not None:
            with self.tracing.span("deja.semantic"):
                lookup = await self.semantic_step.lookup(req, lookup)
        if lookup.answer is None and self.space is not None and self.space.low:
            # disk full: served, not stored (no entry id, no vector, not a flight to share)
            return dataclasses.replace(lookup, entry_id=None, query=None, storable=False)
        return lookup

    def bypass(self, req: GatewayRequest) -> str | None:
        """2. bypass: the reason (``temporal``) this request skips the cache because its answer
        is time-dependent, else None."""
        if self.exact is None or not req.cache or self.temporal is None:
            return None
        found = self.temporal.check(question_text(req))
        return found.reason if found is not None else None

    async def exact_lookup(self, req: GatewayRequest, entry_id: str | None) -> Lookup:
        """3. exact: a hit, or a miss that carries the entry id its answer will be stored
        under. ``entry_id`` is the request's exact key, computed or memoised by ``prepare``;
        it is None exactly when the request is not cacheable."""
        store = self.exact
        if store is None or not req.cache:
            return Lookup(Outcome.OFF, None)
        if entry_id is None or not req.policy.read:
            return Lookup.miss(Outcome.MISS, entry_id, req)
        started = time.perf_counter()
        try:
            answer = await store.get(entry_id)
        except CacheUnavailableError:
            self.metrics.count(self.metrics.store_errors, "exact")
            return Lookup.miss(Outcome.OFF, entry_id, req)
        self.metrics.lookup("exact", time.perf_counter() - started)
        answer = servable(req, answer)
        if answer is None:
            return Lookup.miss(Outcome.MISS, entry_id, req)
        return Lookup(Outcome.EXACT, entry_id, answer)
