"""Reading Prometheus text (a vLLM replica's or deja's ``/metrics``): sums, histogram buckets,
deltas between two scrapes and quantiles, the way PromQL's ``histogram_quantile`` does them.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

from deja.errors import ReplicaError

__all__ = ["Scrape", "fetch_metrics", "histogram_quantile", "parse_metrics"]

Labels = tuple[tuple[str, str], ...]


@dataclass
class Scrape:
    """Every sample of one exposition: ``samples[name][labels] = value``."""

    samples: dict[str, dict[Labels, float]] = field(default_factory=dict)

    def _matching(self, name: str, labels: Mapping[str, str]) -> list[tuple[Labels, float]]:
        series = self.samples.get(name, {})
        want = set(labels.items())
        return [(k, v) for k, v in series.items() if want <= set(k)]

    def has(self, name: str) -> bool:
        return name in self.samples

    def value(self, name: str, **labels: str) -> float:
        """Sum of the samples called ``name`` whose labels include ``labels`` (0 if none)."""
        return sum(v for _, v in self._matching(name, labels))

    def label_totals(self, name: str, label: str) -> dict[str, float]:
        """``name`` summed per value of ``label``."""
        out: dict[str, float] = defaultdict(float)
        for key, value in self.samples.get(name, {}).items():
            found = dict(key).get(label)
            if found is not None:
                out[found] += value
        return dict(out)

    def buckets(self, histogram: str, **labels: str) -> list[tuple[float, float]]:
        """``(le, cumulative count)`` of ``histogram``, summed over matching label sets."""
        sums: dict[float, float] = defaultdict(float)
        for key, value in self._matching(histogram + "_bucket", labels):
            le = dict(key).get("le")
            if le is not None:
                sums[float(le)] += value
        return sorted(sums.items())

    def minus(self, earlier: Scrape) -> Scrape:
        """Counters and histograms since ``earlier`` (gauges come out as differences too:
        read gauges from a scrape, not from a delta)."""
        out = Scrape()
        for name, series in self.samples.items():
            before = earlier.samples.get(name, {})
            out.samples[name] = {k: v - before.get(k, 0.0) for k, v in series.items()}
        return out


def parse_metrics(text: str) -> Scrape:
    """Parse Prometheus text exposition; a malformed body raises :class:`ReplicaError`."""
    scrape = Scrape()
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                key: Labels = tuple(sorted(sample.labels.items()))
                scrape.samples.setdefault(sample.name, {})[key] = float(sample.value)
    except ValueError as exc:
        raise ReplicaError(f"malformed /metrics ({exc})") from None
    return scrape


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """PromQL's ``histogram_quantile`` over ``(le, cumulative count)``; None without data.

    Linear interpolation inside the bucket holding the rank; a rank in the ``+Inf`` bucket
    returns the highest finite bound (as Prometheus does).
    """
    if not buckets:
        return None
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    lower_le, lower_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if math.isinf(le):
                return lower_le
            if count == lower_count:
                return le
            return lower_le + (le - lower_le) * (rank - lower_count) / (count - lower_count)
        lower_le, lower_count = le, count
    return lower_le


async def fetch_metrics(client: httpx.AsyncClient, url: str) -> Scrape:
    """GET ``url``/metrics and parse it; every failure is one :class:`ReplicaError` line."""
    target = url.rstrip("/") + "/metrics"
    try:
        response = await client.get(target)
    except httpx.HTTPError as exc:
        raise ReplicaError(f"{target}: unreachable ({type(exc).__name__}: {exc})") from None
    if response.status_code != 200:
        raise ReplicaError(f"{target}: HTTP {response.status_code}")
    return parse_metrics(response.text)
