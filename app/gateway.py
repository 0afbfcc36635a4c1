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

from app.corpora import open_corpora, preload, retrieve_step
from app.resources import (
    Replicas,
    client_keys,
    exact_store,
    flight_lock,
    temporal_detector,
    uses_data_dir_exclusively,
)
from app.semantic_parts import SemanticParts, open_embedder, semantic_step
from config.settings import ConfigError, Settings
from deja.cache.exact.base import ExactStore
from deja.corpus.base import DocumentChange
from deja.corpus.provenance import stale_answers
from deja.corpus.service import Corpora
from deja.datadir import DataDirLock
from deja.errors import CacheUnavailableError
from deja.observability.accesslog import AccessLog
from deja.observability.audit import AuditTrail
from deja.observability.langfuse import langfuse_from
from deja.observability.lookups import RecentLookups
from deja.observability.metrics import Metrics
from deja.observability.timeline import Timeline, read_counts
from deja.observability.tracing import Tracing
from deja.redisclient import WARM_UP_SECONDS, connect_redis, warm_up
from deja.replicas.discovery import ModelDiscovery
from deja.replicas.health import HealthMonitor
from deja.replicas.pool import ReplicaPool
from deja.replicas.upstream import Upstream
from deja.routing.prefix import PrefixConfig
from deja.semantic.cache import SEMANTIC_ERRORS, SemanticCache
from deja.tenancy.keyring import KeyRing
from deja.tenancy.keywatch import KeysFile, log_change
from deja.tenancy.ratelimit import MemoryRateLimiter, RateLimiter, RedisRateLimiter
from deja.tenancy.thresholds import (
    FileThresholdStore,
    RedisThresholdStore,
    Thresholds,
    ThresholdStore,
    follow,
)
from middleware.memo import RequestMemo
from middleware.pipeline import Observability, Pipeline
from middleware.singleflight import Flights
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
    exact: ExactStore | None
    semantic: SemanticCache | None
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
    #: The keys file, followed while serving (None in open mode).
    keys_file: KeysFile | None = None

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
        keys, keys_file = client_keys(settings)
        if uses_data_dir_exclusively(settings):
            lock = DataDirLock(settings.data_dir)
            lock.acquire()
            stack.callback(lock.release)
        tracing = Tracing(
            span_exporter, batch=span_exporter is None, langfuse=langfuse_from(settings)
        )
        stack.callback(tracing.shutdown)
        metrics = Metrics(tenant_label=settings.metrics_tenant_label)
        replicas = await Replicas.open(stack, settings, metrics)
        redis = None
        if settings.redis_url:  # the exact store's, θ's and the rate limits' shared store
            redis = connect_redis(
                settings.redis_url,
                timeout=settings.redis_timeout_seconds,
                cluster=settings.redis_cluster,
            )
            stack.push_async_callback(redis.aclose)
            await warm_up(redis, WARM_UP_SECONDS)
        exact = await exact_store(stack, settings, redis)
        embedder = open_embedder(stack, settings)
        parts = await SemanticParts.open(
            stack, settings, metrics, tracing, exact, replicas, embedder
        )
        corpora = await open_corpora(stack, settings, embedder, metrics)
        thresholds = parts.thresholds(settings, metrics)
        background = BackgroundTasks()
        stack.push_async_callback(background.drain)  # pending stores finish before closing
        prefix = PrefixConfig(
            settings.prefix_mode, settings.prefix_block_size, settings.prefix_max_blocks
        )
        access_log = AccessLog(access_sink) if settings.access_log else None
        flights = Flights() if settings.single_flight and exact is not None else None
        if flights is not None:
            stack.push_async_callback(flights.close)
        recent = RecentLookups()
        pipeline = Pipeline(
            exact=exact,
            upstream=replicas.upstream,
            semantic=semantic_step(settings, parts, thresholds, metrics, background, recent),
            temporal=temporal_detector(settings),
            prefix=prefix,
            observability=Observability(metrics, tracing, access_log),
            background=background,
            flights=flights,
            flight_lock=await flight_lock(stack, settings) if flights is not None else None,
            retrieve=retrieve_step(settings, corpora, embedder, metrics),
            memo=RequestMemo(settings.request_memo_entries),
        )
        gateway = cls(
            settings=settings,
            upstream=replicas.upstream,
            discovery=replicas.discovery,
            exact=exact,
            semantic=parts.cache,
            pipeline=pipeline,
            keys=keys,
            keys_file=keys_file,
            limiter=RedisRateLimiter(redis) if redis is not None else MemoryRateLimiter(),
            thresholds=thresholds,
            threshold_store=RedisThresholdStore(redis)
            if redis is not None
            else FileThresholdStore(settings.data_dir / "thresholds.json"),
            metrics=metrics,
            monitor=replicas.monitor,
            timeline=Timeline(
                functools.partial(read_counts, pipeline.stats, metrics, replicas.upstream.pool),
                settings.console_sample_seconds,
            ),
            recent=recent,
            reload=reload,
            background=background,
            corpora=corpora,
        )
        if corpora is not None:
            corpora.on_change = gateway.on_corpus_change
            corpora.on_preview = gateway.preview_corpus_change
        return gateway

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
        if self.semantic is not None:
            work.append(_sweep_forever(self.semantic, settings.semantic_sweep_seconds))
        if self.corpora is not None and self.corpora.store.shared:
            work.append(self.corpora.refresh_forever(settings.corpus_refresh_seconds))
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
                replicas = reload().replicas
            except ConfigError as exc:
                log.error("SIGHUP: config not reloaded: %s", exc)
                return
            self.reload_replicas(replicas)

        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, on_hup)
        return True

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


def gateway_of(request: Request) -> Gateway:
    """The gateway that owns this request's app (set by the lifespan)."""
    gateway: Gateway = request.app.state.gateway
    return gateway


async def _sweep_forever(semantic: SemanticCache, every: float) -> None:
    while True:
        await asyncio.sleep(every)
        await semantic.sweep()
