"""The semantic layer: the embedder (shared with the corpora), the cache's vector store, the
verifier and its calibration table, the judge, shadow checks and the temporal bypass, the
semantic cache and its step."""

from __future__ import annotations

import logging
import re
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.wiring.vectors import VectorBackend
from config.problems import Problem
from config.settings import ConfigError, Settings
from deja.cache.entry import CachedAnswer
from deja.cache.exact.aliases import AliasedStore
from deja.embedding.base import Embedder
from deja.errors import VerifierError
from deja.observability.audit import AuditTrail
from deja.observability.lookups import RecentLookups
from deja.observability.metrics import Metrics
from deja.observability.tracing import Tracing
from deja.request import GatewayRequest
from deja.semantic.cache import SemanticCache
from deja.semantic.correction import Correction
from deja.semantic.crossencoder import MODEL_FILE, SHIPPED_DIR, check_sums, load_verifier
from deja.semantic.cutoffs import CALIBRATION_FILE, CalibrationTable, load_table
from deja.semantic.evidence import Evidence
from deja.semantic.index import QUESTIONS, VectorStore
from deja.semantic.judge import Judge
from deja.semantic.labelled import Label, LabelledPairs
from deja.semantic.learning import Learning
from deja.semantic.promote import Promoter
from deja.semantic.shadow import OnVerdict, ShadowChecks
from deja.semantic.verifier import Verifier
from deja.temporal.classifier import load_classifier
from deja.temporal.rules import TemporalDetector
from deja.tenancy.thresholds import Thresholds
from deja.upstream.upstream import Upstream
from middleware.semantic import Checks, SemanticSettings, SemanticStep
from middleware.tasks import BackgroundTasks

log = logging.getLogger("deja")

#: θ when cosine similarity alone decides (verifier off): the smallest θ whose pairwise precision
#: on qqp_dev reached 0.90 (README, "Choosing θ").
COSINE_ONLY_THETA = 0.98
#: Seconds allowed to the vector store's calls off the request path (on a Qdrant server).
VECTOR_MAINTENANCE_SECONDS = 10.0


def temporal_detector(settings: Settings) -> TemporalDetector | None:
    if not settings.temporal_bypass:
        return None
    return TemporalDetector(settings.temporal_extra_patterns)


def short(text: str, width: int = 80) -> str:
    """The first clause of a long description (the calibration's provenance is ~600 chars; the
    whole of it is in ``GET /admin/semantic``)."""
    head = re.split(r"[,;(]", text, maxsplit=1)[0].strip()
    return head if len(head) <= width else head[: width - 1] + "…"


def load_embedder(settings: Settings) -> Embedder:
    if settings.embedder == "sentence-transformers":
        from deja.embedding.st import load_st_embedder

        return load_st_embedder(settings.embedder_model)
    from deja.embedding.onnx.embedder import load_onnx_embedder

    model_dir = settings.model_dir or settings.data_dir / "models"
    return load_onnx_embedder(
        model_dir, threads=settings.embedder_threads, batching=settings.embedder_batching
    )


def vector_store(settings: Settings, embedder: Embedder, vectors: VectorBackend) -> VectorStore:
    """The cache's index of questions, in a collection of its embedder's."""
    timeout = settings.semantic_timeout_seconds
    return VectorStore(
        vectors.collection(
            QUESTIONS, embedder, timeout=timeout, maintenance_timeout=VECTOR_MAINTENANCE_SECONDS
        )
    )


def open_embedder(stack: AsyncExitStack, settings: Settings) -> Embedder | None:
    """The one embedder of the process, shared by the semantic cache and the corpora; None when
    neither is on."""
    semantic = settings.cache_enabled and settings.semantic_enabled
    if not (semantic or settings.corpora_enabled):
        return None
    embedder = load_embedder(settings)
    stack.push_async_callback(embedder.close)
    return embedder


async def semantic_cache(
    stack: AsyncExitStack,
    settings: Settings,
    metrics: Metrics,
    tracing: Tracing,
    embedder: Embedder | None,
    vectors: VectorBackend,
) -> SemanticCache | None:
    if not (settings.cache_enabled and settings.semantic_enabled) or embedder is None:
        return None
    store = vector_store(settings, embedder, vectors)
    await store.open()
    stack.push_async_callback(store.close)
    log.info(
        "semantic cache: %s (dim %d) on %s, precision target %.2f",
        embedder.model_id,
        embedder.dim,
        store.name,
        settings.semantic_precision,
    )
    return SemanticCache(
        embedder, store, on_embedded=metrics.embedding_seconds.observe, tracing=tracing
    )


