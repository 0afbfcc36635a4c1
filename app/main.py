"""App factory and lifespan: every resource is created here and closed here."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import AsyncIterator, Callable
from typing import BinaryIO

from fastapi import FastAPI
from opentelemetry.sdk.trace.export import SpanExporter

from app.api import admin, admin_cache, health, openai_routes
from app.api.errors import install_error_handlers
from app.asgi import DejaApp
from app.builders import (
    build_embedder,
    build_exact_store,
    build_temporal,
    build_threshold_store,
    build_vector_store,
    semantic_settings,
)
from app.errors import CacheUnavailableError, ConfigError
from app.state import Gateway, Stoppable
from config.settings import Settings
from middleware.accesslog import AccessLog
from middleware.exact import ExactStore
from middleware.health import HealthMonitor
from middleware.metrics import Metrics
from middleware.pipeline import Pipeline
from middleware.prefix import PrefixConfig
from middleware.replicas import ReplicaPool
from middleware.router import Router
from middleware.semantic import SEMANTIC_ERRORS, SemanticCache
from middleware.tenants import RateLimiter, load_keys
from middleware.thresholds import Thresholds, follow
from middleware.tracing import Tracing
from middleware.upstream import Upstream, build_session

log = logging.getLogger("deja")

#: How often the per-layer entry gauges are recounted (a count is a scan on Redis).
ENTRY_GAUGE_SECONDS = 15.0


async def _start_demo_replicas(settings: Settings) -> tuple[list[str], list[Stoppable]]:
    from app.sim.config import SimConfig
    from app.sim.runner import start_simulators

    cluster = await start_simulators(settings.demo_replicas, SimConfig(), host="127.0.0.1")
    log.warning(
        "no replicas configured: started %d SIMULATED vLLM replicas (deja sim) at %s "
        "-- answers are synthetic, not from a model",
        len(cluster.urls),
        ", ".join(cluster.urls),
    )
    return list(cluster.urls), [cluster]


async def _refresh_models_forever(upstream: Upstream, every: float) -> None:
    while True:
        await asyncio.sleep(every)
        await upstream.refresh_models()


async def _sweep_forever(semantic: SemanticCache, every: float) -> None:
    while True:
        await asyncio.sleep(every)
        await semantic.sweep()


async def _refresh_entry_gauges(
    metrics: Metrics, exact: ExactStore | None, semantic: SemanticCache | None
) -> None:
    while True:
        with contextlib.suppress(CacheUnavailableError):
            if exact is not None:
                metrics.entries.labels("exact").set(await exact.count())
        with contextlib.suppress(*SEMANTIC_ERRORS):
            if semantic is not None:
                metrics.entries.labels("semantic").set(await semantic.store.count())
        await asyncio.sleep(ENTRY_GAUGE_SECONDS)


async def _open_semantic(
    settings: Settings, metrics: Metrics, tracing: Tracing
) -> SemanticCache | None:
    if not (settings.cache_enabled and settings.semantic_enabled):
        return None
    embedder = build_embedder(settings)
    store = build_vector_store(settings, embedder)
    await store.open()
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


def _install_sighup(gateway: Gateway, reload: Callable[[], Settings] | None) -> bool:
    """SIGHUP re-reads the replica list (same sources as at start) without a restart."""
    if reload is None or threading.current_thread() is not threading.main_thread():
        return False

    def on_hup() -> None:
        try:
            replicas = reload().replicas
        except ConfigError as exc:
            log.error("SIGHUP: config not reloaded: %s", exc)
            return
        gateway.reload_replicas(replicas)

    asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, on_hup)
    return True


def create_app(
    settings: Settings,
    *,
    reload: Callable[[], Settings] | None = None,
    span_exporter: SpanExporter | None = None,
    access_sink: BinaryIO | None = None,
) -> DejaApp:
    """Build the gateway: the FastAPI app behind the generation fast path.

    ``reload`` re-reads the settings on SIGHUP and ``POST /admin/replicas/reload``;
    ``span_exporter`` receives the traces (tests); otherwise ``OTEL_*`` variables decide;
    ``access_sink`` receives the access log (default stderr).
    """

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        urls: list[str] = settings.replicas
        simulators: list[Stoppable] = []
        if not urls and settings.demo:
            urls, simulators = await _start_demo_replicas(settings)
        if not urls:
            log.warning("no replicas configured (DEJA_REPLICAS); generation requests get 503")
        if settings.admin_key is None:
            log.warning("DEJA_ADMIN_KEY is not set: the admin API (/admin) is disabled")
        http = build_session(
            connect_timeout=settings.upstream_connect_timeout_seconds,
            read_timeout=settings.upstream_timeout_seconds,
            max_connections=settings.upstream_max_connections,
        )
        pool = ReplicaPool(
            urls,
            cooldown=settings.replica_cooldown_seconds,
            scrape_interval=settings.health_check_interval_seconds,
            simulated=bool(simulators),
        )
        router = Router(pool, settings.routing_policy, settings.routing_epsilon)
        api_key = settings.replica_api_key.get_secret_value() if settings.replica_api_key else None
        metrics = Metrics(tenant_label=settings.metrics_tenant_label)
        tracing = Tracing(span_exporter, batch=span_exporter is None)
        access_log = AccessLog(access_sink) if settings.access_log else None
        metrics.watch_pool(pool)
        upstream = Upstream(router, http, api_key, metrics)
        monitor = HealthMonitor(
            pool,
            http,
            interval=settings.health_check_interval_seconds,
            timeout=settings.health_check_timeout_seconds,
        )
        exact = build_exact_store(settings)
        keys = load_keys(settings.keys_file)
        if keys.open:
            log.warning(
                "NO CLIENT KEYS CONFIGURED (DEJA_KEYS_FILE): the gateway is open, every caller "
                "is tenant 'default'"
            )
        thresholds = Thresholds(global_=settings.semantic_threshold)
        metrics.threshold.set_function(lambda: thresholds.global_)
        threshold_store = build_threshold_store(settings, exact)
        semantic = await _open_semantic(settings, metrics, tracing)
        pipeline = Pipeline(
            exact=exact,
            upstream=upstream,
            semantic=semantic,
            semantic_settings=semantic_settings(settings),
            temporal=build_temporal(settings),
            prefix=PrefixConfig(
                settings.prefix_mode, settings.prefix_block_size, settings.prefix_max_blocks
            ),
            thresholds=thresholds,
            metrics=metrics,
            tracing=tracing,
            access_log=access_log,
        )
        app.state.gateway = Gateway(
            settings=settings,
            http=http,
            upstream=upstream,
            exact=exact,
            pipeline=pipeline,
            keys=keys,
            limiter=RateLimiter(),
            thresholds=thresholds,
            threshold_store=threshold_store,
            metrics=metrics,
            simulators=simulators,
            reload=reload,
        )
        await asyncio.gather(upstream.refresh_models(), monitor.check_once())
        loop = asyncio.get_running_loop()
        tasks = [
            loop.create_task(_refresh_models_forever(upstream, settings.model_refresh_seconds)),
            loop.create_task(monitor.run_forever()),
            loop.create_task(follow(thresholds, threshold_store)),
            loop.create_task(_refresh_entry_gauges(metrics, exact, semantic)),
        ]
        if access_log is not None:
            tasks.append(loop.create_task(access_log.run_forever()))
        hup = _install_sighup(app.state.gateway, reload)
        if semantic is not None:
            tasks.append(
                loop.create_task(_sweep_forever(semantic, settings.semantic_sweep_seconds))
            )
        log.info(
            "deja ready: %d replica(s), exact cache %s",
            len(urls),
            exact.name if exact is not None else "disabled",
        )
        try:
            yield
        finally:
            if hup:
                loop.remove_signal_handler(signal.SIGHUP)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await pipeline.drain()
            if semantic is not None:
                await semantic.store.close()
                await semantic.embedder.close()
            if exact is not None:
                await exact.close()
            await http.close()
            tracing.shutdown()
            for sim in simulators:
                await sim.stop()

    app = FastAPI(
        title="deja",
        summary="OpenAI-compatible caching gateway for vLLM",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    install_error_handlers(app)
    app.router.routes.extend(openai_routes.routes)
    app.router.routes.extend(health.routes)
    app.include_router(admin.router)
    app.include_router(admin_cache.router)
    return DejaApp(app, openai_routes.fast_routes)
