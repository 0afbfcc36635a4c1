"""The replica pool: which vLLM replicas exist, their weights, health, breakers and load.

State per replica:
- ``healthy``: the last active ``/health`` probe answered (optimistic until the first probe);
- a circuit ``Breaker`` fed by real requests (passive health);
- ``in_flight``: requests this gateway has open on it (never stale);
- ``metrics``: the last scrape of its ``/metrics`` (running, waiting, KV usage);
- its in-flight limit (``ReplicaPool.limit``): its spec's ``;max_inflight=N``, else
  ``replica_max_inflight``, else its max-num-seqs as exported or learned from the scrapes.

Membership can change at run time (``update``): a replica that stays keeps its state, and a
request in flight on a removed replica finishes on the object it already holds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from config.replicas import parse_replica_spec
from deja.observability.replicas import ReplicaSample
from deja.upstream.ring import HashRing

#: Consecutive failures (5xx, timeouts) that open a replica's breaker.
BREAKER_FAILURES = 3
#: A scrape older than this many intervals is ignored as a load signal.
STALE_SCRAPES = 3.0
#: The in-flight limit of a replica whose own is not known yet: vLLM's default --max-num-seqs.
UNLEARNED_MAX_INFLIGHT = 256
#: A learned limit is only a lower bound (a replica short of KV cache runs fewer than its
#: max-num-seqs), so the gateway may send this share more: if the replica runs them, the next
#: scrape raises the limit; if not, they wait in its own queue, ready when a sequence ends.
LEARNED_HEADROOM = 0.125


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(slots=True)
class Breaker:
    """Passive health: opens after failures, half-opens for one probe after a cooldown."""

    state: BreakerState = BreakerState.CLOSED
    failures: int = 0
    open_until: float = 0.0
    probing: bool = False

    def available(self, now: float) -> bool:
        """May a request be sent now? (Does not consume the half-open probe.)"""
        if self.state is BreakerState.CLOSED:
            return True
        if self.state is BreakerState.OPEN:
            return now >= self.open_until
        return not self.probing

    def cooling(self, now: float) -> bool:
        """Open and still in its cooldown: the replica takes nothing, not even a probe."""
        return self.state is BreakerState.OPEN and now < self.open_until

    def begin(self, now: float) -> None:
        """A request is being sent: an open breaker past its cooldown half-opens for it."""
        if self.state is BreakerState.OPEN and now >= self.open_until:
            self.state = BreakerState.HALF_OPEN
        if self.state is BreakerState.HALF_OPEN:
            self.probing = True

    def success(self) -> None:
        self.state, self.failures, self.probing = BreakerState.CLOSED, 0, False

    def abandon(self) -> None:
        """The probe ended with no verdict (its client went away, its deadline passed): the
        next request probes instead, rather than the breaker waiting for good."""
        if self.state is BreakerState.HALF_OPEN:
            self.probing = False

    def failure(self, now: float, cooldown: float, *, immediate: bool = False) -> None:
        """Record a failure; ``immediate`` (refused connection, 429, 503) opens at once."""
        self.failures += 1
        self.probing = False
        if immediate or self.state is BreakerState.HALF_OPEN or self.failures >= BREAKER_FAILURES:
            self.state = BreakerState.OPEN
            self.open_until = max(self.open_until, now + cooldown)


@dataclass(slots=True)
class ReplicaMetrics:
    """The load signals scraped from a replica's ``/metrics`` (vLLM names)."""

    running: float = 0.0
    waiting: float = 0.0
    kv_cache_usage: float = 0.0
    #: Mean decode time per output token since the replica started (its histogram's sum/count).
    seconds_per_token: float | None = None
    #: A ``max_num_seqs`` label on a ``vllm:*_config_info`` series, where a server exports one
    #: (vLLM itself does not: its only info series, ``vllm:cache_config_info``, is CacheConfig).
    max_num_seqs: int | None = None
    #: The KV cache's size in blocks (``num_gpu_blocks`` of ``vllm:cache_config_info``).
    num_gpu_blocks: int | None = None
    scraped_at: float = 0.0
    #: This gateway's in-flight count when the scrape arrived: the part of running + waiting
    #: that was its own.
    own_at_scrape: int = 0
    #: The replica's prefix-cache counters since it started, in tokens.
    prefix_cache_queries: float = 0.0
    prefix_cache_hits: float = 0.0


