"""Consistent hashing with virtual nodes, weights and bounded loads: where a prefix key goes.

Each replica owns ``max(1, round(vnodes_per_weight * weight))`` points on a 64-bit ring, at
``blake2b-64(f"{replica}#{i}")``. A key is hashed the same way and belongs to the replica of the
first point at or after it (wrapping around). Adding or removing one replica therefore moves only
the keys of the arcs that replica gains or loses: about ``1/N`` of them, and every moved key moves
to (or away from) that replica only.

Placement uses *consistent hashing with bounded loads* (Mirrokni, Thorup and Zadimoghaddam, 2017;
HAProxy's ``hash-balance-factor``). With ``T`` the requests in flight on the healthy replicas
(not counting the one being placed), ``W`` the sum of the healthy replicas' weights and ``ε`` the
balance factor, replica ``r`` of weight ``w_r`` has capacity::

    capacity(r) = ceil((1 + ε) * (T + 1) * w_r / W)

i.e. ``1 + ε`` times its weighted share of the in-flight requests once this one is added. The key
walks the ring from its point, skipping unhealthy replicas, and lands on the first replica whose
load is below its capacity. Since the capacities sum to at least ``(1 + ε)(T + 1) > T``, such a
replica always exists, and after the placement no replica holds more than
``ceil((1 + ε) * T' * w_r / W)`` requests (``T'`` the new total) as long as loads only come from
these placements. The ceiling is taken with a 1e-9 slack so float rounding (``1.1 * 20 / 2`` is
``11.000000000000002``) never grants a slot the exact formula does not.

Nothing here does I/O or keeps per-request state: a ring is immutable and cheap to rebuild when the
replica set or the weights change.
"""

from __future__ import annotations

import hashlib
import math
from bisect import bisect_left
from collections.abc import Collection, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from types import MappingProxyType
from typing import Literal, NamedTuple

__all__ = [
    "DEFAULT_VNODES_PER_WEIGHT",
    "HashRing",
    "NoReplicaError",
    "Placement",
    "PlacementReason",
    "capacity",
    "hash64",
    "least_loaded",
]

#: Virtual nodes per unit of weight. 160 (as in ketama / HAProxy's 16 x weight scaled up) keeps
#: each replica's share of the key space within roughly ±8% (one standard deviation) of its weight.
DEFAULT_VNODES_PER_WEIGHT = 160

#: Subtracted before ``ceil`` so float noise just above an integer does not round a capacity up.
_CEIL_SLACK = 1e-9

_RING_SIZE = 1 << 64

_SET_TYPES = (set, frozenset)

PlacementReason = Literal["home", "spill"]


class NoReplicaError(Exception):
    """No healthy replica is on the ring: the request cannot be placed."""


class Placement(NamedTuple):
    """Where a request goes, and why.

    ``reason`` is ``"home"`` when ``replica`` is the key's first healthy replica on the ring,
    ``"spill"`` when that one (and maybe more) was at capacity and the walk moved on.
    """

    replica: str
    reason: PlacementReason


def hash64(value: str) -> int:
    """Stable 64-bit hash (blake2b, 8-byte digest) of ``value``: the same in every process."""
    return int.from_bytes(hashlib.blake2b(value.encode(), digest_size=8).digest(), "big")


def capacity(total_in_flight: int, weight: float, total_weight: float, epsilon: float) -> int:
    """Bounded-load capacity of one replica: ``ceil((1 + ε) * (T + 1) * w / W)``.

    ``total_in_flight`` (``T``) counts the healthy replicas' requests *before* the one being
    placed; ``weight`` (``w``) is this replica's weight and ``total_weight`` (``W``) the sum over
    the healthy replicas. A replica accepts the request when its load is below this number.
    """
    return _ceil((1.0 + epsilon) * (total_in_flight + 1) * weight / total_weight)


def _ceil(value: float) -> int:
    return math.ceil(value - _CEIL_SLACK)


