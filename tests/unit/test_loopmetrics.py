"""The lock-free loop metrics export exactly what prometheus_client's own metrics of the same
name would, for the same observations."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from deja.observability.loopmetrics import LoopCounter, LoopHistogram
from deja.observability.metrics import LATENCY_BUCKETS


def samples(registry: CollectorRegistry) -> list[str]:
    """Exposition lines, minus prometheus_client's ``_created`` timestamps."""
    text = generate_latest(registry).decode()
    return sorted(line for line in text.splitlines() if "_created" not in line)


def test_counter_and_histogram_match_prometheus_client() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    counter = LoopCounter("deja_x", "Things", ["route", "cache"], registry=ours)
    reference = Counter("deja_x", "Things", ["route", "cache"], registry=theirs)
    hist = LoopHistogram(
        "deja_y_seconds", "Time", ["layer"], buckets=LATENCY_BUCKETS, registry=ours
    )
    ref_hist = Histogram(
        "deja_y_seconds", "Time", ["layer"], buckets=LATENCY_BUCKETS, registry=theirs
    )
    for route, cache in [("chat", "exact"), ("chat", "exact"), ("completion", "miss")]:
        counter.inc((route, cache))
        reference.labels(route, cache).inc()
    for layer, value in [("exact", 0.0004), ("exact", 0.001), ("semantic", 0.3), ("exact", 99.0)]:
        hist.observe((layer,), value)
        ref_hist.labels(layer).observe(value)
    assert samples(ours) == samples(theirs)
    assert counter.value(("chat", "exact")) == 2
    assert hist.count(("exact",)) == 3