@dataclass(slots=True, eq=False)
class Replica:
    """One upstream vLLM (or simulated) replica."""

    url: str
    weight: float = 1.0
    simulated: bool = False
    healthy: bool = True
    in_flight: int = 0
    breaker: Breaker = field(default_factory=Breaker)
    metrics: ReplicaMetrics = field(default_factory=ReplicaMetrics)
    models: list[dict[str, Any]] = field(default_factory=list)
    last_error: str | None = None
    #: ``;max_inflight=N`` in the replica's spec.
    max_inflight: int | None = None
    #: Its concurrency as exported (``max_num_seqs`` label) or learned from the scrapes.
    max_num_seqs: int | None = None
    max_num_seqs_learned: bool = False
    #: The most requests a scrape found it running: a lower bound of its batch, known long
    #: before a saturated scrape teaches ``max_num_seqs``.
    running_seen: int = 0

    @property
    def name(self) -> str:
        return urlsplit(self.url).netloc

    def usable(self, now: float) -> bool:
        return self.healthy and self.breaker.available(now)

    def serves(self, model: str) -> bool:
        """True when the replica lists ``model``, or its list could not be read yet."""
        return not self.models or any(entry.get("id") == model for entry in self.models)

    def learn_capacity(self, m: ReplicaMetrics) -> None:
        """Record the replica's max-num-seqs from a scrape. Exported: taken as is. Otherwise the
        most requests it was seen running, counted from the first scrape that found requests
        waiting (saturated, so running was its limit). It rises again on evidence: a scrape
        that finds the replica running at least the learned value with nothing waiting shows
        it had room, so the value steps up by the headroom share. (Before, only a scrape that
        caught running *above* the learned value raised it, and the gateway's own limit kept
        it from ever running more: a replica with ``--max-num-seqs 16`` learned as 6 stayed
        there for 600 streams, since under churn a scrape rarely finds every slot taken.)"""
        self.running_seen = max(self.running_seen, int(m.running))
        if m.max_num_seqs is not None:
            self.max_num_seqs, self.max_num_seqs_learned = m.max_num_seqs, False
            return
        if self.max_num_seqs is None and m.waiting <= 0:
            return
        running = int(m.running)
        learned = max(self.max_num_seqs or 0, running)
        if self.max_num_seqs is not None and m.waiting <= 0 and running >= self.max_num_seqs:
            learned = running + math.ceil(running * LEARNED_HEADROOM)
        self.max_num_seqs = learned or None
        self.max_num_seqs_learned = True

    def load(self, now: float, scrape_interval: float) -> int:
        """Requests on this replica: this gateway's in-flight count (exact, never stale), plus
        what other gateways had on it at the last fresh scrape (running + waiting beyond this
        gateway's own count at that moment)."""
        m = self.metrics
        if now - m.scraped_at > STALE_SCRAPES * scrape_interval:
            return self.in_flight
        others = int(m.running + m.waiting) - m.own_at_scrape
        return self.in_flight + max(0, others)


