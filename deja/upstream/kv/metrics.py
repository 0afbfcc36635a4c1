"""Prometheus series of the KV indexes, read at scrape time from :class:`KVRouting`:
``deja_kv_index_resident_blocks{replica}``, ``deja_kv_index_state{replica,state}`` (1 for the
current state), ``deja_kv_index_batches_total{replica}`` and
``deja_kv_index_drops_total{replica,reason}`` (an index dropped or marked stale, by the first
word of its reason: ``events`` lost, ``publisher`` restarted, ``replica`` restarted or
unhealthy, ``stale``, ``undecodable``, ``more``)."""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from deja.upstream.kv.route import KVRouting

__all__ = ["KVIndexCollector"]

_STATES = ("live", "partial", "stale", "off")


class KVIndexCollector(Collector):
    def __init__(self, kv: KVRouting) -> None:
        self.kv = kv

    def collect(self) -> Iterable[Metric]:
        blocks = GaugeMetricFamily(
            "deja_kv_index_resident_blocks", "Blocks resident per replica, from its KV events.",
            labels=["replica"],
        )  # fmt: skip
        state = GaugeMetricFamily(
            "deja_kv_index_state", "The KV index's state (1 for the current one).",
            labels=["replica", "state"],
        )  # fmt: skip
        batches = CounterMetricFamily(
            "deja_kv_index_batches", "KV event batches applied.", labels=["replica"]
        )
        drops = CounterMetricFamily(
            "deja_kv_index_drops", "KV indexes dropped or marked stale, by reason.",
            labels=["replica", "reason"],
        )  # fmt: skip
        for index in self.kv.index:
            name = urlsplit(index.replica).netloc or index.replica
            blocks.add_metric([name], len(index.blocks))
            batches.add_metric([name], index.batches)
            for s in _STATES:
                state.add_metric([name, s], 1.0 if index.state == s else 0.0)
        for (name, reason), count in self.kv.drops.items():
            drops.add_metric([name, reason], count)
        yield from (blocks, state, batches, drops)
