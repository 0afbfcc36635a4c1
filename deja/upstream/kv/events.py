"""One KV-event subscriber per replica, in the gateway's event loop (``zmq.asyncio``).

Each subscriber connects a SUB socket to the replica's PUB endpoint and applies every batch
to the replica's :class:`~deja.upstream.kv.index.ReplicaIndex` in sequence order:

- the next sequence number: applied;
- a gap (``seq`` > last + 1): the missing batches are asked from the replay endpoint (a fresh
  DEALER socket: ``[b"", start]`` → ``[b"", seq, payload]``… ``[b"", -1, b""]``), each reply
  awaited at most ``REPLAY_TIMEOUT_S``. When the replay does not start at the missing number
  (its buffer moved on), times out, or there is no replay endpoint, the index is dropped
  (``deja_kv_index_drops_total{replica,reason}``, a log line, ``/admin/replicas``) and starts
  again, ``partial``, from the batch in hand;
- a number at or below the last one that is not a replay's echo: the publisher restarted
  (its cache is empty): the index is dropped and follows the new stream;
- a batch that does not decode: counted as lost, same as a gap nobody can replay.

Nothing here ever blocks routing: the router reads the sets as they are. A replica that stops
publishing is caught by :class:`KVEvents.check` (every scrape interval): it served prompt
tokens without a cache hit (the scrape's prefix-cache counters) but sent no batch, so its
index is marked ``stale`` and routing ignores it until a batch arrives (then a gap check
decides whether it is complete). A replica whose counters go back restarted: dropped. A
replica that fails its health probe: dropped (its cache may be gone when it comes back).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

import zmq
import zmq.asyncio

from deja.kvcache.wire import END_SEQ, WireError, decode_batch, decode_seq, encode_seq
from deja.upstream.kv.index import KVIndex, ReplicaIndex

__all__ = ["EventEndpoints", "KVEvents", "ReplicaSubscriber"]

log = logging.getLogger("deja.kvevents")

REPLAY_TIMEOUT_S = 1.0
#: Uncached prompt tokens a replica may serve in one scrape interval without publishing before
#: its index is taken as stale (64 blocks of 16: a silent publisher, not a quiet replica).
DEFAULT_STALE_TOKENS = 1024


@dataclass(frozen=True, slots=True)
class EventEndpoints:
    """Where a replica publishes (``endpoint``) and replays (``replay``, optional)."""

    endpoint: str
    replay: str | None = None
    topic: str = ""


DropCounter = Callable[[str, str], None]


class ReplicaSubscriber:
    """The SUB loop of one replica (a task of its own, cancelled to stop)."""

    def __init__(
        self,
        ctx: zmq.asyncio.Context,
        index: ReplicaIndex,
        endpoints: EventEndpoints,
        on_drop: DropCounter,
    ) -> None:
        self.ctx = ctx
        self.index = index
        self.endpoints = endpoints
        self._on_drop = on_drop
        self._echo_floor = -1
        """Sequence numbers from here to ``index.last_seq`` are a replay's echo on SUB."""
        self.lost = 0

    async def run(self) -> None:
        sub = self.ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.RCVHWM, 100_000)
        sub.connect(self.endpoints.endpoint)
        sub.setsockopt(zmq.SUBSCRIBE, self.endpoints.topic.encode())
        try:
            while True:
                frames = await sub.recv_multipart()
                if len(frames) != 3:
                    self._drop("malformed message")
                    continue
                try:
                    seq = decode_seq(frames[1])
                except WireError:
                    self._drop("malformed sequence frame")
                    continue
                await self.handle(seq, frames[2])
        finally:
            sub.close(linger=0)

    async def handle(self, seq: int, payload: bytes) -> None:
        """One message from the SUB socket (the loop's body, a method so tests drive it)."""
        index = self.index
        last = index.last_seq
        if last >= 0 and seq <= last:
            if seq >= self._echo_floor >= 0:
                return  # already applied from a replay
            self._drop(f"publisher restarted (sequence {last} -> {seq})")
            self._apply(seq, payload)
            if seq == 0:
                index.state = "live"
            return
        expected = last + 1 if last >= 0 else 0
        if seq > expected:
            if await self._replay(expected, seq):
                if last < 0:
                    index.state = "live"  # joined late, but the replay had it all from 0
            else:
                if last >= 0:
                    self._drop(f"events {expected}..{seq - 1} lost, not replayable")
                index.last_seq = seq - 1  # a late joiner without replay stays ``partial``
        elif last < 0:
            index.state = "live"
        self._apply(seq, payload)

    def _apply(self, seq: int, payload: bytes) -> None:
        try:
            batch = decode_batch(payload)
        except WireError as exc:
            self.lost += 1
            self._drop(f"undecodable batch {seq}: {exc}")
            self.index.last_seq = seq
            return
        self.index.apply(seq, batch, time.monotonic())

    async def _replay(self, start: int, until: int) -> bool:
        """Apply the replay's batches from ``start``; True when it had ``start..until-1``."""
        replay = self.endpoints.replay
        if replay is None:
            return False
        dealer = self.ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(replay)
        complete = False
        try:
            await dealer.send_multipart((b"", encode_seq(start)))
            first = True
            while True:
                frames = await asyncio.wait_for(dealer.recv_multipart(), REPLAY_TIMEOUT_S)
                if len(frames) != 3 or frames[1] == END_SEQ:
                    break
                seq = decode_seq(frames[1])
                if first:
                    complete = seq <= start
                    if not complete:
                        return False  # the replay buffer no longer reaches back to ``start``
                    first = False
                if seq > self.index.last_seq:
                    self._apply(seq, frames[2])
        except (TimeoutError, zmq.ZMQError, WireError):
            return False
        finally:
            dealer.close(linger=0)
        self._echo_floor = start
        return complete and self.index.last_seq >= until - 1

    def _drop(self, reason: str) -> None:
        self.index.drop(reason)
        self._on_drop(self.index.replica, reason.split(" ", 1)[0])


