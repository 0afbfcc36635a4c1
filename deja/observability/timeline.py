"""A short history of this process's traffic, one point per interval, for the console.

Every ``interval`` seconds a background task reads the cumulative counts (requests by cache
outcome, completion tokens and model seconds served from cache, each replica's prefix-cache
queries and hits) and keeps the difference from the previous reading. Nothing is added to the
request path: the counts already exist; this only differences them off it. ``SIZE`` points at
the default 10 s interval is the last hour, so the console shows history the moment it opens
instead of starting from an empty chart. Per process, like ``/admin/cache/stats``.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from deja.observability.metrics import Metrics
from deja.observability.replicas import ReplicaSamples
from deja.observability.stats import Stats

#: Points kept (an hour at the default 10 s interval).
SIZE = 360


@dataclass(frozen=True, slots=True)
class Counts:
    """Cumulative counts at one moment."""

    outcomes: dict[str, int]
    tokens_saved: float = 0.0
    seconds_saved: float = 0.0
    #: Replica name → (prefix-cache queries, hits), in tokens, as last scraped.
    prefix_cache: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: Request latency histogram, summed over routes and outcomes: upper bound (s) → count.
    latency: dict[float, float] = field(default_factory=dict)
    #: Requests answered 5xx, and 429 (rate limit or overload), since start.
    errors: float = 0.0
    throttled: float = 0.0
    #: Requests waiting for a replica slot right now (a gauge, not a count).
    queue: float = 0.0


@dataclass(frozen=True, slots=True)
class Point:
    """What happened during one interval, ending at ``at`` (wall clock)."""

    at: float
    seconds: float
    outcomes: dict[str, int]
    tokens_saved: float
    seconds_saved: float
    #: Replica name → prefix-cache hit rate over the interval (None: no queries or a reset).
    prefix_hit_rate: dict[str, float | None]
    #: Latency p50 and p95 of the interval's requests, in seconds (a bucket's upper bound;
    #: None without requests).
    latency_p50: float | None = None
    latency_p95: float | None = None
    errors: float = 0.0
    throttled: float = 0.0
    queue: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "at": round(self.at, 3),
            "seconds": round(self.seconds, 3),
            "requests": sum(self.outcomes.values()),
            "outcomes": self.outcomes,
            "tokens_saved": self.tokens_saved,
            "seconds_saved": round(self.seconds_saved, 6),
            "prefix_hit_rate": self.prefix_hit_rate,
            "latency_p50": self.latency_p50,
            "latency_p95": self.latency_p95,
            "errors": self.errors,
            "throttled": self.throttled,
            "queue": self.queue,
        }


def _prefix_rates(
    before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]
) -> dict[str, float | None]:
    rates: dict[str, float | None] = {}
    for name, (queries, hits) in after.items():
        q0, h0 = before.get(name, (0.0, 0.0))
        dq, dh = queries - q0, hits - h0
        rates[name] = round(dh / dq, 4) if dq > 0 and 0 <= dh <= dq else None
    return rates


def _quantile(before: dict[float, float], after: dict[float, float], q: float) -> float | None:
    """The upper bound of the bucket holding the ``q`` quantile of the interval's requests."""
    bounds = sorted(after)
    counts = [max(0.0, after[b] - before.get(b, 0.0)) for b in bounds]  # cumulative per bound
    total = counts[-1] if counts else 0.0
    if total <= 0:
        return None
    for bound, count in zip(bounds, counts, strict=True):
        if count >= q * total:
            return bound if bound != float("inf") else bounds[-2] if len(bounds) > 1 else None
    return None


def difference(before: Counts, after: Counts, at: float, seconds: float) -> Point:
    """The interval between two readings; a counter that went down (a restart) counts 0."""
    outcomes = {
        name: max(0, value - before.outcomes.get(name, 0)) for name, value in after.outcomes.items()
    }
    return Point(
        at=at,
        seconds=seconds,
        outcomes=outcomes,
        tokens_saved=max(0.0, after.tokens_saved - before.tokens_saved),
        seconds_saved=max(0.0, after.seconds_saved - before.seconds_saved),
        prefix_hit_rate=_prefix_rates(before.prefix_cache, after.prefix_cache),
        latency_p50=_quantile(before.latency, after.latency, 0.50),
        latency_p95=_quantile(before.latency, after.latency, 0.95),
        errors=max(0.0, after.errors - before.errors),
        throttled=max(0.0, after.throttled - before.throttled),
        queue=after.queue,
    )


class Timeline:
    """The ring of points; ``sample`` is called by ``run_forever`` (or a test)."""

    def __init__(self, read: Callable[[], Counts], interval: float, size: int = SIZE) -> None:
        self.read = read
        self.interval = interval
        self.points: deque[Point] = deque(maxlen=size)
        self._last = read()
        self._last_at = time.time()

    def sample(self, now: float | None = None) -> Point:
        now = time.time() if now is None else now
        counts = self.read()
        point = difference(self._last, counts, now, now - self._last_at)
        self.points.append(point)
        self._last, self._last_at = counts, now
        return point

    def as_json(self) -> dict[str, Any]:
        """The points, oldest first, and the cumulative counts right now."""
        current = self.read()
        return {
            "interval": self.interval,
            "points": [p.as_json() for p in self.points],
            "totals": {
                "requests": sum(current.outcomes.values()),
                "outcomes": current.outcomes,
                "tokens_saved": current.tokens_saved,
                "seconds_saved": round(current.seconds_saved, 6),
            },
        }

    async def run_forever(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self.sample()


def read_counts(stats: Stats, metrics: Metrics, replicas: ReplicaSamples) -> Counts:
    """The gateway's cumulative counts: outcomes from ``Stats``, savings from the metrics
    registry, prefix-cache counters from the replicas' last scrape."""
    totals = stats.totals()
    totals.pop("requests", None)
    registry = metrics.registry
    latency: dict[float, float] = {}
    errors = throttled = 0.0
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == "deja_request_duration_seconds_bucket":
                bound = float(sample.labels["le"])
                latency[bound] = latency.get(bound, 0.0) + sample.value
            elif sample.name == "deja_requests_total":
                status = sample.labels.get("status", "")
                errors += sample.value if status.startswith("5") else 0.0
                throttled += sample.value if status == "429" else 0.0
    return Counts(
        outcomes=totals,
        tokens_saved=registry.get_sample_value("deja_cached_completion_tokens_total") or 0.0,
        seconds_saved=registry.get_sample_value("deja_saved_model_seconds_total") or 0.0,
        prefix_cache={r.name: (r.prefix_cache_queries, r.prefix_cache_hits) for r in replicas()},
        latency=latency,
        errors=errors,
        throttled=throttled,
        queue=registry.get_sample_value("deja_admission_queue") or 0.0,
    )
