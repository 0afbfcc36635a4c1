"""The gateway's Redis client: one node, or a Redis Cluster (``redis.asyncio.cluster``).

``DEJA_REDIS_URL`` selects it: ``redis://`` / ``rediss://`` is one node, exactly as before;
``redis+cluster://`` / ``rediss+cluster://`` (or ``DEJA_REDIS_CLUSTER=true`` with a plain URL,
for a managed cluster-mode endpoint) is a cluster, reached through any one of its nodes: the
client reads the slot map from it (``CLUSTER SLOTS``), sends each command to the master of its
key's slot, follows ``MOVED``/``ASK`` redirections and reads the map again after a
``MOVED`` or a connection failure (a failover).

Key layout on a cluster (docs/architecture.md, "Redis Cluster"): no key carries a hash tag.
Every command the stores send names one key (each Lua script too: the rate-limit bucket, the
single-flight release), so none needs two keys in one slot, and entries spread over all
16,384 slots by their own name. The reads that used to be one multi-key ``MGET`` (a turn's
batched lookups, a scan's values) go out as one pipeline per node instead (``read_many``).

Everything a store catches comes from ``REDIS_ERRORS``: the cluster client also raises
``RedisClusterException`` (a slot not covered while a failover is under way), which is not a
``RedisError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TypeAlias
from urllib.parse import urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, PipelineCommand, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import AskError, MovedError, RedisClusterException, RedisError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger("deja.cache")

#: One node or a cluster: the stores use the commands both have.
RedisClient: TypeAlias = aioredis.Redis | RedisCluster
#: What any Redis call of a store may raise (a cluster adds ``RedisClusterException``).
REDIS_ERRORS: tuple[type[BaseException], ...] = (
    RedisError,
    RedisClusterException,
    OSError,
    TimeoutError,
)
#: A node's errors after which the slot map is read again (a master may have failed over).
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    OSError,
    TimeoutError,
)
#: Replies that name another node for a key's slot: asked again through the client.
REDIRECTIONS = (MovedError, AskError, TryAgainError)
#: A pooled connection idle this long is pinged before it carries a command.
HEALTH_CHECK_SECONDS = 5
NodeFactory: TypeAlias = Callable[[str, int], aioredis.Redis]
#: How long start-up waits for a cluster's slot map (``warm_up``).
WARM_UP_SECONDS = 5.0
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}


def cluster_url(url: str, cluster: bool = False) -> str | None:
    """The plain ``redis[s]://`` URL of a seed node when ``url`` names a cluster (its scheme,
    or ``cluster``), else None: a single node."""
    parts = urlsplit(url)
    scheme = CLUSTER_SCHEMES.get(parts.scheme)
    if scheme is not None:
        return urlunsplit(parts._replace(scheme=scheme))
    return url if cluster else None


def connect_redis(
    url: str, *, timeout: float, max_connections: int = 256, cluster: bool = False
) -> RedisClient:
    """The one Redis client of a gateway process: per-operation timeouts, one immediate retry
    on a closed connection (after a Redis restart or, on a cluster, a failover: the slot map
    is read again before the retry), pool health checks. RESP2, so the invalidation messages
    of client-side caching arrive as ordinary pub/sub messages. ``max_connections`` is per
    node on a cluster."""
    seed = cluster_url(url, cluster)
    if seed is not None:
        return RedisCluster.from_url(
            seed,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            max_connections=max_connections,
            # No retry at the cluster level: redis-py retries a failed pipeline by closing the
            # whole client (every node's connections, under the feet of concurrent commands:
            # an AttributeError in their write, seen as a 500 in the failover bench). A failed
            # command marks the slot map for a refresh instead (``refresh_after``), and the
            # next command reads it.
            retry=Retry(NoBackoff(), 0),
            # A slot whose master just died is not served until its replica takes over;
            # the others are, and a new client may start meanwhile.
            require_full_coverage=False,
            health_check_interval=HEALTH_CHECK_SECONDS,
            protocol=2,
        )
    client: aioredis.Redis = aioredis.Redis.from_url(
        url,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        max_connections=max_connections,
        retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
        health_check_interval=HEALTH_CHECK_SECONDS,
        protocol=2,
    )
    return client


@contextlib.asynccontextmanager
async def refresh_after(client: RedisClient) -> AsyncIterator[None]:
    """Around a cluster pipeline: if a node's connection fails (a master died), have the
    client read the slot map again before its next command, as redis-py does itself after a
    single command's connection error (a pipeline's failure does not, with no retry)."""
    try:
        yield
    except CONNECTION_ERRORS:
        if isinstance(client, RedisCluster):
            client._initialize = True  # redis-py's own flag: initialize() on the next command
        raise


async def warm_up(client: RedisClient, seconds: float) -> None:
    """Read a cluster's slot map (and the command table redis-py routes by) now, at start-up,
    within ``seconds``: done lazily it falls on the first request, inside that request's
    short per-operation timeout, which a loaded machine misses (the first answers were
    ``off``). A failure is only logged: the client tries again on its next command."""
    if not isinstance(client, RedisCluster):
        return
    try:
        async with asyncio.timeout(seconds):
            await client.initialize()
    except REDIS_ERRORS as exc:
        log.warning("redis cluster not reachable at start-up (%s); will retry on use", exc)


def node_url(seed: str, host: str, port: int) -> str:
    """The URL of one cluster node: the seed's scheme, credentials and options, that node's
    address (for a connection that must stay on one node: a tracking subscription)."""
    parts = urlsplit(seed)
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@{host}:{port}" if userinfo else f"{host}:{port}"
    scheme = CLUSTER_SCHEMES.get(parts.scheme, parts.scheme)
    return urlunsplit(parts._replace(scheme=scheme, netloc=netloc, path=""))


def node_clients(url: str, *, timeout: float, cluster: bool = False) -> NodeFactory:
    """Clients of single cluster nodes (one connection each is all a subscription needs),
    reached with the cluster URL's scheme, credentials and options."""
    seed = cluster_url(url, cluster) or url

    def connect(host: str, port: int) -> aioredis.Redis:
        client = connect_redis(node_url(seed, host, port), timeout=timeout, max_connections=4)
        assert isinstance(client, aioredis.Redis)
        return client

    return connect


