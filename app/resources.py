"""Opening the gateway's parts, one function each: the upstream side, the stores, the semantic
layer. ``app.gateway.Gateway.build`` calls them in order and registers each one's close on its
exit stack, so whatever a function opens is closed by the gateway that asked for it."""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from dataclasses import dataclass

import redis.asyncio as aioredis
from qdrant_client import AsyncQdrantClient

from config.settings import Settings
from deja.cache.exact.base import ExactStore
from deja.cache.exact.memory import MemoryExactStore
from deja.cache.exact.redis import RedisExactStore
from deja.embedding.base import Embedder
from deja.observability.metrics import Metrics
from deja.observability.tracing import Tracing
from deja.replicas.discovery import ModelDiscovery
from deja.replicas.health import HealthMonitor
from deja.replicas.pool import ReplicaPool
from deja.replicas.upstream import Upstream, build_session
from deja.routing.router import Router
from deja.semantic.cache import SemanticCache
from deja.temporal.rules import TemporalDetector
from deja.tenancy.keyring import KeyRing, load_keys
from deja.tenancy.thresholds import Thresholds
from deja.vectorstore.base import VectorStore, collection_name
from deja.vectorstore.edge import EdgeVectorStore
from deja.vectorstore.qdrant import QdrantServerVectorStore
from middleware.semantic import SemanticSettings, SemanticStep
from middleware.tasks import BackgroundTasks

log = logging.getLogger("deja")

#: ``DEJA_QDRANT_URL`` value that runs the server implementation on qdrant-client's in-process
#: local mode (same client API, no server): for tests and demos only.
QDRANT_LOCAL_MEMORY = ":memory:"


@dataclass(frozen=True)
class Replicas:
    """The upstream side: one HTTP session, the pool, and what watches and uses it."""

    upstream: Upstream
    discovery: ModelDiscovery
    monitor: HealthMonitor

    @classmethod
    async def open(cls, stack: AsyncExitStack, settings: Settings, metrics: Metrics) -> Replicas:
        urls, simulated = await replica_urls(stack, settings)
        http = build_session(
            connect_timeout=settings.upstream_connect_timeout_seconds,
            read_timeout=settings.upstream_timeout_seconds,
            max_connections=settings.upstream_max_connections,
        )
        stack.push_async_callback(http.close)
        pool = ReplicaPool(
            urls,
            cooldown=settings.replica_cooldown_seconds,
            scrape_interval=settings.health_check_interval_seconds,
            simulated=simulated,
        )
        metrics.watch_pool(pool)
        api_key = settings.replica_api_key.get_secret_value() if settings.replica_api_key else None
        router = Router(pool, settings.routing_policy, settings.routing_epsilon)
        timeout = settings.health_check_timeout_seconds
        return cls(
            upstream=Upstream(router, http, api_key, metrics),
            discovery=ModelDiscovery(pool, http, timeout=timeout, api_key=api_key),
            monitor=HealthMonitor(
                pool, http, interval=settings.health_check_interval_seconds, timeout=timeout
            ),
        )


def client_keys(settings: Settings) -> KeyRing:
    """The keys file's tenants (open mode without one), warning about what is left open."""
    if settings.admin_key is None:
        log.warning("DEJA_ADMIN_KEY is not set: the admin API (/admin) is disabled")
    keys = load_keys(settings.keys_file)
    if keys.open:
        log.warning(
            "NO CLIENT KEYS CONFIGURED (DEJA_KEYS_FILE): the gateway is open, every caller "
            "is tenant 'default'"
        )
    return keys


def temporal_detector(settings: Settings) -> TemporalDetector | None:
    if not settings.temporal_bypass:
        return None
    return TemporalDetector(settings.temporal_extra_patterns)


def uses_data_dir_exclusively(settings: Settings) -> bool:
    """True when this process would open single-writer files under ``data_dir`` (the embedded
    Qdrant Edge store)."""
    return settings.cache_enabled and settings.semantic_enabled and not settings.qdrant_url


async def replica_urls(stack: AsyncExitStack, settings: Settings) -> tuple[list[str], bool]:
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


def exact_store(settings: Settings, redis: aioredis.Redis | None) -> ExactStore | None:
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


def load_embedder(settings: Settings) -> Embedder:
    if settings.embedder == "sentence-transformers":
        from deja.embedding.st import load_st_embedder

        return load_st_embedder(settings.embedder_model)
    from deja.embedding.onnx.embedder import load_onnx_embedder

    model_dir = settings.model_dir or settings.data_dir / "models"
    return load_onnx_embedder(
        model_dir, threads=settings.embedder_threads, batching=settings.embedder_batching
    )


def vector_store(settings: Settings, embedder: Embedder) -> VectorStore:
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


async def semantic_cache(
    stack: AsyncExitStack, settings: Settings, metrics: Metrics, tracing: Tracing
) -> SemanticCache | None:
    if not (settings.cache_enabled and settings.semantic_enabled):
        return None
    embedder = load_embedder(settings)
    stack.push_async_callback(embedder.close)
    store = vector_store(settings, embedder)
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


def semantic_step(
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
