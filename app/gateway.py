"""Gateway construction: every resource of one process is built here, in one place, and closed
here, in reverse order, by one ``AsyncExitStack``. The gateway closes only what it opened.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from opentelemetry.sdk.trace.export import SpanExporter
from starlette.requests import Request

from app.wiring.corpora import open_corpora, preload, retrieve_step
from app.wiring.disk import data_disk
from app.wiring.pipeline import access_log, background_tasks, open_pipeline
from app.wiring.replicas import Replicas
from app.wiring.semantic import SemanticParts, learn_labels, open_embedder, semantic_step
from app.wiring.stores import (
    exact_store,
    lock_data_dir,
    open_redis,
)
from app.wiring.tenancy import client_keys, rate_limiter, threshold_store
from app.wiring.vectors import VectorBackend
from config.settings import ConfigError, Settings
from deja.cache.exact.aliases import AliasedStore
from deja.corpus.base import DocumentChange
from deja.corpus.provenance import stale_answers
from deja.corpus.service import Corpora
from deja.diskspace import DiskSpace
from deja.errors import CacheUnavailableError
from deja.observability.audit import AuditTrail
from deja.observability.langfuse import langfuse_from
from deja.observability.lookups import RecentLookups
from deja.observability.metrics import Metrics
from deja.observability.timeline import Timeline, read_counts
from deja.observability.tracing import Tracing
from deja.semantic.cache import SEMANTIC_ERRORS, SemanticCache
from deja.semantic.labelled import FILE_NAME as LABELS_FILE
from deja.semantic.labelled import LabelledPairs
from deja.semantic.learning import Learning
from deja.tenancy.keyring import KeyRing
from deja.tenancy.keywatch import KeysFile, log_change
from deja.tenancy.ratelimit import RateLimiter
from deja.tenancy.thresholds import Thresholds, ThresholdStore, follow
from deja.upstream.discovery import ModelDiscovery
from deja.upstream.health import HealthMonitor
from deja.upstream.pool import ReplicaPool
from deja.upstream.upstream import Upstream
from middleware.admit import AdmitStep
from middleware.embeddings import Embeddings
from middleware.pipeline import Pipeline
from middleware.record import Observability
from middleware.semantic import SemanticStep
from middleware.tasks import BackgroundTasks

log = logging.getLogger("deja")

#: How often the per-layer entry gauges are recounted (a count is a scan on Redis).
ENTRY_GAUGE_SECONDS = 15.0


@dataclass
class Gateway:
    """Everything a request handler needs; reachable as ``app.state.gateway``, never global."""

    settings: Settings
    upstream: Upstream
    discovery: ModelDiscovery
    exact: AliasedStore | None
    semantic: SemanticCache | None
    #: The semantic lookup (step 4) over ``semantic``, with its checks (the admin reads them).
    semantic_step: SemanticStep | None
    pipeline: Pipeline
    keys: KeyRing
    limiter: RateLimiter
    thresholds: Thresholds
    threshold_store: ThresholdStore
    metrics: Metrics
    monitor: HealthMonitor
    #: The console's views of recent traffic, lookups and admin actions (this process only).
    timeline: Timeline
    recent: RecentLookups
    reload: Callable[[], Settings] | None = None
    background: BackgroundTasks = field(default_factory=BackgroundTasks)
    corpora: Corpora | None = None
    audit_trail: AuditTrail = field(default_factory=AuditTrail)
    #: The pairs ops labelled "same" or "different" in the console (``data_dir``, all processes;
    #: ``build`` loads them).
    labels: LabelledPairs = field(default_factory=lambda: LabelledPairs(None))
    #: The keys file, followed while serving (None in open mode).
    keys_file: KeysFile | None = None
    #: The data disk's free space against its reserve (None: nothing kept on local disk).
    space: DiskSpace | None = None
    #: The simulated replicas ``--demo`` started in this process (a reload keeps them).
    demo_replicas: list[str] = field(default_factory=list)
    #: What a generation request passes before the pipeline (built from the fields above).
    admit_step: AdmitStep = field(init=False)

    def __post_init__(self) -> None:
        pipeline = self.pipeline
        self.admit_step = AdmitStep(
            self.settings,
            self.limiter,
            self.discovery,
            lookup_step=pipeline.lookup_step,
            memo=pipeline.memo,
            record_step=pipeline.record_step,
            retrieve_step=pipeline.produce_step.retrieve_step,
        )
        if self.corpora is not None:  # a document change invalidates the answers built on it
            self.corpora.on_change = self.on_corpus_change
            self.corpora.on_preview = self.preview_corpus_change

    @functools.cached_property
    def embeddings(self) -> Embeddings:
        """The ``/v1/embeddings`` path, on the pipeline's exact store, upstream and telemetry."""
        obs = self.pipeline.obs
        return Embeddings(
            self.exact, self.upstream, self.metrics, obs.access_log, self.background, obs.stats
        )

    @property
    def learning(self) -> Learning | None:
        """The learning loop (evidence, corrections); None without the semantic layer's table."""
        step = self.semantic_step
        return step.checks.learning if step is not None else None

    @property
    def pool(self) -> ReplicaPool:
        return self.upstream.pool

    @classmethod
    @asynccontextmanager
    async def build(
        cls,
        settings: Settings,
        *,
        reload: Callable[[], Settings] | None = None,
        span_exporter: SpanExporter | None = None,
        access_sink: BinaryIO | None = None,
    ) -> AsyncIterator[Gateway]:
        """Open every resource, start the background work, yield the gateway, close it all."""
        async with AsyncExitStack() as stack:
            gateway = await cls._open(stack, settings, reload, span_exporter, access_sink)
            gateway.labels = LabelledPairs.load(settings.data_dir / LABELS_FILE)
            if gateway.learning is not None:
                learn_labels(gateway.labels, gateway.learning)
            if gateway.corpora is not None and settings.corpus_preload:
                await preload(gateway.corpora, settings)
            await asyncio.gather(gateway.discovery.refresh(), gateway.monitor.check_once())
            gateway._start_background(stack)
            if gateway._install_sighup():
                stack.callback(asyncio.get_running_loop().remove_signal_handler, signal.SIGHUP)
            log.info(
                "deja ready: %d replica(s), exact cache %s",
                len(gateway.pool.replicas),
                gateway.exact.name if gateway.exact is not None else "disabled",
            )
            yield gateway

    @classmethod
    async def _open(
        cls,
        stack: AsyncExitStack,
        settings: Settings,
        reload: Callable[[], Settings] | None,
        span_exporter: SpanExporter | None,
        access_sink: BinaryIO | None,
    ) -> Gateway:
        """Open every part in dependency order; each builder registers its close on ``stack``."""
        keys, keys_file = client_keys(settings)
        lock_data_dir(stack, settings)
        tracing, metrics = _telemetry(stack, settings, span_exporter)
        replicas = await Replicas.open(stack, settings, metrics)
        redis = await open_redis(stack, settings)
        exact = await exact_store(stack, settings, redis)
        embedder = open_embedder(stack, settings)
        settings, space = data_disk(settings, embedder, metrics)
        vectors = VectorBackend.open(stack, settings, space)
        parts = await SemanticParts.open(
            stack, settings, metrics, tracing, exact, replicas.upstream, embedder, vectors
        )
        corpora = await open_corpora(stack, settings, embedder, metrics, vectors)
        thresholds = parts.thresholds(settings, metrics)
        background, recent, audit = background_tasks(stack), RecentLookups(), AuditTrail()
        semantic = semantic_step(settings, parts, thresholds, metrics, background, recent, audit)
        pipeline = await open_pipeline(
            stack,
            settings,
            semantic=semantic,
            observability=Observability(metrics, tracing, access_log(settings, access_sink)),
            exact=exact,
            upstream=replicas.upstream,
            background=background,
            retrieve=retrieve_step(settings, corpora, embedder, metrics),
            space=space,
        )
        return cls(
            settings=settings,
            upstream=replicas.upstream,
            discovery=replicas.discovery,
            exact=exact,
            semantic=parts.cache,
            semantic_step=semantic,
            pipeline=pipeline,
            keys=keys,
            keys_file=keys_file,
            limiter=rate_limiter(redis),
            thresholds=thresholds,
            threshold_store=threshold_store(settings, redis),
            metrics=metrics,
            monitor=replicas.monitor,
            timeline=_timeline(settings, pipeline, metrics, replicas.upstream.pool),
            recent=recent,
            audit_trail=audit,
            reload=reload,
            background=background,
            corpora=corpora,
            space=space,
            demo_replicas=replicas.simulated_urls(),
        )

    async def on_corpus_change(self, changes: list[DocumentChange]) -> int:
        """A document changed or was removed: drop the cached answers built from it, in both
        layers (the shared stores: every process); returns how many were dropped. A store
        failure propagates: the corpus report shows it as ``invalidation_error``."""
        store = self.semantic.store if self.semantic is not None else None
        near = self.settings.rag_invalidate_near
        removed = await stale_answers(changes, self.exact, store, near=near)
        if removed:
            log.info("corpus change removed %d cached answer(s)", len(removed))
        return len(removed)

    async def preview_corpus_change(self, changes: list[DocumentChange]) -> int:
        """What ``on_corpus_change`` would drop, without dropping it (a dry-run ingest)."""
        store = self.semantic.store if self.semantic is not None else None
        near = self.settings.rag_invalidate_near
        return len(await stale_answers(changes, self.exact, store, near=near, remove=False))

    def _start_background(self, stack: AsyncExitStack) -> None:
        settings = self.settings
        work: list[Coroutine[Any, Any, None]] = [
            self.discovery.run_forever(settings.model_refresh_seconds),
            self.monitor.run_forever(),
            follow(self.thresholds, self.threshold_store),
            self._refresh_entry_gauges(),
            self.timeline.run_forever(),
        ]
        if self.pipeline.obs.access_log is not None:
            work.append(self.pipeline.obs.access_log.run_forever())
        if self.space is not None:
            work.append(self.space.watch())
        if self.semantic is not None:
            work.append(_sweep_forever(self.semantic, settings.semantic_sweep_seconds))
        if self.corpora is not None and self.corpora.store.shared:
            work.append(self.corpora.refresh_forever(settings.corpus_refresh_seconds))
        if self.learning is not None and self.labels.path is not None:
            work.append(self.labels.follow(settings.labels_refresh_seconds))
        if self.keys_file is not None and settings.keys_reload_seconds > 0:
            work.append(self.keys_file.follow(settings.keys_reload_seconds, self.install_keys))
        loop = asyncio.get_running_loop()
        tasks = [loop.create_task(w) for w in work]

        async def stop() -> None:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        stack.push_async_callback(stop)

    def _install_sighup(self) -> bool:
        """SIGHUP re-reads the keys file and the replica list (same sources as at start)
        without a restart."""
        reload = self.reload
        if reload is None or threading.current_thread() is not threading.main_thread():
            return False

        def on_hup() -> None:
            self.reload_keys("SIGHUP")
            try:
                replicas = self.configured_replicas(reload())
            except ConfigError as exc:
                log.error("SIGHUP: config not reloaded: %s", exc)
                return
            self.reload_replicas(replicas)

        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, on_hup)
        return True

    def configured_replicas(self, settings: Settings) -> list[str]:
        """The replica list a reload of ``settings`` means: the configured one, or in demo mode
        without one the simulated replicas started at start-up (an empty list there would
        leave every miss a 503)."""
        if not settings.replicas and settings.demo and self.demo_replicas:
            return list(self.demo_replicas)
        return list(settings.replicas)

    def install_keys(self, keys: KeyRing) -> None:
        """Swap in a new key ring: one assignment, so a request authenticates against the old
        ring or the new one, never a mix."""
        self.keys = keys

    def reload_keys(self, why: str) -> None:
        """Re-read the keys file now (a small file, read on the event loop: SIGHUP is rare);
        a broken file keeps the current keys and says so in one line."""
        if self.keys_file is None:
            return
        change = self.keys_file.poll(repeat_errors=True)
        if change is None:
            if not self.keys_file.failing:
                log.info("%s: keys file %s unchanged", why, self.keys_file.path)
            return
        self.install_keys(change.ring)
        log_change(self.keys_file.path, change, why)

    def reload_replicas(self, replicas: list[str]) -> None:
        """Swap the replica list in place: in-flight requests finish where they are."""
        before = {r.url for r in self.pool.replicas}
        self.pool.update(replicas)
        after = {r.url for r in self.pool.replicas}
        log.warning(
            "replicas reloaded: %d now (added %s, removed %s)",
            len(after),
            sorted(after - before) or "none",
            sorted(before - after) or "none",
        )
        self.background.spawn(self.discovery.refresh())

    async def _refresh_entry_gauges(self) -> None:
        while True:
            with suppress(CacheUnavailableError):
                if self.exact is not None:
                    self.metrics.entries.labels("exact").set(await self.exact.count())
            with suppress(*SEMANTIC_ERRORS):
                if self.semantic is not None:
                    self.metrics.entries.labels("semantic").set(await self.semantic.store.count())
            await asyncio.sleep(ENTRY_GAUGE_SECONDS)


def _telemetry(
    stack: AsyncExitStack, settings: Settings, span_exporter: SpanExporter | None
) -> tuple[Tracing, Metrics]:
    """The app's own tracer provider (shut down last) and metrics registry."""
    tracing = Tracing(span_exporter, batch=span_exporter is None, langfuse=langfuse_from(settings))
    stack.callback(tracing.shutdown)
    return tracing, Metrics(tenant_label=settings.metrics_tenant_label)


def _timeline(
    settings: Settings, pipeline: Pipeline, metrics: Metrics, pool: ReplicaPool
) -> Timeline:
    """The console's traffic history: the cumulative counts, sampled off the request path."""
    counts = functools.partial(read_counts, pipeline.stats, metrics, pool.samples)
    return Timeline(counts, settings.console_sample_seconds)


def gateway_of(request: Request) -> Gateway:
    """The gateway that owns this request's app (set by the lifespan)."""
    gateway: Gateway = request.app.state.gateway
    return gateway


async def _sweep_forever(semantic: SemanticCache, every: float) -> None:
    while True:
        await asyncio.sleep(every)
        await semantic.sweep()
