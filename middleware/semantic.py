"""Step 4 of the request path: the semantic layer. Embed the question, take the ``k`` nearest
cached questions in its scope above θ, verify them in one batched call, and serve the best one
whose decision score reaches the cut-off for the request's precision target.

Any failure (embedder, vector store, verifier, the per-lookup timeout) makes the request a plain
miss: a semantic hit is never served unchecked. The miss keeps its question (``query``), so its
answer is still indexed; when the failure came before the temporal classifier could look at it
(no vector), the store step classifies it in the background first (:meth:`SemanticStep.settle`)
and stores nothing it cannot classify (issue 19: a timeout once let "Is there a queue at the
DMV?" be stored and served, and left 71 vectors for 343 answers); a vector the timed-out
lookup was still making is awaited there, not made twice. At most ``max_pending`` lookups
embed and verify at once (fewer while they run slow); the others wait their turn in line
for up to ``queue_wait`` seconds before their own ``timeout`` starts, then are skipped
(``shed``), a safe miss with no work started (``middleware.slots``). A candidate the
calibration table vetoes (a number the query does not share …) is never sent to the verifier:
it scores 0 either way. The optional judge (the model itself) decides grey-zone candidates;
shadow checks re-ask a sample of hits in the background.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from dataclasses import dataclass

from deja.cache.exact.base import ExactStore
from deja.errors import CacheUnavailableError, EmbedderError, VerifierError
from deja.observability.lookups import Candidate, Cut, LookupSample, RecentLookups
from deja.observability.metrics import Metrics
from deja.outage import Outage
from deja.request import GatewayRequest, Outcome
from deja.semantic.cache import SEMANTIC_ERRORS, SemanticCache
from deja.semantic.cutoffs import CalibrationTable
from deja.semantic.index import ScoredPoint
from deja.semantic.judge import Judge
from deja.semantic.learning import Learning
from deja.semantic.promote import Promoter
from deja.semantic.scope import ContextRule, SemanticQuery, semantic_query
from deja.semantic.shadow import ShadowChecks
from deja.semantic.verifier import Scored, Verifier, mismatches, rank, same_words, verify
from deja.temporal.classifier import TemporalClassifier
from deja.tenancy.thresholds import Thresholds
from middleware.greyzone import GreyZone, Spawn, entry_of
from middleware.lookup import Lookup
from middleware.slots import LookupSlots

log = logging.getLogger("deja.pipeline")

#: How long a background embedding (a shed or failed lookup's, before its answer is stored)
#: waits for a slot; past it, the answer is not stored.
SETTLE_WAIT_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class SemanticSettings:
    """How the semantic layer runs (θ and the precision target live in ``Thresholds``: they
    are tuned while running)."""

    timeout: float
    context_rule: ContextRule = "conversation"
    top_k: int = 4
    #: Serve a top candidate at or above this cosine without verifying it. Off by default:
    #: "Is it safe to eat raw eggs?" and "Is it not safe to eat raw eggs?" score 0.989.
    skip_verification_above: float | None = None
    #: Lookups embedding/verifying at once (the embedder and the verifier each run on one
    #: thread); more wait their turn in line, before their ``timeout`` starts (``LookupSlots``).
    max_pending: int = 4
    #: How long a lookup may wait in that line; past it, it is skipped as a miss (``shed``).
    queue_wait: float = 1.0


@dataclass(frozen=True, slots=True)
class Checks:
    """What decides and what checks a semantic hit; each part is optional."""

    verifier: Verifier | None = None
    table: CalibrationTable | None = None
    judge: Judge | None = None
    judge_floor: float = 0.80
    shadow: ShadowChecks | None = None
    classifier: TemporalClassifier | None = None
    promoter: Promoter | None = None
    learning: Learning | None = None


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
        checks: Checks | None = None,
        recent: RecentLookups | None = None,
    ) -> None:
        self.cache = cache
        self.exact = exact
        self.settings = settings
        self.thresholds = thresholds
        self.metrics = metrics
        self.checks = checks or Checks()
        self.recent = recent
        self._spawn = spawn
        self.outage = Outage(
            log, "semantic layer skipped (serving as miss)", "semantic layer answering again"
        )
        self.slots = LookupSlots(settings.max_pending, settings.queue_wait)
        judge = self.checks.judge
        self.grey = (
            None
            if judge is None
            else GreyZone(
                judge, spawn, self.checks.promoter, self.checks.learning, self.checks.shadow
            )
        )

    async def lookup(self, req: GatewayRequest, lookup: Lookup) -> Lookup:
        """A semantic hit, or ``lookup`` with what storing the answer later needs."""
        if lookup.entry_id is None or lookup.outcome is Outcome.OFF:
            return lookup  # answers live in the exact store: with it off, a hit can't be served
        query = semantic_query(req, self.settings.context_rule, req.namespace)
        if query is None:
            return lookup
        lookup = dataclasses.replace(lookup, query=query)
        # Nothing to read: embed only when the answer will be stored and the temporal
        # classifier must first say whether it may be.
        if not req.policy.read and (self.checks.classifier is None or not req.policy.write):
            return lookup
        started = time.perf_counter()  # the queue's wait counts in the lookup's latency
        if not await self.slots.acquire():
            self.metrics.count(self.metrics.semantic_errors, "shed")
            return lookup  # a safe miss, nothing started: stored (classified first) as any other
        slot = time.perf_counter()
        embedding: asyncio.Future[list[float]] | None = None
        try:
            async with asyncio.timeout(self.settings.timeout):
                embedding = asyncio.ensure_future(self.cache.embed(query))
                embedding.add_done_callback(seen)
                # Shielded: the store step needs the vector even when the lookup gives up.
                vector = await asyncio.shield(embedding)
                lookup, ranked = await self.candidates(req, lookup, query, vector)
        except SEMANTIC_ERRORS as exc:
            self.failed(exc)
            # The question is kept: its answer is still indexed, with the vector being made.
            return dataclasses.replace(lookup, embedding=pending(embedding))
        finally:  # every attempt counts, failed ones too (the timeout alert divides by it)
            self.slots.release()
            ended = time.perf_counter()
            self.slots.finished(ended - slot, self.settings.timeout)
            self.metrics.lookup("semantic", ended - started)
        self.outage.ok()
        if lookup.outcome is Outcome.BYPASS or not ranked:
            return lookup
        result = await self.decide(req, lookup, query, ranked)
        self.sample(req, query, ranked[0], result.outcome is Outcome.SEMANTIC)
        return result

    async def candidates(
        self, req: GatewayRequest, lookup: Lookup, query: SemanticQuery, vector: list[float]
    ) -> tuple[Lookup, list[Scored]]:
        """Search, drop what is below θ, verify the rest: candidates best first."""
        classifier = self.checks.classifier
        if classifier is not None and classifier.volatile(vector):
            self.metrics.count(self.metrics.bypasses, "temporal")
            return Lookup(Outcome.BYPASS, None, bypass="temporal"), []
        lookup = dataclasses.replace(lookup, vector=vector)
        if not req.policy.read:  # embedded for the classifier and the store: nothing to find
            return lookup, []
        points = await self.cache.search(
            query, vector, max_age=req.policy.max_age, limit=self.settings.top_k
        )
        best = points[0].score if points else None
        if best is not None:
            self.metrics.similarity.observe(best)
        lookup = dataclasses.replace(lookup, similarity=best)
        theta = self.thresholds.resolve(req.tenant, req.model, req.tenant_threshold)
        floor = max(theta, req.policy.min_similarity or 0.0)
        kept = [p for p in points if p.score >= floor]
        if not kept:
            self.sample(req, query, Scored(points[0], None) if points else None, False, floor)
        verifier, table = self.checks.verifier, self.checks.table
        if not kept or verifier is None or table is None:
            return lookup, [Scored(p, None) for p in kept]
        same = [p for p in kept if same_words(query.text, Scored(p, None).question)]
        if same:  # the same question up to case and punctuation: nothing to verify
            return dataclasses.replace(lookup, verifier_score=1.0), [Scored(same[0], 1.0)]
        skip = self.settings.skip_verification_above
        if skip is not None and kept[0].score >= skip:
            return lookup, [Scored(kept[0], None)]
        signals = mismatches(query.text, kept)
        started = time.perf_counter()
        logits = await verify(verifier, table, query.text, kept, signals)
        if logits is not None:
            self.metrics.verifier_seconds.observe(time.perf_counter() - started)
        ranked = rank(table, query.text, kept, logits or [0.0] * len(kept), signals)
        top = ranked[0].score
        if top is not None:
            self.metrics.verifier_score.observe(top)
        return dataclasses.replace(lookup, verifier_score=top), ranked

    async def decide(
        self, req: GatewayRequest, lookup: Lookup, query: SemanticQuery, ranked: list[Scored]
    ) -> Lookup:
        """Serve the best candidate at or above the cut-off; ask the judge about the grey zone."""
        table = self.checks.table
        orphans: set[str] = set()
        if ranked[0].score is None or table is None:  # cosine alone (or measured skip)
            hit = await self.serve(req, lookup, ranked[0], orphans)
            return hit if hit.answer is not None else without(lookup, ranked, orphans)
        learning = self.checks.learning
        target = self.target(req)
        tau = table.tau(target)
        cuts = [
            tau if learning is None else learning.cutoff(entry_of(c), tau, target) for c in ranked
        ]
        for candidate, cut in zip(ranked, cuts, strict=True):
            if (candidate.score or 0.0) >= cut:
                hit = await self.serve(req, lookup, candidate, orphans)
                if hit.answer is not None:
                    return hit
        lookup = without(lookup, ranked, orphans)
        if self.grey is None:
            return lookup
        low = table.tau(min(self.checks.judge_floor, target))
        grey = [  # an entry judged wrong at a score is not judged again under it (cut > tau)
            c
            for c, cut in zip(ranked, cuts, strict=True)
            if low <= (c.score or 0.0) < cut <= tau and c.point.entry_id not in orphans
        ]
        if not grey:
            return lookup
        if not await self.grey.ask(req, lookup, query, grey[0]):
            return lookup
        hit = await self.serve(req, lookup, grey[0], orphans)
        return hit if hit.answer is not None else without(lookup, [grey[0]], orphans)

    async def serve(
        self, req: GatewayRequest, lookup: Lookup, cand: Scored, orphans: set[str]
    ) -> Lookup:
        """The candidate's answer from the exact store, as a hit. A neighbour whose answer is
        gone (expired, evicted, invalidated, or lost with an in-process store at a restart) is
        an orphan: counted, added to ``orphans``, and its point deleted."""
        point: ScoredPoint = cand.point
        try:
            answer = await self.exact.get(point.entry_id)
        except CacheUnavailableError:
            return lookup
        if answer is None:
            orphans.add(point.entry_id)
            self.metrics.semantic_orphans.inc()
            self._spawn(self.forget(point.entry_id))
            return lookup
        if self.checks.shadow is not None:
            self.checks.shadow.maybe_check(req, answer, point.score, cand.score)
        return dataclasses.replace(
            lookup,
            outcome=Outcome.SEMANTIC,
            answer=answer,
            similarity=point.score,
            verifier_score=cand.score,
        )

    def target(self, req: GatewayRequest) -> float:
        """The request's precision target, raised by its tenant's live precision (if so)."""
        learning = self.checks.learning
        if learning is not None:
            return learning.target(req.tenant, req.model)
        return self.thresholds.precision.resolve(req.tenant, req.model)

    def sample(
        self,
        req: GatewayRequest,
        query: SemanticQuery,
        best: Scored | None,
        served: bool,
        floor: float = 0.0,
    ) -> None:
        """Feed the recent-lookup ring (the console's histograms, near misses, θ preview): a
        verified candidate was judged against τ, an unverified one against θ (``floor``)."""
        if self.recent is None:
            return
        score = best.score if best is not None else None
        cut: Cut = "theta"
        if score is not None and self.checks.table is not None:
            cut = "tau"
            floor = self.checks.table.tau(self.target(req))
        similarity = best.point.score if best is not None else None
        candidate = None
        if best is not None:
            candidate = Candidate(  # an alias's vector: its entry (what a label is about)
                query.text, best.question, entry_of(best), best.point.score, score
            )
        sample = LookupSample(
            time.time(),
            req.tenant,
            req.model,
            req.tenant_threshold,
            similarity,
            score,
            served,
            candidate.cut() if candidate is not None else None,
        )
        self.recent.record(sample, sample.candidate, cut, floor)

    def failed(self, exc: BaseException) -> None:
        """Count and log (once per outage) a semantic failure."""
        kind = (
            "timeout"
            if isinstance(exc, TimeoutError)
            else "embedder"
            if isinstance(exc, EmbedderError)
            else "verifier"
            if isinstance(exc, VerifierError)
            else "store"
        )
        if kind == "verifier":
            self.metrics.verifier_errors.inc()
        self.metrics.count(self.metrics.semantic_errors, kind)
        self.outage.failed(exc)

    async def settle(self, lookup: Lookup) -> Lookup | None:
        """Before a miss is stored (background): a lookup that failed or was shed before the
        temporal classifier saw it gets its vector now (the one its lookup started, else one
        made in the lookups' queue) and is classified. None: do not store (the question is
        time-dependent, or it could not be embedded, so nobody can tell)."""
        classifier = self.checks.classifier
        if lookup.query is None or lookup.vector is not None:
            return lookup
        try:
            if lookup.embedding is not None:
                vector: list[float] | None = await lookup.embedding
            else:
                vector = await self.embed_queued(lookup.query)
        except SEMANTIC_ERRORS as exc:
            self.failed(exc)
            vector = None
        if vector is None:  # failed, or no slot came
            # Without a classifier nothing needs deciding: stored, SemanticCache.add retries.
            return None if classifier is not None else dataclasses.replace(lookup, embedding=None)
        if classifier is not None and classifier.volatile(vector):
            self.metrics.count(self.metrics.bypasses, "temporal")
            return None
        return dataclasses.replace(lookup, vector=vector, embedding=None)

    async def embed_queued(self, query: SemanticQuery) -> list[float] | None:
        """Embed in the lookups' queue, behind every lookup (so background work never crowds
        them out on the embedder's thread), waiting up to ``SETTLE_WAIT_SECONDS`` for a slot;
        None (counted as a semantic store error) when none came."""
        if not await self.slots.acquire(SETTLE_WAIT_SECONDS, background=True):
            self.metrics.count(self.metrics.store_errors, "semantic")
            return None
        try:
            return await self.cache.embed(query)
        finally:
            self.slots.release()

    async def forget(self, entry_id: str) -> None:
        try:
            await self.cache.store.delete([entry_id])
        except SEMANTIC_ERRORS as exc:
            self.failed(exc)


def pending(embedding: asyncio.Future[list[float]] | None) -> asyncio.Future[list[float]] | None:
    """The embedding a failed lookup leaves running, for the store step to await; None when
    there is none or it failed (the store step embeds again)."""
    if embedding is None or (
        embedding.done() and (embedding.cancelled() or embedding.exception() is not None)
    ):
        return None
    return embedding


def seen(embedding: asyncio.Future[list[float]]) -> None:
    """Mark a shielded embedding's failure as seen: nobody may await it (the client left, or
    the miss is not stored), and asyncio would log it as never retrieved."""
    if not embedding.cancelled():
        embedding.exception()


def without(lookup: Lookup, ranked: list[Scored], orphans: set[str]) -> Lookup:
    """A miss's similarity and verifier score describe the closest *live* candidate: an orphan
    (a point whose answer is gone) is never reported, e.g. as the 1.0000 of the same question
    asked again after its answer was lost."""
    if not orphans:
        return lookup
    live = [c for c in ranked if c.point.entry_id not in orphans]
    return dataclasses.replace(
        lookup,
        similarity=max((c.point.score for c in live), default=None),
        verifier_score=live[0].score if live else None,
    )
