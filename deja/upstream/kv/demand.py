"""The prompt blocks this gateway sent each replica lately: an estimate of the working set
each replica's prefix cache must hold.

A replica's KV index says what it holds, but a vLLM cache is always full (a free block keeps
its hash until it is reused), so residency alone cannot tell a replica whose cache holds what
its traffic needs from one that is evicting prompts it will be asked for again. The router
keeps, per replica, the distinct block keys it routed there in the current generation and the
one before (each :data:`GENERATION_S` seconds long); the demand is the larger of the two
counts. A prompt held nowhere is placed on the replica with the least demand among those
scoring near the best (:mod:`deja.upstream.kv.route`): under KV pressure that keeps the
customers' contexts spread by size, instead of by the in-flight count of the moment, which
measured scattering evicted contexts over every replica until each replica's working set
outgrew its cache (``bench/kv_routing.py``, the saturating closed loop).

Memory: two sets of 64-bit keys per replica (70 bytes per key), each capped at
:data:`MAX_KEYS` (a generation that fills ends early), so at most 2 x 262,144 x 70 bytes =
35 MiB per replica; usually a replica's working set over two generations, far less.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["GENERATION_S", "MAX_KEYS", "Demand"]

#: Length of one generation, seconds (a prompt not asked for in two generations drops out).
GENERATION_S = 10.0
#: Keys per replica per generation before it ends early.
MAX_KEYS = 262_144


class Demand:
    """Distinct prompt blocks routed to each replica over the last one or two generations."""

    def __init__(self, generation_s: float = GENERATION_S, max_keys: int = MAX_KEYS) -> None:
        self.generation_s = generation_s
        self.max_keys = max_keys
        self._current: dict[str, set[int]] = {}
        self._previous: dict[str, set[int]] = {}
        self._started: float | None = None

    def add(self, url: str, keys: Iterable[int], now: float) -> None:
        """``keys`` were routed to ``url`` at ``now``."""
        if self._started is None:
            self._started = now
        elif now - self._started >= self.generation_s:
            self.rotate(now)
        current = self._current.setdefault(url, set())
        current.update(keys)
        if len(current) > self.max_keys:
            self.rotate(now)

    def rotate(self, now: float) -> None:
        """Start a new generation: the current one becomes the previous."""
        self._previous, self._current = self._current, {}
        self._started = now

    def of(self, url: str) -> int:
        """The replica's demand in blocks."""
        return max(len(self._current.get(url, ())), len(self._previous.get(url, ())))

    def forget(self, keep: Iterable[str]) -> None:
        """Drop replicas not in ``keep`` (membership changed)."""
        kept = set(keep)
        for table in (self._current, self._previous):
            for url in [u for u in table if u not in kept]:
                del table[url]
