"""Step 5 of the request path: which replica gets a request, and in what order to fail over.

Policies (``routing_policy``):
- ``prefix`` (default): consistent hashing of the prefix key with bounded loads — the key's home
  replica unless it holds more than ⌈(1+ε)·average⌉ requests, then the next one on the ring.
  Requests without a prefix key go to the least-loaded replica.
- ``least_loaded``: the usable replica with the lowest load / weight.
- ``round_robin``: rotation over the usable replicas.

The returned order is the failover order: the choice first, then the rest (ring order for
``prefix``, lightest first otherwise).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Literal

from deja.errors import NoHealthyReplicaError
from deja.upstream.pool import Replica, ReplicaPool
from deja.upstream.ring import NoReplicaError

Policy = Literal["prefix", "least_loaded", "round_robin"]
RouteReason = Literal["home", "spill", "least_loaded", "round_robin", "no_prefix"]


@dataclass(frozen=True, slots=True)
class Route:
    """Where to send a request: ``order[0]`` first, the rest on failover."""

    order: list[Replica]
    reason: RouteReason


class Router:
    """Chooses replicas from the pool's usable ones according to the policy."""

    def __init__(self, pool: ReplicaPool, policy: Policy, epsilon: float) -> None:
        self.pool = pool
        self.policy = policy
        self.epsilon = epsilon
        self._rotation = itertools.count()

    def route(self, model: str, prefix_key: str | None) -> Route:
        """The order over every usable replica that serves ``model`` (limits aside)."""
        now = time.monotonic()
        usable = self.pool.candidates(model, now)
        if not usable:
            raise NoHealthyReplicaError(f"no healthy replica serves model {model!r} right now")
        return self.order(usable, prefix_key, now)

    def order(self, usable: list[Replica], prefix_key: str | None, now: float) -> Route:
        """The policy's order over ``usable`` (non-empty): admission passes the replicas with
        a free slot, so the bounded-load hash only ever places a request where it can run."""
        if self.policy == "round_robin":
            start = next(self._rotation) % len(usable)
            return Route(usable[start:] + usable[:start], "round_robin")
        interval = self.pool.scrape_interval
        loads = {r.url: r.load(now, interval) for r in usable}
        if self.policy == "prefix" and prefix_key is not None:
            by_url = {r.url: r for r in usable}
            try:
                placement = self.pool.ring.place(prefix_key, loads, by_url.keys(), self.epsilon)
            except NoReplicaError as exc:  # usable replicas not on the ring (mid-reload)
                raise NoHealthyReplicaError(str(exc)) from exc
            first = by_url[placement.replica]
            rest = [
                by_url[u] for u in self.pool.ring.walk(prefix_key) if u in by_url and u != first.url
            ]
            return Route([first, *rest], placement.reason)
        ordered = sorted(usable, key=lambda r: (loads[r.url] / r.weight, r.url))
        return Route(ordered, "no_prefix" if self.policy == "prefix" else "least_loaded")
