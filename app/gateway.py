"""Gateway construction: every resource of one process is built here, in one place, and closed
here, in reverse order, by one ``AsyncExitStack``. The gateway closes only what it opened.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import redis.asyncio as aioredis
from opentelemetry.sdk.trace.export import SpanExporter
from qdrant_client import AsyncQdrantClient
from starlette.requests import Request

from config.settings import ConfigError, Settings
from deja.cache.exact.base import ExactStore
from deja.cache.exact.memory import MemoryExactStore
from deja.cache.exact.redis import RedisExactStore, connect_redis
from deja.datadir import DataDirLock
from deja.embedding.base import Embedder
from deja.errors import CacheUnavailableError
from deja.observability.accesslog import AccessLog
from deja.observability.metrics import Metrics
from deja.observability.tracing import Tracing
from deja.replicas.discovery import ModelDiscovery
from deja.replicas.health import HealthMonitor
from deja.replicas.pool import ReplicaPool
from deja.replicas.upstream import Upstream, build_session
from deja.routing.prefix import PrefixConfig
from deja.routing.router import Router
from deja.semantic.cache import SEMANTIC_ERRORS, SemanticCache
from deja.temporal.rules import TemporalDetector
from deja.tenancy.keyring import KeyRing, RateLimiter, load_keys
from deja.tenancy.thresholds import (
    FileThresholdStore,
    RedisThresholdStore,
    Thresholds,
    ThresholdStore,
    follow,
)
from deja.vectorstore.base import VectorStore, collection_name
from deja.vectorstore.edge import EdgeVectorStore
from deja.vectorstore.qdrant import QdrantServerVectorStore
from middleware.pipeline import Observability, Pipeline
from middleware.semantic import SemanticSettings, SemanticStep
from middleware.tasks import BackgroundTasks

log = logging.getLogger("deja")

#: ``DEJA_QDRANT_URL`` value that runs the server implementation on qdrant-client's in-process
#: local mode (same client API, no server): for tests and demos only.
QDRANT_LOCAL_MEMORY = ":memory:"
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
    reload: Callable[[], Settings] | None = None
    background: BackgroundTasks = field(default_factory=BackgroundTasks)

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
        if settings.admin_key is None:
            log.warning("DEJA_ADMIN_KEY is not set: the admin API (/admin) is disabled")
        keys = load_keys(settings.keys_file)
        if keys.open:
            log.warning(
                "NO CLIENT KEYS CONFIGURED (DEJA_KEYS_FILE): the gateway is open, every caller "
                "is tenant 'default'"
            )
        if uses_data_dir_exclusively(settings):
            lock = DataDirLock(settings.data_dir)
            lock.acquire()
            stack.callback(lock.release)
        urls, simulated = await _replica_urls(stack, settings)
        http = build_session(
            connect_timeout=settings.upstream_connect_timeout_seconds,
            read_timeout=settings.upstream_timeout_seconds,
            max_connections=settings.upstream_max_connections,
        )
        stack.push_async_callback(http.close)
        redis = None
        if settings.redis_url and settings.cache_enabled:
            redis = connect_redis(settings.redis_url, timeout=settings.redis_timeout_seconds)
            stack.push_async_callback(redis.aclose)
        tracing = Tracing(span_exporter, batch=span_exporter is None)
        stack.callback(tracing.shutdown)
        metrics = Metrics(tenant_label=settings.metrics_tenant_label)
        pool = ReplicaPool(
            urls,
            cooldown=settings.replica_cooldown_seconds,
            scrape_interval=settings.health_check_interval_seconds,
            simulated=simulated,
        )
        metrics.watch_pool(pool)
        api_key = settings.replica_api_key.get_secret_value() if settings.replica_api_key else None
        router = Router(pool, settings.routing_policy, settings.routing_epsilon)
        upstream = Upstream(router, http, api_key, metrics)
        exact = _exact_store(settings, redis)
        if exact is not None:
            stack.push_async_callback(exact.close)
        thresholds = Thresholds(global_=settings.semantic_threshold)
        metrics.threshold.set_function(lambda: thresholds.global_)
        semantic = await _semantic_cache(stack, settings, metrics, tracing)
        background = BackgroundTasks()
        pipeline = Pipeline(
            exact=exact,
            upstream=upstream,
            semantic=_semantic_step(settings, semantic, exact, thresholds, metrics, background),
            temporal=TemporalDetector(settings.temporal_extra_patterns)
            if settings.temporal_bypass
            else None,
            prefix=PrefixConfig(
                settings.prefix_mode, settings.prefix_block_size, settings.prefix_max_blocks
            ),
            observability=Observability(
                metrics, tracing, AccessLog(access_sink) if settings.access_log else None
            ),
            background=background,
        )
        stack.push_async_callback(background.drain)  # pending stores finish before closing
        gateway = cls(
            settings=settings,
            upstream=upstream,
            discovery=ModelDiscovery(
                pool, http, timeout=settings.health_check_timeout_seconds, api_key=api_key
            ),
            exact=exact,
            semantic=semantic,
            pipeline=pipeline,
            keys=keys,
            limiter=RateLimiter(),
            thresholds=thresholds,
            threshold_store=RedisThresholdStore(redis)
            if redis is not None
            else FileThresholdStore(settings.data_dir / "thresholds.json"),
            metrics=metrics,
            monitor=HealthMonitor(
                pool,
                http,
                interval=settings.health_check_interval_seconds,
                timeout=settings.health_check_timeout_seconds,
            ),
            reload=reload,
            background=background,
        )
        return gateway

    def _start_background(self, stack: AsyncExitStack) -> None:
        settings = self.settings
        work: list[Coroutine[Any, Any, None]] = [
            self.discovery.run_forever(settings.model_refresh_seconds),
            self.monitor.run_forever(),
            follow(self.thresholds, self.threshold_store),
            self._refresh_entry_gauges(),
        ]
        if self.pipeline.obs.access_log is not None:
            work.append(self.pipeline.obs.access_log.run_forever())
        if self.semantic is not None:
            work.append(_sweep_forever(self.semantic, settings.semantic_sweep_seconds))
        loop = asyncio.get_running_loop()
        tasks = [loop.create_task(w) for w in work]

        async def stop() -> None:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        stack.push_async_callback(stop)

    def _install_sighup(self) -> bool:
        """SIGHUP re-reads the replica list (same sources as at start) without a restart."""
        reload = self.reload
        if reload is None or threading.current_thread() is not threading.main_thread():
            return False

        def on_hup() -> None:
            try:
                replicas = reload().replicas
            except ConfigError as exc:
                log.error("SIGHUP: config not reloaded: %s", exc)
                return
            self.reload_replicas(replicas)

        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, on_hup)
        return True

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


def uses_data_dir_exclusively(settings: Settings) -> bool:
    """True when this process would open single-writer files under ``data_dir`` (the embedded
    Qdrant Edge store)."""
    return settings.cache_enabled and settings.semantic_enabled and not settings.qdrant_url


async def _replica_urls(stack: AsyncExitStack, settings: Settings) -> tuple[list[str], bool]:
    """The configured replicas, or in demo mode simulated ones started in-process."""
    if settings.replicas or not settings.demo:
        if not settings.replicas:
            log.warning("no replicas configured (DEJA_REPLICAS); generation requests get 503")
        return list(settings.replicas), False
    from deja.sim.config import SimConfig
    from deja.sim.runner import start_simulators

    cluster = await start_simulators(settings.demo_replicas, SimConfig(), host="127.0.0.1")
    stack.push_async_callback(cluster.stop)
    log.warning(
        "no replicas configured: started %d SIMULATED vLLM replicas (deja sim) at %s "
        "-- answers are synthetic, not from a model",
        len(cluster.urls),
        ", ".join(cluster.urls),
    )
    return list(cluster.urls), True


def _exact_store(settings: Settings, redis: aioredis.Redis | None) -> ExactStore | None:
    if not settings.cache_enabled:
        return None
    if redis is not None:
        return RedisExactStore(
            redis,
            timeout=settings.redis_timeout_seconds,
            retry_seconds=settings.redis_retry_seconds,
        )
    return MemoryExactStore(
        max_entries=settings.memory_cache_max_entries, max_bytes=settings.memory_cache_max_bytes
    )


def _embedder(settings: Settings) -> Embedder:
    if settings.embedder == "sentence-transformers":
        from deja.embedding.st import load_st_embedder

        return load_st_embedder(settings.embedder_model)
    from deja.embedding.onnx.embedder import load_onnx_embedder

    model_dir = settings.model_dir or settings.data_dir / "models"
    return load_onnx_embedder(
        model_dir, threads=settings.embedder_threads, batching=settings.embedder_batching
    )


def _vector_store(settings: Settings, embedder: Embedder) -> VectorStore:
    collection = collection_name(embedder.model_id, embedder.dim)
    if settings.qdrant_url == QDRANT_LOCAL_MEMORY:
        client = AsyncQdrantClient(location=":memory:")
        return QdrantServerVectorStore(collection=collection, dim=embedder.dim, client=client)
    if settings.qdrant_url:
        key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
        return QdrantServerVectorStore(
            collection=collection,
            dim=embedder.dim,
            url=settings.qdrant_url,
            api_key=key,
            timeout=settings.semantic_timeout_seconds,
        )
    return EdgeVectorStore(settings.data_dir, collection=collection, dim=embedder.dim)


async def _semantic_cache(
    stack: AsyncExitStack, settings: Settings, metrics: Metrics, tracing: Tracing
) -> SemanticCache | None:
    if not (settings.cache_enabled and settings.semantic_enabled):
        return None
    embedder = _embedder(settings)
    stack.push_async_callback(embedder.close)
    store = _vector_store(settings, embedder)
    await store.open()
    stack.push_async_callback(store.close)
    log.info(
        "semantic cache: %s (dim %d) on %s, θ=%.3f",
        embedder.model_id,
        embedder.dim,
        store.name,
        settings.semantic_threshold,
    )
    return SemanticCache(
        embedder, store, on_embedded=metrics.embedding_seconds.observe, tracing=tracing
    )


def _semantic_step(
    settings: Settings,
    semantic: SemanticCache | None,
    exact: ExactStore | None,
    thresholds: Thresholds,
    metrics: Metrics,
    background: BackgroundTasks,
) -> SemanticStep | None:
    if semantic is None or exact is None:
        return None
    return SemanticStep(
        semantic,
        exact,
        settings=SemanticSettings(
            timeout=settings.semantic_timeout_seconds, context_rule=settings.semantic_context
        ),
        thresholds=thresholds,
        metrics=metrics,
        spawn=background.spawn,
    )


async def _sweep_forever(semantic: SemanticCache, every: float) -> None:
    while True:
        await asyncio.sleep(every)
        await semantic.sweep()
