"""What observability reads of the replicas, as plain records: the pool (``deja.upstream.pool``)
hands them over at scrape and sample time, so observability never imports the upstream side
(which records into ``Metrics``): the arrow points from upstream down to observability."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReplicaSample:
    """One replica's state at the moment it was read."""

    name: str
    healthy: bool
    breaker_open: bool
    in_flight: int
    #: Its in-flight limit (configured, or its max-num-seqs learned).
    limit: int
    #: Its prefix-cache counters since it started, in tokens, as last scraped.
    prefix_cache_queries: float
    prefix_cache_hits: float


#: Reads every replica now (e.g. ``ReplicaPool.samples``).
ReplicaSamples = Callable[[], Iterable[ReplicaSample]]
