"""What observability reads of the replicas, as plain records: the pool (``deja.upstream.pool``)
hands them over at scrape and sample time, so observability never imports the upstream side
(which records into ``Metrics``): the arrow points from upstream down to observability. The
``deja_replica_*`` gauges are built from them at scrape time (:class:`ReplicaCollector`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


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


class ReplicaCollector(Collector):
    """The ``deja_replica_*`` gauges, read from the replicas at each scrape."""

    def __init__(self, replicas: Callable[[], Iterable[ReplicaSample]]) -> None:
        self._replicas = replicas

    def collect(self) -> Iterable[Metric]:
        healthy = GaugeMetricFamily(
            "deja_replica_healthy",
            "1 if the replica's last /health probe answered",
            labels=["replica"],
        )
        breaker = GaugeMetricFamily(
            "deja_replica_breaker_open",
            "1 while the replica's circuit breaker is open",
            labels=["replica"],
        )
        in_flight = GaugeMetricFamily(
            "deja_replica_in_flight",
            "Requests this gateway has open on the replica",
            labels=["replica"],
        )
        limit = GaugeMetricFamily(
            "deja_replica_max_inflight",
            "The replica's in-flight limit (configured, or its max-num-seqs learned)",
            labels=["replica"],
        )
        for r in self._replicas():
            healthy.add_metric([r.name], 1.0 if r.healthy else 0.0)
            breaker.add_metric([r.name], 1.0 if r.breaker_open else 0.0)
            in_flight.add_metric([r.name], float(r.in_flight))
            limit.add_metric([r.name], float(r.limit))
        return [healthy, breaker, in_flight, limit]