async def read_many(client: RedisClient, keys: Sequence[str | bytes]) -> list[object]:
    """The values of ``keys`` in one round trip per node: one ``MGET`` on a single node; on a
    cluster one pipeline of ``GET``s per node, sent to all at once (an ``MGET`` across slots
    is refused there). A cluster reply holds, for a key whose node failed (or whose slot no
    master serves during a failover), that exception instead of a value; a single node
    raises."""
    if not keys:
        return []
    if isinstance(client, RedisCluster):
        return await _read_cluster(client, keys)
    return list(await client.mget(list(keys)))


async def _read_cluster(client: RedisCluster, keys: Sequence[str | bytes]) -> list[object]:
    """``read_many`` on a cluster: the keys grouped by the master of their slot (the client's
    slot map), one pipeline per master, straight through that node's pool.

    Not through redis-py's ``ClusterPipeline``: it resolves a routing policy, computes the
    slot and looks up the node once per command with several awaits each, and records a
    metric per node: about twice the CPU per key of this path (measured in docs/architecture.md,
    "Redis Cluster"). A ``MOVED``/``ASK``/``TRYAGAIN`` reply (a slot that moved) is
    asked again alone through the client, which follows the redirection and updates its slot
    map, exactly as ``ClusterPipeline`` does."""
    await client.initialize()  # reads the slot map only when flagged (start-up, a failure)
    values: list[object] = [None] * len(keys)
    nodes: dict[str, tuple[ClusterNode, list[int]]] = {}
    for index, key in enumerate(keys):
        try:
            node = client.get_node_from_key(key)  # type: ignore[arg-type]
        except RedisClusterException as exc:  # the slot has no master right now
            values[index] = exc
            continue
        if node is not None:
            nodes.setdefault(node.name, (node, []))[1].append(index)
    groups = [_read_node(client, node, keys, indexes, values) for node, indexes in nodes.values()]
    if len(groups) == 1:
        await groups[0]
    else:
        await asyncio.gather(*groups)
    for index, value in enumerate(values):
        if isinstance(value, REDIRECTIONS):
            try:
                values[index] = await client.get(keys[index])
            except REDIS_ERRORS as exc:
                values[index] = exc
    return values


async def _read_node(
    client: RedisCluster,
    node: ClusterNode,
    keys: Sequence[str | bytes],
    indexes: list[int],
    values: list[object],
) -> None:
    """One node's ``GET``s as one pipeline; their values (or errors) go into ``values``. A
    connection that fails has the client read the slot map again before its next command
    (a failover), as ``refresh_after`` does."""
    commands = [PipelineCommand(n, "GET", keys[i]) for n, i in enumerate(indexes)]
    try:
        await node.execute_pipeline(commands)
    except REDIS_ERRORS as exc:
        if isinstance(exc, CONNECTION_ERRORS):
            client._initialize = True  # redis-py's own flag: initialize() on the next command
        for index in indexes:
            values[index] = exc
        return
    for index, command in zip(indexes, commands, strict=True):
        if isinstance(command.result, CONNECTION_ERRORS):
            client._initialize = True
        values[index] = command.result