def verifier_table(settings: Settings) -> tuple[Path, CalibrationTable]:
    """The verifier's folder (files checked against their sha256) and the calibration table
    that belongs to it. Raises ``VerifierError`` in one sentence; cheap enough for preflight."""
    folder = settings.semantic_verifier_dir or SHIPPED_DIR
    sums = check_sums(folder)
    table = load_table(settings.semantic_calibration_file or folder / CALIBRATION_FILE)
    if table.model_sha256 and table.model_sha256 != sums[MODEL_FILE]:
        raise VerifierError(
            "the calibration table was measured for another verifier model "
            f"({table.model_sha256[:12]}…, this one is {sums[MODEL_FILE][:12]}…)"
        )
    return folder, table


def check_targets(settings: Settings, table: CalibrationTable) -> None:
    """Refuse a precision target the table cannot serve (``ConfigError``, named as the user
    wrote it): above the table's highest measured target no candidate passes, so semantic
    hits would stop without a word."""
    low, high = table.targets
    problems = [
        Problem(
            settings.written_as(name),
            f"{value:g}",
            f"a precision target the calibration table covers: up to {high:.2f} "
            f"(it measured {low:.2f}-{high:.2f}; recalibrate with deja calibrate to go higher)"
            if high >= low
            else "none: the calibration table measured no target at all (deja calibrate)",
        )
        for name, value in (
            ("semantic_precision", settings.semantic_precision),
            ("semantic_judge_floor", settings.semantic_judge_floor),
        )
        if value > high and (name != "semantic_judge_floor" or settings.semantic_judge != "off")
    ]
    if problems:
        raise ConfigError.of(problems)


def open_verifier(
    stack: AsyncExitStack, settings: Settings
) -> tuple[Verifier | None, CalibrationTable | None]:
    """The verifier and its table; with ``semantic_verifier_fallback=cosine`` a broken model
    gives (None, None) — cosine alone at θ — with a loud warning, else start-up stops."""
    if settings.semantic_verifier == "off":
        log.warning("semantic verifier off: cosine similarity alone decides semantic hits")
        return None, None
    try:
        folder, table = verifier_table(settings)
        check_targets(settings, table)
        verifier = load_verifier(
            folder, max_tokens=table.max_tokens, threads=settings.verifier_threads
        )
    except VerifierError as exc:
        if settings.semantic_verifier_fallback != "cosine":
            raise
        log.error(
            "SEMANTIC HITS ARE NOT VERIFIED: %s; serving on cosine alone at θ "
            "(DEJA_SEMANTIC_VERIFIER_FALLBACK=cosine)",
            exc.message,
        )
        return None, None
    stack.push_async_callback(verifier.close)
    low, high = table.targets
    log.info(
        "semantic verifier %s: precision targets %.2f-%.2f (calibration: %s)",
        verifier.model_id,
        low,
        high,
        short(table.fitted_on),
    )
    return verifier, table


def learning(
    settings: Settings,
    parts: SemanticParts,
    thresholds: Thresholds,
    metrics: Metrics,
    audit: AuditTrail,
) -> Learning | None:
    """Evidence per entry and live precision per tenant; only with a calibration table (the
    cut-offs they move are its)."""
    if parts.table is None or not settings.semantic_learning:
        return None

    def moved(move: dict[str, Any]) -> None:
        metrics.precision_corrections.inc()
        audit.write("semantic.correction", "deja", **move)

    correction = Correction(high=parts.table.targets[1], on_move=moved)
    return Learning(Evidence(), correction, thresholds, parts.table, settings.semantic_judge_floor)


def semantic_step(
    settings: Settings,
    parts: SemanticParts,
    thresholds: Thresholds,
    metrics: Metrics,
    background: BackgroundTasks,
    recent: RecentLookups,
    audit: AuditTrail,
) -> SemanticStep | None:
    if parts.cache is None or parts.exact is None:
        return None
    learnt = learning(settings, parts, thresholds, metrics, audit)
    checks = parts.checks(settings, metrics, background, learnt)
    top_k = settings.semantic_top_k or (checks.table.k if checks.table is not None else 1)
    return SemanticStep(
        parts.cache,
        parts.exact,
        settings=SemanticSettings(
            timeout=settings.semantic_timeout_seconds,
            context_rule=settings.semantic_context,
            top_k=top_k,
            skip_verification_above=settings.semantic_skip_verification_above,
            max_pending=settings.semantic_max_pending,
            queue_wait=settings.semantic_queue_seconds,
        ),
        thresholds=thresholds,
        metrics=metrics,
        spawn=background.spawn,
        checks=checks,
        recent=recent,
    )


