"""A process-local copy of Redis answers, kept coherent by Redis itself (server-assisted
client-side caching, ``CLIENT TRACKING``).

One dedicated pub/sub connection asks Redis to broadcast every change to a key under the exact
store's prefix (``CLIENT TRACKING ON REDIRECT <itself> BCAST PREFIX deja:x:``) and subscribes to
``__redis__:invalidate``. Any process's ``SET``, ``DEL``, ``FLUSHALL`` or an expiry then reaches
every gateway process as an invalidation message, which drops the key from its local tier. The
tier is only read while that subscription is live: from the moment it fails (a Redis restart, a
dropped connection, a missed ping) the tier is emptied and bypassed until Redis has confirmed a
new subscription, so no process serves an answer that another process has deleted.

Two races are closed here:

- a read that was in flight when its key was invalidated may return the old value; it is
  served (the read began before the delete) but never copied into the tier;
- Redis sends the invalidation before it answers the ``DEL`` (in ``BCAST`` mode both leave in
  the same event-loop turn, invalidations first), so when an admin call returns, every other
  process has the message on its socket. A process applies it on its next event-loop turn: in
  that window, microseconds long, it could still answer from its old copy. That is the whole
  of the gap, and it is documented in docs/architecture.md.

On a Redis Cluster each master tracks only its own keys, so the tier subscribes on every
master (a connection of its own to each, ``CLIENT TRACKING ... BCAST`` there) and is live only
while all of them are confirmed and the masters are the ones the cluster reports: every
``PING_SECONDS`` it reads ``CLUSTER NODES``, and a master gone or added (a failover, a
resharding) drops the tier and subscribes again on the new set. A master that dies closes its
subscription at once, so the tier is off from that moment; a graceful hand-over (``CLUSTER
FAILOVER``) keeps the old master's connection open, so there another process's write to the new
master can go unseen for up to one ``PING_SECONDS`` (the copies read meanwhile are dropped when
the change is seen), or up to ``DEAD_AFTER`` while the ``CLUSTER NODES`` reads fail (a read that
fails is tried again each second; after ``DEAD_AFTER`` without an answer the tier is dropped).
That window is documented in docs/architecture.md.

Measured (bench/exact_stores.py): the local tier is what brings a Redis-backed exact hit to
the in-process store's speed; without it every hit is a network round trip.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Collection, Coroutine
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException

from deja.cache.entry import CachedAnswer
from deja.cache.exact.memory import MemoryExactStore
from deja.redisclient import CONNECTION_ERRORS, REDIS_ERRORS, NodeFactory, RedisClient

log = logging.getLogger("deja.cache")

CHANNEL = "__redis__:invalidate"
#: How often the subscription is pinged; no answer within ``DEAD_AFTER`` means it is gone.
PING_SECONDS = 1.0
DEAD_AFTER = 3.0
#: Wait before subscribing again after a failure.
RESUBSCRIBE_SECONDS = 0.5
#: Longest wait for a subscription's connections to close, or for its tasks to end once
#: cancelled: a close that hangs (a half-open socket after a failover) must not hold up
#: resubscribing or the gateway's shutdown.
CLOSE_SECONDS = 2.0

CLUSTER_SLOTS = 16_384


class TrackedTier:
    """The local tier and the subscription that keeps it coherent with Redis."""

    def __init__(
        self,
        client: RedisClient,
        *,
        prefix: str,
        tier: MemoryExactStore,
        clock: Callable[[], float] = time.time,
        node_client: NodeFactory | None = None,
    ) -> None:
        if isinstance(client, RedisCluster) and node_client is None:
            raise ValueError("a cluster's tier needs node_client to reach each master")
        self._client = client
        self._node_client = node_client
        self._prefix = prefix.encode()
        self.tier = tier
        self._clock = clock
        #: True while Redis has confirmed the subscription and it answers pings.
        self.live = False
        #: Bumped whenever the whole tier is dropped (a flush, a lost subscription).
        self._generation = 0
        self._reading: dict[str, int] = {}
        self._dirty: set[str] = set()

    # --- reads and writes of the store ---------------------------------------------------------
    def get(self, key: str) -> CachedAnswer | None:
        """The local copy, only while the subscription is live."""
        return self.tier.peek(key) if self.live else None

    def begin_read(self, key: str) -> int:
        """Mark a Redis read of ``key`` as in flight; returns the generation to pass back."""
        self._reading[key] = self._reading.get(key, 0) + 1
        return self._generation if self.live else -1

    def end_read(self, key: str, generation: int, answer: CachedAnswer | None) -> None:
        """Copy what the read found into the tier unless the key (or everything) was
        invalidated while it was in flight."""
        left = self._reading[key] - 1
        if left:
            self._reading[key] = left
        else:
            del self._reading[key]
        dirty = key in self._dirty
        if not left:
            self._dirty.discard(key)
        if answer is None or dirty or generation != self._generation or not self.live:
            return
        remaining = answer.expires_at - self._clock()
        if remaining > 0:
            self.tier.put(key, answer, remaining)

    def forget(self, key: str) -> None:
        """This process changes ``key`` in Redis: drop the local copy now, not a round trip
        later."""
        self._invalidate(key)

    # --- invalidations --------------------------------------------------------------------------
    def _invalidate(self, key: str) -> None:
        self.tier.discard(key)
        if key in self._reading:
            self._dirty.add(key)

    def _drop_all(self) -> None:
        self._generation += 1
        self.tier.clear()
        self._dirty.update(self._reading)

    def _on_message(self, data: object) -> None:
        if data is None:  # FLUSHDB / FLUSHALL, or the server's tracking table was reset
            self._drop_all()
            return
        if not isinstance(data, list):
            return
        for raw in data:
            if isinstance(raw, bytes) and raw.startswith(self._prefix):
                self._invalidate(raw[len(self._prefix) :].decode())

    def _lost(self, reason: str) -> None:
        if self.live:
            log.warning("redis invalidations lost (%s): local exact tier off for now", reason)
        self.live = False
        self._drop_all()

    # --- the subscription -----------------------------------------------------------------------
    async def run_forever(self) -> None:
        """Subscribe, apply invalidations, ping; on any failure drop the tier and start over."""
        while True:
            try:
                if isinstance(self._client, RedisCluster):
                    await self._follow_cluster(self._client)
                else:
                    await self._subscribe_and_listen(self._client, self._confirmed)
            except REDIS_ERRORS as exc:
                self._lost(str(exc) or type(exc).__name__)
            except asyncio.CancelledError:  # shutting down: nothing to warn about
                self.live = False
                self._drop_all()
                raise
            await asyncio.sleep(RESUBSCRIBE_SECONDS)

    def _confirmed(self) -> None:
        self._drop_all()  # whatever was cached before this subscription is suspect
        self.live = True
        log.info("redis invalidations subscribed: local exact tier on")

    async def _follow_cluster(self, cluster: RedisCluster) -> None:
        """One subscription per master and a watch on the set of masters; the first of them
        to fail ends all (the caller drops the tier and starts over)."""
        assert self._node_client is not None
        masters = await cluster_masters(cluster)
        clients = [self._node_client(host, port) for host, port in sorted(masters)]
        waiting = set(range(len(clients)))

        def confirmed(index: int) -> None:
            waiting.discard(index)
            if not waiting:
                self._confirmed()

        tasks = [
            asyncio.create_task(self._subscribe_and_listen(c, functools.partial(confirmed, i)))
            for i, c in enumerate(clients)
        ]
        tasks.append(asyncio.create_task(self._watch_masters(cluster, masters)))
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()  # raises the first failure
        except REDIS_ERRORS as exc:
            self._lost(str(exc) or type(exc).__name__)  # off now, before the clean-up
            raise
        finally:
            await end_tasks(tasks)
            for client in clients:
                await _close_within(client.aclose())

    async def _watch_masters(self, cluster: RedisCluster, masters: set[tuple[str, int]]) -> None:
        """Every ``PING_SECONDS``, the masters as the cluster reports them: a change (or slots
        left uncovered) ends the subscription at once. A read that fails (the client's short
        per-command timeout on a loaded machine, a node that does not answer) is tried again
        the next second; only when none has succeeded for ``DEAD_AFTER`` does the watch give
        up, the same patience as the subscriptions' pings. One slow read used to drop the
        whole tier, and every hit read Redis until it was subscribed and filled again."""
        answered = time.monotonic()
        while True:
            await asyncio.sleep(PING_SECONDS)
            try:
                async with asyncio.timeout(DEAD_AFTER):
                    now = await cluster_masters(cluster)
                _raise_if_cancelled()
            except CONNECTION_ERRORS:
                if time.monotonic() - answered >= DEAD_AFTER:
                    raise
                continue
            answered = time.monotonic()
            if now != masters:
                raise RedisConnectionError(f"the cluster's masters changed: {sorted(now)}")

    async def _subscribe_and_listen(
        self, client: aioredis.Redis, confirmed: Callable[[], None]
    ) -> None:
        pubsub = client.pubsub()
        try:
            async with asyncio.timeout(DEAD_AFTER):
                await pubsub.execute_command("CLIENT", "ID")
                client_id = await pubsub.parse_response(block=True)
                await pubsub.execute_command(
                    "CLIENT", "TRACKING", "ON", "REDIRECT", client_id, "BCAST",
                    "PREFIX", self._prefix,
                )  # fmt: skip
                await pubsub.parse_response(block=True)
                await pubsub.subscribe(CHANNEL)
                confirmed_reply = await pubsub.get_message(timeout=DEAD_AFTER)
            if confirmed_reply is None or confirmed_reply.get("type") != "subscribe":
                raise TimeoutError("redis did not confirm the invalidation subscription")
            await self._check_tracked(client, client_id)
            confirmed()
            await self._listen(pubsub)
        finally:
            await _close_within(pubsub.aclose())  # type: ignore[no-untyped-call]

    async def _check_tracked(self, client: aioredis.Redis, client_id: object) -> None:
        """The subscribed connection is the one Redis tracks for us: had redis-py reconnected
        between ``CLIENT TRACKING`` and ``SUBSCRIBE``, the subscription would carry none."""
        async with asyncio.timeout(DEAD_AFTER):
            found = await client.client_list(client_id=[str(client_id)])
        flags = str(found[0].get("flags", "")) if len(found) == 1 else ""
        if "P" not in flags or "t" not in flags:
            raise RedisConnectionError("the invalidation connection is not the tracked one")

    async def _listen(self, pubsub: aioredis.client.PubSub) -> None:
        heard = pinged = time.monotonic()
        while True:
            message = await pubsub.get_message(timeout=PING_SECONDS)
            _raise_if_cancelled()
            now = time.monotonic()
            if message is not None:
                heard = now
                kind = message.get("type")
                if kind == "message":
                    self._on_message(message.get("data"))
                elif kind == "subscribe":
                    # redis-py reconnected and subscribed again by itself: the new connection
                    # has no CLIENT TRACKING, so invalidations would silently stop.
                    raise RedisConnectionError("the invalidation connection was re-established")
            if now - heard > DEAD_AFTER:
                raise TimeoutError("the invalidation subscription stopped answering pings")
            if now - pinged >= PING_SECONDS:
                pinged = now
                await pubsub.ping()


async def cluster_masters(cluster: RedisCluster) -> set[tuple[str, int]]:
    """The masters that serve slots and are not marked failed, as the cluster reports them
    (``CLUSTER NODES`` from any node), not as this client last cached them. Raises while they
    do not cover every slot (a master has failed and its replica has not taken over yet): no
    set of subscriptions would see every write then."""
    nodes = await cluster.cluster_nodes()
    found: set[tuple[str, int]] = set()
    covered = 0
    for address, node in nodes.items():
        flags = str(node.get("flags", "")).split(",")
        slots: Any = node.get("slots") or []
        if "master" in flags and "fail" not in flags and slots:
            host, _, port = str(address).rpartition(":")
            found.add((host, int(port.partition("@")[0])))
            covered += sum(int(end) - int(start) + 1 for start, end in slots)
    if covered < CLUSTER_SLOTS:
        raise RedisClusterException(f"the cluster's masters serve {covered} of its slots")
    return found


def _raise_if_cancelled() -> None:
    """End the current task if it was cancelled, even when the cancellation was swallowed.

    A subscription task cancelled inside a redis-py read can carry on as if nothing happened:
    in CI (a failover test, December 2026) three listening tasks were still looping 300 s after
    they were cancelled, and the store's close waited on them for ever. The task's own count of
    pending cancellations does not lie, so the loops look at it after every read."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def end_tasks(tasks: Collection[asyncio.Task[Any]], within: float = CLOSE_SECONDS) -> None:
    """Cancel ``tasks`` and wait at most ``within`` for them to end. A task that outlives it
    is left behind with a log line rather than holding up whoever closes; what an ended task
    raised is read, so asyncio logs no "exception was never retrieved"."""
    if not tasks:
        return
    for task in tasks:
        task.cancel()
    ended, left = await asyncio.wait(tasks, timeout=within)
    for task in ended:
        if not task.cancelled():
            task.exception()
    if left:
        log.warning("%d redis task(s) left running %.0f s after their cancel", len(left), within)


#: What a bounded close shrugs off.
_CLOSE_ERRORS: tuple[type[BaseException], ...] = (*REDIS_ERRORS, TimeoutError)


async def _close_within(closing: Coroutine[Any, Any, object]) -> None:
    """A connection's close, bounded by ``CLOSE_SECONDS``; a failure or a hang only logs.

    The close runs as a task of its own and is waited on, not wrapped in ``asyncio.timeout``:
    a timeout works by cancelling, and a close that swallows the cancellation would never end."""
    task = asyncio.ensure_future(closing)
    ended, _ = await asyncio.wait({task}, timeout=CLOSE_SECONDS)
    if not ended:
        task.cancel()
        log.info("redis invalidation connection not closed within %.0f s", CLOSE_SECONDS)
        return
    exc = None if task.cancelled() else task.exception()
    if exc is None:
        return
    if not isinstance(exc, _CLOSE_ERRORS):
        raise exc
    log.info("redis invalidation connection not closed cleanly: %s", exc or type(exc).__name__)