def least_loaded(
    loads: Mapping[str, int],
    healthy: Iterable[str],
    weights: Mapping[str, float] | None = None,
) -> str:
    """The healthy replica with the lowest ``load / weight``; ties go to the smallest name.

    Missing loads count as 0 and missing weights as 1.0. Used by the ``least_loaded`` policy, for
    requests without a prefix key, and as the ring's last resort. Raises :class:`NoReplicaError`
    when ``healthy`` is empty.
    """
    best: str | None = None
    best_score = 0.0
    for replica in healthy:
        weight = 1.0 if weights is None else weights.get(replica, 1.0)
        score = loads.get(replica, 0) / weight
        if best is None or score < best_score or (score == best_score and replica < best):
            best, best_score = replica, score
    if best is None:
        raise NoReplicaError("no healthy replica")
    return best


class HashRing:
    """An immutable consistent-hash ring over weighted replicas.

    ``replicas`` are ids such as ``"10.0.0.1:8000"``; ``weights`` maps some of them to a float
    > 0 (default 1.0). Raises :class:`ValueError` on duplicate or empty ids, a weight for an
    unknown replica, or a weight that is not a finite positive number. An empty ring is allowed
    (every placement then raises :class:`NoReplicaError`).
    """

    __slots__ = ("_orders", "_owners", "_points", "_replicas", "_vnodes", "_weights")

    def __init__(
        self,
        replicas: Iterable[str],
        weights: Mapping[str, float] | None = None,
        *,
        vnodes_per_weight: int = DEFAULT_VNODES_PER_WEIGHT,
    ) -> None:
        if vnodes_per_weight < 1:
            raise ValueError(f"vnodes_per_weight must be >= 1, got {vnodes_per_weight}")
        ids = tuple(replicas)
        if len(set(ids)) != len(ids):
            raise ValueError(f"duplicate replica ids in {ids!r}")
        if any(not r for r in ids):
            raise ValueError("replica ids must be non-empty strings")
        given = dict(weights or {})
        unknown = set(given) - set(ids)
        if unknown:
            raise ValueError(f"weights given for unknown replicas: {sorted(unknown)!r}")
        resolved: dict[str, float] = {}
        vnodes: dict[str, int] = {}
        for replica in ids:
            weight = float(given.get(replica, 1.0))
            if not (weight > 0.0 and math.isfinite(weight)):
                raise ValueError(f"weight of {replica!r} must be finite and > 0, got {weight}")
            resolved[replica] = weight
            # At least one point, so a tiny weight still keeps the replica on the ring.
            vnodes[replica] = max(1, round(vnodes_per_weight * weight))
        # Sorting (point, replica) pairs keeps the ring deterministic even on a 64-bit collision.
        points = sorted((hash64(f"{r}#{i}"), r) for r in ids for i in range(vnodes[r]))
        self._replicas = ids
        self._weights: Mapping[str, float] = MappingProxyType(resolved)
        self._vnodes: Mapping[str, int] = MappingProxyType(vnodes)
        self._points = [p for p, _ in points]
        self._owners = [r for _, r in points]
        # Distinct-replica walk order from each point, filled lazily: the walk from a point
        # depends only on that point, and the home replica usually has room, so most requests
        # only need the first element, but computing the order once keeps each later walk O(N).
        self._orders: dict[int, tuple[str, ...]] = {}

    # ------------------------------------------------------------------ introspection

    @property
    def replicas(self) -> tuple[str, ...]:
        """The replica ids, in the order given."""
        return self._replicas

    @property
    def weights(self) -> Mapping[str, float]:
        """Each replica's weight (read-only)."""
        return self._weights

    def vnodes(self, replica: str) -> int:
        """How many points ``replica`` has on the ring (``KeyError`` if it is not on it)."""
        return self._vnodes[replica]

    def __len__(self) -> int:
        return len(self._replicas)

    def __contains__(self, replica: object) -> bool:
        return replica in self._weights

    def __repr__(self) -> str:
        return f"HashRing({dict(self._weights)!r}, points={len(self._points)})"

    def share_of_keys(self) -> dict[str, float]:
        """Fraction of the 64-bit hash space each replica owns (the values sum to 1.0).

        A point owns the arc from the previous point (exclusive) up to itself (inclusive), which
        is exactly the set of key hashes ``bisect_left`` maps to it; the first point also owns the
        wrap-around arc after the last point.
        """
        points, owners = self._points, self._owners
        if not points:
            return {}
        arcs = dict.fromkeys(self._replicas, 0)
        previous = points[-1] - _RING_SIZE
        for point, owner in zip(points, owners, strict=True):
            arcs[owner] += point - previous
            previous = point
        return {replica: arc / _RING_SIZE for replica, arc in arcs.items()}

    # ------------------------------------------------------------------ lookup

    def _order(self, key: str) -> tuple[str, ...]:
        points = self._points
        if not points:
            return ()
        index = bisect_left(points, hash64(key))
        if index == len(points):
            index = 0
        order = self._orders.get(index)
        if order is None:
            order = self._orders[index] = self._compute_order(index)
        return order

    def _compute_order(self, start: int) -> tuple[str, ...]:
        owners = self._owners
        wanted = len(self._replicas)
        seen: dict[str, None] = {}  # insertion-ordered set
        count = len(owners)
        for step in range(count):
            seen.setdefault(owners[(start + step) % count])
            if len(seen) == wanted:
                break
        return tuple(seen)

    def home(self, key: str) -> str:
        """The replica owning ``key``'s point, ignoring health and load."""
        order = self._order(key)
        if not order:
            raise NoReplicaError("the ring has no replicas")
        return order[0]

    def walk(self, key: str) -> Iterator[str]:
        """Every replica once, in ring order from ``key``'s successor point.

        The first is the key's home; the rest are its spill-over and failover order.
        """
        return iter(self._order(key))

    # ------------------------------------------------------------------ placement

    def place(
        self,
        key: str,
        loads: Mapping[str, int],
        healthy: Collection[str],
        epsilon: float,
    ) -> Placement:
        """Place one request for ``key`` with bounded loads (see the module docstring).

        ``loads`` holds the requests in flight per replica (missing means 0), ``healthy`` the
        replicas that may take the request (ids not on the ring are ignored), ``epsilon`` the
        balance factor ε >= 0 (``math.inf`` means plain consistent hashing: always the first
        healthy replica). Raises :class:`NoReplicaError` when no healthy replica is on the ring
        and :class:`ValueError` for a negative or NaN ``epsilon``.
        """
        if not epsilon >= 0.0:
            raise ValueError(f"epsilon must be >= 0, got {epsilon}")
        if type(healthy) not in _SET_TYPES and not isinstance(healthy, AbstractSet):
            healthy = frozenset(healthy)  # O(1) membership below; a list would make it O(N)
        weights = self._weights
        total = 0
        total_weight = 0.0
        for replica in healthy:
            weight = weights.get(replica)
            if weight is not None:
                total += loads.get(replica, 0)
                total_weight += weight
        if total_weight == 0.0:
            raise NoReplicaError("no healthy replica on the ring")
        unbounded = math.isinf(epsilon)
        # capacity(r) = ceil(scale * w_r), with the factor common to every replica hoisted out.
        scale = (1.0 + epsilon) * (total + 1) / total_weight
        first: str | None = None
        for replica in self._order(key):
            if replica not in healthy:
                continue
            if first is None:
                first = replica
                if unbounded:
                    return Placement(replica, "home")
            if loads.get(replica, 0) < _ceil(scale * weights[replica]):
                return Placement(replica, "home" if replica == first else "spill")
        # Unreachable when the loads are consistent (the capacities sum to more than the
        # total); kept so odd inputs (a loads mapping changing under us) still get an answer.
        chosen = least_loaded(loads, (r for r in healthy if r in weights), weights)
        return Placement(chosen, "home" if chosen == first else "spill")
