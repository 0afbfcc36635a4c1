"""Counters and histograms for the request path, updated on the event loop without locks.

``prometheus_client``'s metrics take a ``threading.Lock`` and run a few layers of checks per
increment; an exact hit made seven such updates (its count, its latency, the lookup's latency,
the tokens and model time it saved), about a tenth of the gateway's own CPU per hit under
py-spy. Everything on the request path runs on the one event-loop thread, so these keep plain
dicts of numbers, updated in place, and hand them to the registry as metric families when
``/metrics`` is scraped (on the same thread). The exported series are the ones
``prometheus_client`` would write for a ``Counter`` or ``Histogram`` of the same name.

Only the event-loop thread may update them; metrics updated from worker threads (the embedder,
the verifier) stay ``prometheus_client`` metrics.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

Labels = tuple[str, ...]


class LoopCounter(Collector):
    """A counter (exported as ``<name>_total``) keyed by a tuple of label values."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        registry: CollectorRegistry,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = list(labelnames)
        self._values: dict[Labels, float] = {}
        registry.register(self)

    def inc(self, labels: Labels = (), amount: float = 1.0) -> None:
        values = self._values
        values[labels] = values.get(labels, 0.0) + amount

    def value(self, labels: Labels = ()) -> float:
        return self._values.get(labels, 0.0)

    def describe(self) -> Iterable[Metric]:
        return [CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> Iterable[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, value in list(self._values.items()):
            family.add_metric(list(labels), value)
        return [family]


class LoopHistogram(Collector):
    """A histogram with fixed upper bounds (``le``), keyed by a tuple of label values."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        buckets: Sequence[float],
        registry: CollectorRegistry,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = list(labelnames)
        self._bounds = sorted(float(b) for b in buckets if not math.isinf(b))
        #: Per label values: [count per bucket (the last is +Inf)..., sum].
        self._series: dict[Labels, list[float]] = {}
        registry.register(self)

    def observe(self, labels: Labels, value: float) -> None:
        series = self._series.get(labels)
        if series is None:
            series = self._series[labels] = [0.0] * (len(self._bounds) + 2)
        series[bisect.bisect_left(self._bounds, value)] += 1
        series[-1] += value

    def count(self, labels: Labels = ()) -> float:
        series = self._series.get(labels)
        return sum(series[:-1]) if series is not None else 0.0

    def describe(self) -> Iterable[Metric]:
        return [HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> Iterable[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, series in list(self._series.items()):
            cumulative, buckets = 0.0, []
            for bound, count in zip([*self._bounds, math.inf], series[:-1], strict=True):
                cumulative += count
                buckets.append((_le(bound), cumulative))
            family.add_metric(list(labels), buckets, sum_value=series[-1])
        return [family]


def _le(bound: float) -> str:
    """The ``le`` label as ``prometheus_client`` writes it (``0.005``, ``1.0``, ``+Inf``)."""
    return "+Inf" if math.isinf(bound) else repr(float(bound))