@dataclass
class SemanticParts:
    """What the semantic step is built from."""

    cache: SemanticCache | None
    exact: AliasedStore | None
    upstream: Upstream
    verifier: Verifier | None = None
    table: CalibrationTable | None = None

    @classmethod
    async def open(
        cls,
        stack: AsyncExitStack,
        settings: Settings,
        metrics: Metrics,
        tracing: Tracing,
        exact: AliasedStore | None,
        upstream: Upstream,
        embedder: Embedder | None,
        vectors: VectorBackend,
    ) -> SemanticParts:
        """The semantic cache (vector store on the shared embedder) and, with it, the verifier
        and table."""
        cache = await semantic_cache(stack, settings, metrics, tracing, embedder, vectors)
        parts = cls(cache, exact, upstream)
        if cache is not None:
            parts.verifier, parts.table = open_verifier(stack, settings)
        return parts

    def thresholds(self, settings: Settings, metrics: Metrics) -> Thresholds:
        """θ and the precision target, live values seeded from settings, exported as gauges."""
        thresholds = Thresholds(global_=self.theta(settings))
        thresholds.precision.global_ = settings.semantic_precision
        if self.table is not None:
            thresholds.precision.high = self.table.targets[1]
        metrics.threshold.set_function(lambda: thresholds.global_)
        metrics.precision_target.set_function(lambda: thresholds.precision.global_)
        return thresholds

    def theta(self, settings: Settings) -> float:
        """θ: the configured override, else the table's candidate floor, else cosine-only's."""
        if settings.semantic_threshold is not None:
            return settings.semantic_threshold
        return self.table.cosine_floor if self.table is not None else COSINE_ONLY_THETA

    def checks(
        self,
        settings: Settings,
        metrics: Metrics,
        background: BackgroundTasks,
        learning: Learning | None = None,
    ) -> Checks:
        assert self.cache is not None and self.exact is not None
        judge = None
        if settings.semantic_judge != "off" and self.table is not None:
            judge = Judge(
                self.upstream,
                metrics,
                mode=settings.semantic_judge,
                timeout=settings.semantic_judge_timeout_seconds,
            )
        shadow = None
        # sync judging re-asks what it promotes, as a shadow check, even when none is sampled
        if settings.semantic_shadow_rate > 0 or (judge is not None and judge.mode == "sync"):
            shadow = ShadowChecks(
                rate=settings.semantic_shadow_rate,
                upstream=self.upstream,
                embedder=self.cache.embedder,
                metrics=metrics,
                spawn=background.spawn,
                exact=self.exact,
                vectors=self.cache.store,
                invalidate=settings.semantic_shadow_invalidate,
                on_verdict=None if learning is None else shadow_verdict(learning),
            )
        classifier = None
        if settings.temporal_bypass:
            classifier = load_classifier(self.cache.embedder.model_id)
        return Checks(
            verifier=self.verifier,
            table=self.table,
            judge=judge,
            judge_floor=settings.semantic_judge_floor,
            shadow=shadow,
            classifier=classifier,
            promoter=Promoter(self.exact, self.cache, metrics) if judge is not None else None,
            learning=learning,
        )


def learn_labels(labels: LabelledPairs, learning: Learning) -> None:
    """An operator's label (console) is evidence about the entry it names, from the labels
    already on disk at start-up on, whichever process wrote it; labelling the pair again
    replaces it, and removing the label (or its drop past the bound) withdraws it."""

    def told(label: Label) -> None:
        learning.judged(
            label.entry_id, score=label.score, same=label.same, source="label", key=label.id
        )

    def removed(label: Label) -> None:
        learning.withdrawn(label.entry_id, label.id)

    labels.subscribe(told, removed, replay=True)


def shadow_verdict(learning: Learning) -> OnVerdict:
    """A shadow check's verdict, as the learning loop takes it: about a served hit."""

    def told(req: GatewayRequest, answer: CachedAnswer, score: float | None, agreed: bool) -> None:
        entry_id = answer.alias_of or answer.entry_id
        learning.served(
            req.tenant, req.model, entry_id, score=score, correct=agreed, source="shadow"
        )

    return told
