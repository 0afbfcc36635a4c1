"""Active health: probe each replica's ``/health`` and scrape its ``/metrics`` on an interval.

The scrape reads vLLM's load gauges; both the current and the deprecated KV-cache name are
accepted (``vllm:kv_cache_usage_perc``, ``vllm:gpu_cache_usage_perc``). Series of one metric
(one per model or engine) are summed. The prefix-cache counters (``vllm:prefix_cache_queries``
and ``vllm:prefix_cache_hits``, in tokens) are kept for the console's hit rate.

Each scrape also feeds the replica's in-flight limit (``Replica.learn_capacity``). vLLM does not
export ``--max-num-seqs``: its one info series, ``vllm:cache_config_info``, carries CacheConfig
labels (block_size, num_gpu_blocks, ...); its ``num_gpu_blocks`` is the size of the replica's
KV cache, which tells the KV router when the pool is under KV pressure. A ``max_num_seqs``
label on any ``vllm:*_config_info`` series is read where a server adds one; otherwise the
limit is learned from running/waiting.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time

import aiohttp

from deja.errors import UpstreamError
from deja.upstream.pool import Replica, ReplicaMetrics, ReplicaPool
from deja.upstream.upstream import map_aiohttp_errors

log = logging.getLogger("deja.health")

_GAUGES = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_cache_usage",
    "vllm:gpu_cache_usage_perc": "kv_cache_usage",
    "vllm:prefix_cache_queries_total": "prefix_cache_queries",
    "vllm:prefix_cache_hits_total": "prefix_cache_hits",
}
#: Time per output token, current and older vLLM names (histogram sum and count).
_TPOT = {
    "vllm:time_per_output_token_seconds_sum": "sum",
    "vllm:time_per_output_token_seconds_count": "count",
    "vllm:inter_token_latency_seconds_sum": "sum",
    "vllm:inter_token_latency_seconds_count": "count",
}
_MAX_NUM_SEQS = re.compile(r'[{,]\s*max_num_seqs\s*=\s*"(\d+)"')
_NUM_GPU_BLOCKS = re.compile(r'[{,]\s*num_gpu_blocks\s*=\s*"(\d+)"')


def parse_vllm_metrics(text: str, scraped_at: float) -> ReplicaMetrics:
    """The load gauges from a Prometheus text exposition."""
    sums = dict.fromkeys(set(_GAUGES.values()), 0.0)
    tpot = {"sum": 0.0, "count": 0.0}
    max_num_seqs: int | None = None
    num_gpu_blocks = 0
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name.endswith("_config_info"):
            if found := _MAX_NUM_SEQS.search(line):
                max_num_seqs = int(found.group(1)) or None
            if name == "vllm:cache_config_info" and (found := _NUM_GPU_BLOCKS.search(line)):
                num_gpu_blocks += int(found.group(1))  # one series per engine
            continue
        field = _GAUGES.get(name)
        part = _TPOT.get(name)
        if field is None and part is None:
            continue
        rest = line.rsplit("}", 1)[1] if "{" in line else line[len(name) :]
        try:
            value = float(rest.split()[0])
        except (IndexError, ValueError):
            continue
        if field is not None:
            sums[field] += value
        elif part is not None:
            tpot[part] += value
    per_token = tpot["sum"] / tpot["count"] if tpot["count"] else None
    return ReplicaMetrics(
        running=sums["running"],
        waiting=sums["waiting"],
        kv_cache_usage=sums["kv_cache_usage"],
        seconds_per_token=per_token,
        max_num_seqs=max_num_seqs,
        num_gpu_blocks=num_gpu_blocks or None,
        scraped_at=scraped_at,
        prefix_cache_queries=sums["prefix_cache_queries"],
        prefix_cache_hits=sums["prefix_cache_hits"],
    )


class HealthMonitor:
    """Runs the probes; marks replicas healthy/unhealthy and stores their load metrics."""

    def __init__(
        self, pool: ReplicaPool, session: aiohttp.ClientSession, *, interval: float, timeout: float
    ) -> None:
        self.pool = pool
        self._session = session
        self.interval = interval
        self._timeout = aiohttp.ClientTimeout(total=timeout)

    async def run_forever(self) -> None:
        """Probe every interval (the lifespan runs the first probe before serving)."""
        while True:
            await asyncio.sleep(self.interval)
            await self.check_once()

    async def check_once(self) -> None:
        await asyncio.gather(*(self._check(r) for r in list(self.pool.replicas)))
        self.pool.changed()  # health, load and limits may have moved: admission re-checks

    async def _check(self, replica: Replica) -> None:
        healthy = await self._probe(replica)
        if healthy != replica.healthy:
            log.warning("replica %s is %s", replica.name, "healthy" if healthy else "UNHEALTHY")
        replica.healthy = healthy
        if healthy:
            await self._scrape(replica)

    async def _probe(self, replica: Replica) -> bool:
        try:
            with map_aiohttp_errors(replica.name, "probing /health"):
                async with self._session.get(
                    replica.url + "/health", timeout=self._timeout
                ) as resp:
                    return resp.status == 200
        except UpstreamError:
            return False

    async def _scrape(self, replica: Replica) -> None:
        try:
            with map_aiohttp_errors(replica.name, "scraping /metrics"):
                async with self._session.get(
                    replica.url + "/metrics", timeout=self._timeout
                ) as resp:
                    if resp.status != 200:
                        return
                    text = await resp.text()
        except (UpstreamError, UnicodeDecodeError):
            return
        metrics = parse_vllm_metrics(text, time.monotonic())
        metrics.own_at_scrape = replica.in_flight
        replica.metrics = metrics
        replica.learn_capacity(metrics)
