"""Routing by resident prefix: the replica that holds the longest part of the prompt, against
its load, with the bounded-load guarantee of the ring kept.

For a request of a model in ``kv_models`` the route step computes the prompt's block keys
(:mod:`deja.upstream.kv.match`) and hands them to the router inside a :class:`RouteKey` (the
prefix key as before, so every signature on the request path stays a ``str``). The router
then asks :meth:`KVRouting.order`:

1. every usable replica's resident prefix ``h_r`` (blocks, from its KV index) and its
   bounded-load capacity ``c_r = ceil((1 + ε)(T + 1) w_r / W)`` (as :mod:`deja.upstream.ring`),
   for a replica that holds at least half of the prompt never below its batch: its
   ``max_num_seqs`` where the scrape knows it (exported or learned), else the most requests a
   scrape found it running (``running_seen``: it has run that many at once), and never below
   ``kv_route_min_capacity`` (a shared system prompt that every replica holds does not
   count). With T + 1 under the replica count the bound is 1, and a replica batching one
   request would send the next one that it holds to a full prefill elsewhere (the ring's
   spills were a quarter of a low-load workload's requests, each a miss), though up to its
   batch it runs them at once: a request it holds waits for no one there, while the spill
   pays a full prefill and evicts another prompt's blocks for the copy. The floor holds only
   while the pool is under KV pressure (:meth:`KVRouting.under_pressure`), and is then
   ``HOLDER_BATCHES`` batches (one running, one queued there); without pressure the copy
   evicts nothing, and later requests can pick the idler of two holders;
2. among the replicas below capacity (all, if none is) the highest
   ``score = h_r·block_size / prompt_tokens − backlog_r / prompt_tokens − λ·load_r / c_r
   − μ·kv_use_r`` goes first, the rest in score order for failover. ``backlog_r`` is the
   prefill this gateway sent ``r`` lately: each routed request adds its uncached tokens, and
   the sum decays with ``PREFILL_DECAY_S`` (a hit queued behind a long prefill waits for it:
   the in-flight count alone does not see that). λ = ``kv_route_load_weight``,
   μ = ``kv_route_kv_weight``; ``kv_use`` from the last scrape, ignored when stale.
   ``X-Deja-Route: resident;tokens=N`` says how many prompt tokens it holds;
3. when that best replica holds none of the prompt (no replica holds it, or those that do are
   full or busy): the replica this gateway placed the same prompt on within the last
   ``PENDING_S`` seconds, if it has room (its events may not have arrived yet: a burst of one
   new prefix stays together), else the prefix key's ring order among the replicas with
   room, as the prefix policy places it (``home``/``spill``): without residency to go by,
   the router is the ring.

The cache salt travels in the same key: :meth:`Upstream` writes it into the body it sends.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from deja.kvcache.blockhash import BlockHasher
from deja.upstream.kv.demand import Demand
from deja.upstream.kv.events import EventEndpoints, KVEvents
from deja.upstream.kv.index import KVIndex
from deja.upstream.kv.match import BlockMatch, PromptBlocks, TemplateName

if TYPE_CHECKING:
    from deja.upstream.pool import Replica, ReplicaPool
    from deja.upstream.router import RouteReason

__all__ = ["KVRouting", "ModelSpec", "RouteKey", "Scored"]

log = logging.getLogger("deja.kvroute")

_CEIL_SLACK = 1e-9
#: How long a placement stands in for the events it will cause (a prefill and a publish).
PENDING_S = 5.0
#: Time constant of the prefill backlog's decay, seconds (about a long prefill's duration).
PREFILL_DECAY_S = 1.0
_PENDING_MAX = 8192
#: A replica whose KV demand (:mod:`deja.upstream.kv.demand`) reaches this share of its cache
#: puts the pool under KV pressure; below it everywhere, copies of a prompt are cheap.
PRESSURE_SHARE = 0.5
#: Under KV pressure a holder of most of a prompt takes up to this many batches: one running
#: and one queued where its blocks are (as admission's holder queue), before a spill's full
#: prefill elsewhere evicts another prompt's blocks for the copy (measured: spills at one
#: batch were the eviction cascade behind most of kv's full prefills under pressure).
HOLDER_BATCHES = 2
#: A spill prefers the ring's order among replicas scoring within this of the best (score
#: units: a share of the prompt; idle replicas differ by less, one busy prefilling by more).
SPILL_MARGIN = 0.2


class RouteKey(str):
    """A prefix key (``""`` when the request has none) with what routing by residency and
    tenant isolation need: the prompt's block keys (None: not computable) and the salt."""

    blocks: BlockMatch | None
    salt: str | None

    def __new__(cls, key: str | None, blocks: BlockMatch | None, salt: str | None) -> RouteKey:
        self = super().__new__(cls, key or "")
        self.blocks = blocks
        self.salt = salt
        return self


