"""Opening the gateway's parts, one function each: the upstream side and the stores (the
semantic layer's parts are in ``app.semantic_parts``). ``app.gateway.Gateway.build`` calls them
in order and registers each one's close on its exit stack, so whatever a function opens is
closed by the gateway that asked for it."""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from dataclasses import dataclass

from config.settings import Settings
from deja.cache.exact.base import ExactStore
from deja.cache.exact.disk import FILE_NAME as DISK_FILE
from deja.cache.exact.disk import SqliteExactStore
from deja.cache.exact.memory import MemoryExactStore
from deja.cache.exact.redis import KEY_PREFIX as REDIS_KEY_PREFIX
from deja.cache.exact.redis import RedisExactStore
from deja.cache.exact.tiered import TieredExactStore
from deja.cache.exact.tracking import TrackedTier
from deja.cache.flightlock import FlightLock
from deja.observability.metrics import Metrics
from deja.redisclient import WARM_UP_SECONDS, RedisClient, connect_redis, node_clients, warm_up
from deja.replicas.admission import Admission
from deja.replicas.discovery import ModelDiscovery
from deja.replicas.health import HealthMonitor
from deja.replicas.pool import ReplicaPool
from deja.replicas.upstream import Upstream, build_session
from deja.routing.router import Router
from deja.temporal.rules import TemporalDetector
from deja.tenancy.keyring import KeyRing
from deja.tenancy.keywatch import KeysFile

log = logging.getLogger("deja")


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
            max_inflight=settings.replica_max_inflight,
        )
        metrics.watch_pool(pool)
        api_key = settings.replica_api_key.get_secret_value() if settings.replica_api_key else None
        router = Router(pool, settings.routing_policy, settings.routing_epsilon)
        timeout = settings.health_check_timeout_seconds
        admission = Admission(
            router,
            queue_size=settings.admission_queue_size,
            max_wait=settings.admission_max_wait_seconds,
            metrics=metrics,
        )
        return cls(
            upstream=Upstream(
                router,
                http,
                api_key,
                metrics,
                admission=admission,
                request_timeout=settings.request_timeout_seconds,
            ),
            discovery=ModelDiscovery(pool, http, timeout=timeout, api_key=api_key),
            monitor=HealthMonitor(
                pool, http, interval=settings.health_check_interval_seconds, timeout=timeout
            ),
        )


def client_keys(settings: Settings) -> tuple[KeyRing, KeysFile | None]:
    """The keys file's tenants (open mode without one), warning about what is left open, and
    the file to follow for changes."""
    if settings.admin_key is None:
        log.warning("DEJA_ADMIN_KEY is not set: the admin API (/admin) is disabled")
    if settings.keys_file is None:
        log.warning(
            "NO CLIENT KEYS CONFIGURED (DEJA_KEYS_FILE): the gateway is open, every caller "
            "is tenant 'default'"
        )
        return KeyRing(), None
    keys_file = KeysFile(settings.keys_file)
    return keys_file.load(), keys_file


def temporal_detector(settings: Settings) -> TemporalDetector | None:
    if not settings.temporal_bypass:
        return None
    return TemporalDetector(settings.temporal_extra_patterns)


def uses_data_dir_exclusively(settings: Settings) -> bool:
    """True when this process would open files under ``data_dir`` that one process must own:
    Qdrant Edge (single-writer: the semantic cache's, the corpora's) or the exact store on disk
    (its in-process tier would not see another process's deletes)."""
    disk_exact = (
        settings.cache_enabled and not settings.redis_url and settings.exact_store == "disk"
    )
    if settings.qdrant_url:
        return disk_exact
    edge = (settings.cache_enabled and settings.semantic_enabled) or settings.corpora_enabled
    return disk_exact or edge


def embedded_parts(settings: Settings) -> list[str]:
    """The single-process parts this configuration would use: what ``--workers N`` cannot
    share. Each worker would hold its own copy (an in-process exact store: invalidation in one
    worker would not reach the others) or fight over one data dir (Qdrant Edge, the disk
    store)."""
    parts: list[str] = []
    if settings.cache_enabled and not settings.redis_url:
        parts.append("the embedded exact store (set DEJA_REDIS_URL)")
    if settings.cache_enabled and settings.semantic_enabled and not settings.qdrant_url:
        parts.append("Qdrant Edge (set DEJA_QDRANT_URL, or DEJA_SEMANTIC_ENABLED=false)")
    if settings.corpora_enabled and not settings.qdrant_url:
        parts.append("corpora on Qdrant Edge (set DEJA_QDRANT_URL, or DEJA_CORPORA_ENABLED=false)")
    if settings.demo and not settings.replicas:
        parts.append("the in-process simulated replicas (set DEJA_REPLICAS)")
    return parts


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


async def flight_lock(stack: AsyncExitStack, settings: Settings) -> FlightLock | None:
    """Cross-process single-flight locks, on a small Redis pool of their own: a lock that
    fails only means "lead", and its connections never compete with the exact store's."""
    if not settings.redis_url or not settings.cache_enabled:
        return None
    client = connect_redis(
        settings.redis_url,
        timeout=settings.redis_timeout_seconds,
        max_connections=64,
        cluster=settings.redis_cluster,
    )
    stack.push_async_callback(client.aclose)
    await warm_up(client, WARM_UP_SECONDS)
    return FlightLock(client)


async def exact_store(
    stack: AsyncExitStack, settings: Settings, redis: RedisClient | None
) -> ExactStore | None:
    """Redis when configured, else the embedded store ``exact_store`` names (opened, with its
    close registered on ``stack``)."""
    if not settings.cache_enabled:
        return None
    memory = MemoryExactStore(
        max_entries=settings.memory_cache_max_entries, max_bytes=settings.memory_cache_max_bytes
    )
    if redis is not None:
        tracking = None
        if settings.redis_client_cache:
            nodes = node_clients(
                settings.redis_url or "",
                timeout=settings.redis_timeout_seconds,
                cluster=settings.redis_cluster,
            )
            tracking = TrackedTier(redis, prefix=REDIS_KEY_PREFIX, tier=memory, node_client=nodes)
        remote = RedisExactStore(
            redis,
            timeout=settings.redis_timeout_seconds,
            retry_seconds=settings.redis_retry_seconds,
            tracking=tracking,
            auto_pipeline=settings.redis_auto_pipeline,
        )
        await remote.open()
        stack.push_async_callback(remote.close)
        return remote
    if settings.exact_store == "memory":
        stack.push_async_callback(memory.close)
        return memory
    disk = SqliteExactStore(
        settings.data_dir / DISK_FILE, sweep_seconds=settings.exact_sweep_seconds
    )
    tiered = TieredExactStore(memory, disk)
    await tiered.open()
    stack.push_async_callback(tiered.close)
    return tiered
