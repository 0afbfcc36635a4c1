"""The stores one gateway process owns: the data-dir lock, the one Redis client, the exact
store and the cross-process flight lock; and which of them are single-process.

Which exact store a gateway uses is decided in one function, ``exact_kind``: every other
question about it (does this process own the data dir, can ``--workers N`` share it, what to
open) asks that function.
"""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from typing import Literal

from config.settings import ConfigError, Settings
from deja.cache.exact.aliases import AliasedStore
from deja.cache.exact.base import ExactStore
from deja.cache.exact.disk import FILE_NAME as DISK_FILE
from deja.cache.exact.disk import SqliteExactStore
from deja.cache.exact.memory import MemoryExactStore
from deja.cache.exact.redis import KEY_PREFIX as REDIS_KEY_PREFIX
from deja.cache.exact.redis import RedisExactStore
from deja.cache.exact.tiered import TieredExactStore
from deja.cache.exact.tracking import TrackedTier
from deja.cache.flightlock import FlightLock
from deja.datadir import DataDirLock
from deja.redisclient import WARM_UP_SECONDS, RedisClient, connect_redis, node_clients, warm_up

log = logging.getLogger("deja")

ExactKind = Literal["disk", "memory", "redis"]


def exact_kind(settings: Settings) -> ExactKind | None:
    """The exact store this configuration uses (None with the cache off): ``DEJA_EXACT_STORE``
    when set, else Redis when ``DEJA_REDIS_URL`` is set, else disk. A contradiction between the
    two is refused in one line rather than one of them silently winning. A cluster URL
    (``redis+cluster://``, or ``DEJA_REDIS_CLUSTER=true``) is a Redis URL like any other."""
    chosen, url = settings.exact_store, settings.redis_url
    if settings.redis_cluster and not url:
        raise ConfigError("DEJA_REDIS_CLUSTER=true needs DEJA_REDIS_URL")
    if not settings.cache_enabled:
        return None
    if chosen is None:
        return "redis" if url else "disk"
    if chosen == "redis" and not url:
        raise ConfigError("DEJA_EXACT_STORE=redis needs DEJA_REDIS_URL")
    if chosen != "redis" and url:
        raise ConfigError(
            f"DEJA_EXACT_STORE={chosen} contradicts DEJA_REDIS_URL (the exact store would be "
            "Redis): unset one of them"
        )
    return chosen


def uses_data_dir_exclusively(settings: Settings) -> bool:
    """True when this process would open files under ``data_dir`` that one process must own:
    Qdrant Edge (single-writer: the semantic cache's, the corpora's) or the exact store on disk
    (its in-process tier would not see another process's deletes)."""
    disk_exact = exact_kind(settings) == "disk"
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
    if exact_kind(settings) in ("disk", "memory"):
        parts.append("the embedded exact store (set DEJA_REDIS_URL)")
    if settings.cache_enabled and settings.semantic_enabled and not settings.qdrant_url:
        parts.append("Qdrant Edge (set DEJA_QDRANT_URL, or DEJA_SEMANTIC_ENABLED=false)")
    if settings.corpora_enabled and not settings.qdrant_url:
        parts.append("corpora on Qdrant Edge (set DEJA_QDRANT_URL, or DEJA_CORPORA_ENABLED=false)")
    if settings.demo and not settings.replicas:
        parts.append("the in-process simulated replicas (set DEJA_REPLICAS)")
    return parts


def lock_data_dir(stack: AsyncExitStack, settings: Settings) -> None:
    """Take the data dir for this process when it opens files there that one process must own
    (a second process stops here, with one line naming the holder's pid)."""
    if uses_data_dir_exclusively(settings):
        lock = DataDirLock(settings.data_dir)
        lock.acquire()
        stack.callback(lock.release)


async def open_redis(stack: AsyncExitStack, settings: Settings) -> RedisClient | None:
    """The one Redis client (one node or a cluster): the exact store's, θ's and the rate
    limits' shared store (they use it, never close it). A cluster's slot map is read here,
    not inside the first request's timeout."""
    if not settings.redis_url:
        return None
    redis = connect_redis(
        settings.redis_url, timeout=settings.redis_timeout_seconds, cluster=settings.redis_cluster
    )
    stack.push_async_callback(redis.aclose)
    await warm_up(redis, WARM_UP_SECONDS)
    return redis


async def flight_lock(stack: AsyncExitStack, settings: Settings) -> FlightLock | None:
    """Cross-process single-flight locks, on a small Redis pool of their own: a lock that
    fails only means "lead", and its connections never compete with the exact store's."""
    if exact_kind(settings) != "redis" or settings.redis_url is None:
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
) -> AliasedStore | None:
    """The store ``exact_kind`` chose, opened, with its close registered on ``stack``, behind
    the one view that knows aliases."""
    kind = exact_kind(settings)
    if kind is None:
        return None
    memory = MemoryExactStore(
        max_entries=settings.memory_cache_max_entries, max_bytes=settings.memory_cache_max_bytes
    )
    store: ExactStore
    if kind == "redis":
        assert redis is not None  # exact_kind: redis needs DEJA_REDIS_URL
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
        store = remote
    elif kind == "memory":
        store = memory
    else:
        disk = SqliteExactStore(
            settings.data_dir / DISK_FILE, sweep_seconds=settings.exact_sweep_seconds
        )
        tiered = TieredExactStore(memory, disk)
        await tiered.open()
        store = tiered
    stack.push_async_callback(store.close)
    return AliasedStore(store)
