"""App factory and lifespan: every resource is created here and closed here."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import httpx
from fastapi import FastAPI

from app.api import health, openai_routes
from app.api.errors import install_error_handlers
from app.state import Gateway, Stoppable
from config.settings import Settings
from middleware.exact import ExactStore, MemoryExactStore
from middleware.exact_redis import RedisExactStore
from middleware.pipeline import Pipeline
from middleware.replicas import ReplicaPool
from middleware.upstream import Upstream, build_client

log = logging.getLogger("deja")


def build_exact_store(settings: Settings) -> ExactStore | None:
    if not settings.cache_enabled:
        return None
    if settings.redis_url:
        return RedisExactStore(
            settings.redis_url,
            timeout=settings.redis_timeout_seconds,
            retry_seconds=settings.redis_retry_seconds,
        )
    return MemoryExactStore(
        max_entries=settings.memory_cache_max_entries,
        max_bytes=settings.memory_cache_max_bytes,
    )


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


def create_app(settings: Settings, *, transport: httpx.AsyncBaseTransport | None = None) -> FastAPI:
    """Build the gateway. ``transport`` swaps the upstream HTTP transport (tests only)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        urls: list[str] = settings.replicas
        simulators: list[Stoppable] = []
        if not urls and settings.demo:
            urls, simulators = await _start_demo_replicas(settings)
        if not urls:
            log.warning("no replicas configured (DEJA_REPLICAS); generation requests get 503")
        http = build_client(
            connect_timeout=settings.upstream_connect_timeout_seconds,
            read_timeout=settings.upstream_timeout_seconds,
            max_connections=settings.upstream_max_connections,
            max_keepalive=settings.upstream_max_keepalive,
            transport=transport,
        )
        pool = ReplicaPool(
            urls, cooldown=settings.replica_cooldown_seconds, simulated=bool(simulators)
        )
        api_key = settings.replica_api_key.get_secret_value() if settings.replica_api_key else None
        upstream = Upstream(pool, http, api_key)
        exact = build_exact_store(settings)
        pipeline = Pipeline(exact=exact, upstream=upstream)
        app.state.gateway = Gateway(
            settings=settings,
            http=http,
            upstream=upstream,
            exact=exact,
            pipeline=pipeline,
            simulators=simulators,
        )
        await upstream.refresh_models()
        refresher = asyncio.get_running_loop().create_task(
            _refresh_models_forever(upstream, settings.model_refresh_seconds)
        )
        log.info(
            "deja ready: %d replica(s), exact cache %s",
            len(urls),
            exact.name if exact is not None else "disabled",
        )
        try:
            yield
        finally:
            refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await refresher
            await pipeline.drain()
            if exact is not None:
                await exact.close()
            await http.aclose()
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
    return app
