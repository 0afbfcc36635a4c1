"""App factory and lifespan: every resource is created here and closed here."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from fastapi import FastAPI

from app.api import health, openai_routes
from app.api.errors import install_error_handlers
from app.asgi import DejaApp
from app.builders import (
    build_embedder,
    build_exact_store,
    build_temporal,
    build_vector_store,
    semantic_settings,
)
from app.state import Gateway, Stoppable
from config.settings import Settings
from middleware.pipeline import Pipeline
from middleware.replicas import ReplicaPool
from middleware.semantic import SemanticCache
from middleware.upstream import Upstream, build_session

log = logging.getLogger("deja")


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


async def _open_semantic(settings: Settings) -> SemanticCache | None:
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
    return SemanticCache(embedder, store)


def create_app(settings: Settings) -> DejaApp:
    """Build the gateway: the FastAPI app behind the generation fast path."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        urls: list[str] = settings.replicas
        simulators: list[Stoppable] = []
        if not urls and settings.demo:
            urls, simulators = await _start_demo_replicas(settings)
        if not urls:
            log.warning("no replicas configured (DEJA_REPLICAS); generation requests get 503")
        http = build_session(
            connect_timeout=settings.upstream_connect_timeout_seconds,
            read_timeout=settings.upstream_timeout_seconds,
            max_connections=settings.upstream_max_connections,
        )
        pool = ReplicaPool(
            urls, cooldown=settings.replica_cooldown_seconds, simulated=bool(simulators)
        )
        api_key = settings.replica_api_key.get_secret_value() if settings.replica_api_key else None
        upstream = Upstream(pool, http, api_key)
        exact = build_exact_store(settings)
        semantic = await _open_semantic(settings)
        pipeline = Pipeline(
            exact=exact,
            upstream=upstream,
            semantic=semantic,
            semantic_settings=semantic_settings(settings),
            temporal=build_temporal(settings),
        )
        app.state.gateway = Gateway(
            settings=settings,
            http=http,
            upstream=upstream,
            exact=exact,
            pipeline=pipeline,
            simulators=simulators,
        )
        await upstream.refresh_models()
        loop = asyncio.get_running_loop()
        tasks = [
            loop.create_task(_refresh_models_forever(upstream, settings.model_refresh_seconds))
        ]
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
    return DejaApp(app, openai_routes.fast_routes)