class ReplicaPool:
    """The current replicas and the hash ring over them."""

    def __init__(
        self,
        specs: list[str],
        *,
        cooldown: float,
        scrape_interval: float,
        simulated: bool = False,
        max_inflight: int | None = None,
    ) -> None:
        self.cooldown = cooldown
        self.scrape_interval = scrape_interval
        self.simulated = simulated
        self.max_inflight = max_inflight
        self._listeners: list[Callable[[], None]] = []
        self.replicas: list[Replica] = []
        self.ring = HashRing([])
        self._known: frozenset[str] = frozenset()
        self.models_refreshed_at = 0.0
        self.update(specs)

    def update(self, specs: list[str]) -> None:
        """Set the membership; replicas that stay keep their state and their ring points."""
        current = {r.url: r for r in self.replicas}
        replicas = []
        for spec in specs:
            parsed = parse_replica_spec(spec)
            replica = current.get(parsed.url) or Replica(url=parsed.url, simulated=self.simulated)
            replica.weight, replica.max_inflight = parsed.weight, parsed.max_inflight
            replicas.append(replica)
        self.replicas = replicas
        self.ring = HashRing([r.url for r in replicas], {r.url: r.weight for r in replicas})
        self._recompute_known()
        self.changed()

    def samples(self) -> list[ReplicaSample]:
        """Every replica's state as observability reads it (metrics at scrape, the timeline)."""
        return [
            ReplicaSample(
                name=r.name,
                healthy=r.healthy,
                breaker_open=r.breaker.state is not BreakerState.CLOSED,
                in_flight=r.in_flight,
                limit=self.limit(r),
                prefix_cache_queries=r.metrics.prefix_cache_queries,
                prefix_cache_hits=r.metrics.prefix_cache_hits,
            )
            for r in self.replicas
        ]

    def limit(self, replica: Replica) -> int:
        """How many requests ``replica`` may have in flight (see the module docstring)."""
        if replica.max_inflight is not None:
            return replica.max_inflight
        if self.max_inflight is not None:
            return self.max_inflight
        seqs = replica.max_num_seqs
        if seqs is None:
            return UNLEARNED_MAX_INFLIGHT
        if replica.max_num_seqs_learned:
            return seqs + math.ceil(seqs * LEARNED_HEADROOM)
        return seqs

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` whenever a replica may have gained room: a breaker's verdict, a
        health round, new membership or model lists (admission wakes its waiters)."""
        self._listeners.append(listener)

    def changed(self) -> None:
        for listener in self._listeners:
            listener()

    def candidates(self, model: str, now: float | None = None) -> list[Replica]:
        """Usable replicas that serve ``model``, in configuration order."""
        now = time.monotonic() if now is None else now
        return [r for r in self.replicas if r.serves(model) and r.usable(now)]

    def record_failure(
        self,
        replica: Replica,
        reason: str,
        *,
        immediate: bool = False,
        retry_after: float | None = None,
    ) -> None:
        cooldown = max(self.cooldown, retry_after or 0.0)
        replica.breaker.failure(time.monotonic(), cooldown, immediate=immediate)
        replica.last_error = reason
        self.changed()

    def record_success(self, replica: Replica) -> None:
        closing = replica.breaker.state is not BreakerState.CLOSED
        replica.breaker.success()
        replica.last_error = None
        if closing:
            self.changed()

    def set_models(self, replica: Replica, models: list[dict[str, Any]]) -> None:
        """Record what ``replica`` serves (from its ``/v1/models``)."""
        replica.models = models
        self._recompute_known()
        self.changed()

    def _recompute_known(self) -> None:
        self._known = frozenset(str(m.get("id")) for r in self.replicas for m in r.models)

    def seconds_per_token(self) -> float | None:
        """The replicas' mean time per output token (for "model time saved"), if known."""
        values = [r.metrics.seconds_per_token for r in self.replicas if r.metrics.seconds_per_token]
        return sum(values) / len(values) if values else None

    def known_models(self) -> frozenset[str]:
        """Every model id some replica serves."""
        return self._known

    def model_list(self) -> list[dict[str, Any]]:
        """The models the replicas serve, once each, as OpenAI model objects."""
        seen: dict[str, dict[str, Any]] = {}
        for replica in self.replicas:
            for entry in replica.models:
                seen.setdefault(str(entry.get("id")), entry)
        return list(seen.values())