class Scored:
    """One replica's standing for one request (kept for tests and the bench)."""

    __slots__ = ("blocks", "capacity", "replica", "score")

    def __init__(self, replica: Replica, blocks: int, capacity: int, score: float) -> None:
        self.replica, self.blocks, self.capacity, self.score = replica, blocks, capacity, score


class ModelSpec:
    """What matching one model's prompts needs (built from ``KVModelSettings``)."""

    def __init__(
        self, tokenizer: str, template: TemplateName, block_size: int, algo: str, seed: str
    ) -> None:
        hasher = BlockHasher(algo, seed, block_size)  # type: ignore[arg-type]
        self.blocks = PromptBlocks.from_file(tokenizer, template, hasher)


class KVRouting:
    """The KV index, its event subscribers, the per-model prompt matchers and the scoring."""

    def __init__(
        self,
        models: Mapping[str, ModelSpec],
        endpoints_of: Callable[[str], EventEndpoints | None],
        *,
        load_weight: float = 1.0,
        kv_weight: float = 0.25,
        min_capacity: int = 1,
        max_blocks: int = 2_000_000,
        stale_tokens: int = 1024,
        on_drop: Callable[[str, str], None] | None = None,
    ) -> None:
        self.models = dict(models)
        self.index = KVIndex(max_blocks)
        self.drops: dict[tuple[str, str], int] = {}
        self.events = KVEvents(
            self.index, endpoints_of, on_drop=on_drop or self._count_drop, stale_tokens=stale_tokens
        )
        self.load_weight = load_weight
        self.kv_weight = kv_weight
        self.min_capacity = min_capacity
        self._pending: dict[int, tuple[str, float]] = {}
        self._backlog: dict[str, tuple[float, float]] = {}
        self.demand = Demand()

    def _count_drop(self, replica: str, reason: str) -> None:
        key = (urlsplit(replica).netloc or replica, reason)
        self.drops[key] = self.drops.get(key, 0) + 1

    # ------------------------------------------------------------------ request path

    def key(
        self,
        endpoint: str,
        body: Mapping[str, Any],
        model: str,
        prefix_key: str | None,
        salt: str | None,
    ) -> str | None:
        """The routing key of a request: a :class:`RouteKey` when there is something to
        route or salt by, else the plain prefix key."""
        spec = self.models.get(model)
        blocks = spec.blocks.match(endpoint, body, salt) if spec is not None else None
        if blocks is None and salt is None:
            return prefix_key
        return RouteKey(prefix_key, blocks, salt)

    def order(
        self,
        usable: Sequence[Replica],
        blocks: BlockMatch,
        loads: Mapping[str, int],
        epsilon: float,
        stale_after: float,
        now: float,
        ring: Sequence[str] = (),
    ) -> tuple[list[Replica], int, RouteReason]:
        """Replicas in score order, the resident tokens of the first, and why it is first
        (``resident``, ``home``: a pending placement, ``least_loaded``); ``ring`` is the
        prefix key's ring order (ties among equal scores follow it)."""
        keys = blocks.keys
        total = sum(loads.get(r.url, 0) for r in usable)
        weight = sum(r.weight for r in usable)
        scale = (1.0 + epsilon) * (total + 1) / weight if math.isfinite(epsilon) else math.inf
        floor = self.under_pressure(usable)
        prompt = max(blocks.prompt_tokens, 1)
        scored: list[Scored] = []
        best_hit = 0
        for replica in usable:
            index = self.index.get(replica.url)
            hit = index.match(keys) if index is not None else 0
            best_hit = max(best_hit, hit)
            cap = math.ceil(scale * replica.weight - _CEIL_SLACK) if math.isfinite(scale) else 0
            if cap and floor and blocks.mostly(hit):
                # it holds most of the prompt: up to its batch, it runs the request at once
                batch = max(replica.max_num_seqs or 0, replica.running_seen)
                cap = max(cap, self.min_capacity, HOLDER_BATCHES * batch)
            load = loads.get(replica.url, 0)
            share = hit * blocks.block_size / prompt
            metrics = replica.metrics
            kv = metrics.kv_cache_usage if now - metrics.scraped_at <= stale_after else 0.0
            pressure = load / cap if cap else 0.0
            backlog = self._backlog_at(replica.url, now) / prompt
            score = share - backlog - self.load_weight * pressure - self.kv_weight * kv
            scored.append(Scored(replica, hit, cap, score))
        rank = {url: i for i, url in enumerate(ring)}

        def key(s: Scored) -> tuple[float, int, str]:
            return (-s.score, rank.get(s.replica.url, len(rank)), s.replica.url)

        room = [s for s in scored if not s.capacity or loads.get(s.replica.url, 0) < s.capacity]
        ranked = sorted(room or scored, key=key)
        reason = self._first(ranked, blocks, best_hit, rank, now)
        rest = sorted((s for s in scored if s not in ranked), key=key)
        order = [s.replica for s in ranked] + [s.replica for s in rest]
        resident = ranked[0].blocks * blocks.block_size
        self._placed(order[0].url, blocks, resident, now)
        return order, resident, reason

    def _placed(self, url: str, blocks: BlockMatch, resident: int, now: float) -> None:
        """Remember that the prompt went to ``url``: its pending placement, the replica's KV
        demand and its prefill backlog (the tokens it must prefill)."""
        keys = blocks.keys
        if keys:
            if len(self._pending) >= _PENDING_MAX:
                self._pending.clear()
            self._pending[keys[-1]] = (url, now + PENDING_S)
        self.demand.add(url, keys, now)
        uncached = max(blocks.prompt_tokens - resident, 0)
        self._backlog[url] = (self._backlog_at(url, now) + uncached, now)

    def under_pressure(self, usable: Sequence[Replica]) -> bool:
        """Whether some replica's KV demand reaches ``PRESSURE_SHARE`` of its cache: its
        ``num_gpu_blocks`` from the scrape, else what its index held when it first evicted
        (a replica whose size is unknown and that never evicted is not under pressure)."""
        for replica in usable:
            capacity = replica.metrics.num_gpu_blocks
            if not capacity:
                index = self.index.get(replica.url)
                capacity = index.capacity if index is not None else None
            if capacity and self.demand.of(replica.url) >= PRESSURE_SHARE * capacity:
                return True
        return False

    def holders(self, candidates: Sequence[Replica], blocks: BlockMatch) -> list[Replica]:
        """Those of ``candidates`` whose index holds at least half of the prompt."""
        out = []
        for replica in candidates:
            index = self.index.get(replica.url)
            hit = index.match(blocks.keys) if index is not None else 0
            if blocks.mostly(hit):
                out.append(replica)
        return out

    def _first(
        self,
        ranked: list[Scored],
        blocks: BlockMatch,
        best_hit: int,
        rank: Mapping[str, int],
        now: float,
    ) -> RouteReason:
        """Settle who goes first in ``ranked`` (best score first), and why.

        When the best is a replica that holds none of the prompt, residency has not earned
        anyone the place: a prompt placed lately follows its placement (its events may still
        be on the way); one held nowhere goes to the best score (the least loaded); one whose
        holders are full or busy spills in ring order among the replicas with room scoring
        within ``SPILL_MARGIN`` of the best, as the prefix policy would spill it. So repeated
        spills build one second copy on the ring successor, rather than a full prefill on
        whichever idle replica scores a hair better (measured: spilling by score put the
        router at 0.53x the ring's TTFT p90 without pressure), while a successor that is
        clearly busier (a long prefill, more in flight) is still passed over.
        """
        keys = blocks.keys
        major = next((s for s in ranked if blocks.mostly(s.blocks)), None)
        if major is not None:
            # a replica with room holding most of the prompt goes first: a spill past it is a
            # full prefill elsewhere that evicts another prompt's blocks for the copy
            ranked.remove(major)
            ranked.insert(0, major)
            return "resident"
        if ranked[0].blocks:
            return "resident"
        if keys and self._follow_pending(ranked, keys[-1], now):
            return "home"
        floor = ranked[0].score - SPILL_MARGIN
        near = [s for s in ranked if s.score >= floor]
        if not best_hit:
            # held nowhere: among the replicas scoring near the best (by load), the one with
            # the least KV demand (ties in ring order)
            demand = self.demand.of
            first = min(
                near,
                key=lambda s: (
                    demand(s.replica.url) / s.replica.weight,
                    rank.get(s.replica.url, len(rank)),
                    s.replica.url,
                ),
            )
            ranked.remove(first)
            ranked.insert(0, first)
            return "least_loaded"
        if rank:
            first = min(near, key=lambda s: (rank.get(s.replica.url, len(rank)), s.replica.url))
            ranked.remove(first)
            ranked.insert(0, first)
            if first.blocks:
                return "resident"
        return "spill"

    def _follow_pending(self, ranked: list[Scored], key: int, now: float) -> bool:
        """Move the replica this prompt was placed on lately (if it has room) to the front."""
        pending = self._pending.get(key)
        if pending is None or pending[1] <= now:
            return False
        first = next((s for s in ranked if s.replica.url == pending[0]), None)
        if first is None:
            return False
        ranked.remove(first)
        ranked.insert(0, first)
        return True

    def _backlog_at(self, url: str, now: float) -> float:
        value, at = self._backlog.get(url, (0.0, now))
        return value * math.exp(-(now - at) / PREFILL_DECAY_S) if now > at else value

    # ------------------------------------------------------------------ background

    async def watch(self, pool: ReplicaPool, interval: float) -> None:
        """Follow the pool's membership and run the scrape-time checks every ``interval``."""
        while True:
            self.check(pool)
            await asyncio.sleep(interval)

    def check(self, pool: ReplicaPool) -> None:
        self.events.sync(r.url for r in pool.replicas)
        self.demand.forget(r.url for r in pool.replicas)
        for replica in pool.replicas:
            metrics = replica.metrics
            self.events.check(
                replica.url,
                healthy=replica.healthy,
                queries=metrics.prefix_cache_queries,
                hits=metrics.prefix_cache_hits,
            )

    def report(self, url: str) -> dict[str, object] | None:
        """The ``kv_index`` field of ``/admin/replicas`` (None: no events for it)."""
        index = self.index.get(url)
        return None if index is None else index.describe()

    async def close(self) -> None:
        await self.events.close()


def endpoints_from_settings(
    explicit: Mapping[str, Any], endpoint_template: str, replay_template: str
) -> Callable[[str], EventEndpoints | None]:
    """Each replica URL's event endpoints: its ``kv_events`` entry, else the templates with
    ``{host}`` filled in, else none."""

    def endpoints_of(url: str) -> EventEndpoints | None:
        entry = explicit.get(url)
        if entry is not None:
            return EventEndpoints(entry.endpoint, entry.replay_endpoint, entry.topic)
        if not endpoint_template:
            return None
        host = urlsplit(url).hostname or ""
        replay = replay_template.format(host=host) if replay_template else None
        return EventEndpoints(endpoint_template.format(host=host), replay)

    return endpoints_of
