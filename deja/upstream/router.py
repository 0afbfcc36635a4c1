"""Step 5 of the request path: which replica gets a request, and in what order to fail over.

Policies (``routing_policy``):
- ``prefix`` (default): consistent hashing of the prefix key with bounded loads — the key's home
  replica unless it holds more than ⌈(1+ε)·average⌉ requests, then the next one on the ring.
  Requests without a prefix key go to the least-loaded replica.
- ``least_loaded``: the usable replica with the lowest load / weight.
- ``round_robin``: rotation over the usable replicas.

The returned order is the failover order: the choice first, then the rest (ring order for
``prefix``, lightest first otherwise).

With ``kv`` set (:mod:`deja.upstream.kv.route`) and a key that carries the prompt's block keys,
``prefix`` first asks it for the replica holding the longest resident prefix against load
(reason ``resident``); when no replica holds any of it, the ring decides as before.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from deja.errors import NoHealthyReplicaError
from deja.request import GatewayRequest
from deja.upstream.kv.route import RouteKey
from deja.upstream.pool import Replica, ReplicaPool
from deja.upstream.ring import NoReplicaError
from deja.upstream.salt import request_salt

if TYPE_CHECKING:
    from deja.upstream.kv.route import KVRouting

Policy = Literal["prefix", "least_loaded", "round_robin"]
RouteReason = Literal["home", "spill", "least_loaded", "round_robin", "no_prefix", "resident"]


@dataclass(frozen=True, slots=True)
class Route:
    """Where to send a request: ``order[0]`` first, the rest on failover."""

    order: list[Replica]
    reason: RouteReason
    #: Prompt tokens ``order[0]`` holds (reason ``resident``).
    resident_tokens: int = 0

    def label(self) -> str:
        """``X-Deja-Route`` for ``order[0]``: the reason, with the resident tokens."""
        if self.reason == "resident":
            return f"resident;tokens={self.resident_tokens}"
        return self.reason


class Router:
    """Chooses replicas from the pool's usable ones according to the policy."""

    def __init__(self, pool: ReplicaPool, policy: Policy, epsilon: float) -> None:
        self.pool = pool
        self.policy = policy
        self.epsilon = epsilon
        self._rotation = itertools.count()
        self.kv: KVRouting | None = None
        self.isolate_prefix_caches = False

    def key(self, req: GatewayRequest, prefix_key: str | None) -> str | None:
        """The routing key the request travels with: ``prefix_key``, or a
        :class:`~deja.upstream.kv.route.RouteKey` carrying the prompt's block keys (a model in
        ``kv_models``) and the tenant's ``cache_salt`` (``prefix_cache_isolation``)."""
        salt = None
        if self.isolate_prefix_caches:
            salt = request_salt(req.tenant, req.share_prefix_cache, req.body.get("cache_salt"))
        if self.kv is not None:
            return self.kv.key(req.endpoint, req.body, req.model, prefix_key, salt)
        return prefix_key if salt is None else RouteKey(prefix_key, None, salt)

    def route(self, model: str, prefix_key: str | None) -> Route:
        """The order over every usable replica that serves ``model`` (limits aside)."""
        now = time.monotonic()
        usable = self.pool.candidates(model, now)
        if not usable:
            raise NoHealthyReplicaError(f"no healthy replica serves model {model!r} right now")
        return self.order(usable, prefix_key, now)

    def holders(self, candidates: list[Replica], prefix_key: str | None) -> list[Replica]:
        """Of ``candidates``, those that hold most of the request's prompt (routing by
        resident prefix only; otherwise none)."""
        blocks = getattr(prefix_key, "blocks", None)
        if self.policy != "prefix" or self.kv is None or blocks is None or not candidates:
            return []
        return self.kv.holders(candidates, blocks)

    def order(self, usable: list[Replica], prefix_key: str | None, now: float) -> Route:
        """The policy's order over ``usable`` (non-empty): admission passes the replicas with
        a free slot, so the bounded-load hash only ever places a request where it can run."""
        if self.policy == "round_robin":
            start = next(self._rotation) % len(usable)
            return Route(usable[start:] + usable[:start], "round_robin")
        interval = self.pool.scrape_interval
        loads = {r.url: r.load(now, interval) for r in usable}
        blocks = getattr(prefix_key, "blocks", None)
        if self.policy == "prefix" and self.kv is not None and blocks is not None:
            ring = tuple(self.pool.ring.walk(prefix_key)) if prefix_key else ()
            order, tokens, why = self.kv.order(
                usable, blocks, loads, self.epsilon, interval * 3.0, now, ring
            )
            return Route(order, why, tokens)
        if self.policy == "prefix" and prefix_key:
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