class KVEvents:
    """The subscribers of every replica with event endpoints, and the scrape-time check."""

    def __init__(
        self,
        index: KVIndex,
        endpoints_of: Callable[[str], EventEndpoints | None],
        *,
        on_drop: DropCounter,
        stale_tokens: int = DEFAULT_STALE_TOKENS,
    ) -> None:
        self.index = index
        self._endpoints_of = endpoints_of
        self._on_drop = on_drop
        self.stale_tokens = stale_tokens
        self._ctx = zmq.asyncio.Context()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._seen: dict[str, tuple[float, float, int, bool]] = {}

    def sync(self, urls: Iterable[str]) -> None:
        """Subscribe to new replicas, unsubscribe from removed ones."""
        wanted = {u: e for u in urls if (e := self._endpoints_of(u)) is not None}
        for url in list(self._tasks):
            if url not in wanted:
                self._tasks.pop(url).cancel()
                self.index.remove(url)
        for url, endpoints in wanted.items():
            if url in self._tasks:
                continue
            subscriber = ReplicaSubscriber(
                self._ctx, self.index.replica(url), endpoints, self._on_drop
            )
            name = f"deja-kv-events-{urlsplit(url).netloc}"
            self._tasks[url] = asyncio.get_running_loop().create_task(subscriber.run(), name=name)

    def check(
        self, url: str, *, healthy: bool, queries: float, hits: float, now: float | None = None
    ) -> None:
        """The scrape-time liveness check of one replica (see the module docstring)."""
        index = self.index.get(url)
        if index is None:
            return
        previous = self._seen.get(url)
        self._seen[url] = (queries, hits, index.batches, healthy)
        if previous is None:
            return
        p_queries, p_hits, p_batches, p_healthy = previous
        if not healthy:
            if p_healthy:
                self._drop(index, "replica unhealthy")
            return
        if queries < p_queries:
            self._drop(index, "replica restarted (prefix-cache counters went back)")
            return
        uncached = (queries - hits) - (p_queries - p_hits)
        if index.batches == p_batches and uncached >= self.stale_tokens and index.state != "stale":
            index.mark_stale()
            log.warning(
                "KV index of replica %s is stale: %d uncached prompt tokens served, no events",
                url,
                int(uncached),
            )
            self._on_drop(url, "stale")

    def _drop(self, index: ReplicaIndex, reason: str) -> None:
        index.drop(reason)
        self._on_drop(index.replica, reason.split(" ", 1)[0])

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        self._ctx.term()
