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

from opentelemetry.sdk.trace.export import SpanExporter
from starlette.requests import Request

from app.resources import (
    Replicas,
    SemanticParts,
    client_keys,
    exact_store,
    semantic_step,
    temporal_detector,
    uses_data_dir_exclusively,
)
from config.settings import ConfigError, Settings
from deja.cache.exact.base import ExactStore
from deja.cache.exact.redis import connect_redis
from deja.datadir import DataDirLock
from deja.errors import CacheUnavailableError
from deja.observability.accesslog import AccessLog
from deja.observability.metrics import Metrics
from deja.observability.tracing import Tracing
from deja.replicas.discovery import ModelDiscovery
from deja.replicas.health import HealthMonitor
from deja.replicas.pool import ReplicaPool
from deja.replicas.upstream import Upstream
from deja.routing.prefix import PrefixConfig
from deja.semantic.cache import SEMANTIC_ERRORS, SemanticCache
from deja.tenancy.keyring import KeyRing, RateLimiter
from deja.tenancy.thresholds import (
    FileThresholdStore,
    RedisThresholdStore,
    Thresholds,
    ThresholdStore,
    follow,
)
from middleware.memo import RequestMemo
from middleware.pipeline import Observability, Pipeline
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
        keys = client_keys(settings)
        if uses_data_dir_exclusively(settings):
            lock = DataDirLock(settings.data_dir)
            lock.acquire()
            stack.callback(lock.release)
        tracing = Tracing(span_exporter, batch=span_exporter is None)
        stack.callback(tracing.shutdown)
        metrics = Metrics(tenant_label=settings.metrics_tenant_label)
        replicas = await Replicas.open(stack, settings, metrics)
        redis = None
        if settings.redis_url and settings.cache_enabled:
            redis = connect_redis(settings.redis_url, timeout=settings.redis_timeout_seconds)
            stack.push_async_callback(redis.aclose)
        exact = await exact_store(stack, settings, redis)
        parts = await SemanticParts.open(stack, settings, metrics, tracing, exact, replicas)
        thresholds = parts.thresholds(settings, metrics)
        background = BackgroundTasks()
        stack.push_async_callback(background.drain)  # pending stores finish before closing
        prefix = PrefixConfig(
            settings.prefix_mode, settings.prefix_block_size, settings.prefix_max_blocks
        )
        access_log = AccessLog(access_sink) if settings.access_log else None
        pipeline = Pipeline(
            exact=exact,
            upstream=replicas.upstream,
            semantic=semantic_step(settings, parts, thresholds, metrics, background),
            temporal=temporal_detector(settings),
            prefix=prefix,
            observability=Observability(metrics, tracing, access_log),
            background=background,
            memo=RequestMemo(settings.request_memo_entries),
        )
        return cls(
            settings=settings,
            upstream=replicas.upstream,
            discovery=replicas.discovery,
            exact=exact,
            semantic=parts.cache,
            pipeline=pipeline,
            keys=keys,
            limiter=RateLimiter(),
            thresholds=thresholds,
            threshold_store=RedisThresholdStore(redis)
            if redis is not None
            else FileThresholdStore(settings.data_dir / "thresholds.json"),
            metrics=metrics,
            monitor=replicas.monitor,
            reload=reload,
            background=background,
        )

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


async def _sweep_forever(semantic: SemanticCache, every: float) -> None:
    while True:
        await asyncio.sleep(every)
        await semantic.sweep()
