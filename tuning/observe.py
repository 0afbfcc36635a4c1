"""What ``deja doctor`` reads: each replica's ``/metrics`` (and deja's own) at the start and the
end of a window, with the gauges sampled in between, reduced to the figures its rules use.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import httpx

from deja.errors import ReplicaError
from tuning.promtext import Scrape, fetch_metrics, histogram_quantile

__all__ = ["GatewayWindow", "Observation", "ReplicaWindow", "observe", "replicas_of_gateway"]

TTFT = "vllm:time_to_first_token_seconds"
PREFILL = "vllm:request_prefill_time_seconds"
QUEUE = "vllm:request_queue_time_seconds"


def _ratio(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


@dataclass
class ReplicaWindow:
    """One replica over the window (None: the replica does not export that metric)."""

    url: str
    error: str | None = None
    requests: float = 0.0
    ttft_p50: float | None = None
    ttft_p99: float | None = None
    #: vLLM's own split of a request's first-token time (observed as requests finish): first
    #: scheduled to first token, and waiting before that. None: not exported, or no request
    #: finished in the window.
    prefill_p50: float | None = None
    queue_p50: float | None = None
    prefix_hit_rate: float | None = None
    spec_acceptance: float | None = None
    spec_draft_tokens: float = 0.0
    preemptions: float = 0.0
    kv_samples: list[float] = field(default_factory=list)
    waiting_samples: list[float] = field(default_factory=list)

    @property
    def kv_max(self) -> float | None:
        return max(self.kv_samples) if self.kv_samples else None

    @property
    def kv_mean(self) -> float | None:
        return sum(self.kv_samples) / len(self.kv_samples) if self.kv_samples else None

    @property
    def waiting_mean(self) -> float:
        samples = self.waiting_samples
        return sum(samples) / len(samples) if samples else 0.0

    @property
    def waiting_share(self) -> float:
        """Share of the samples with a request waiting (a queue that lasts, not a blip)."""
        samples = self.waiting_samples
        return sum(1 for v in samples if v >= 1) / len(samples) if samples else 0.0

    @property
    def waiting_max(self) -> float:
        return max(self.waiting_samples, default=0.0)

    def add_gauges(self, scrape: Scrape) -> None:
        self.waiting_samples.append(scrape.value("vllm:num_requests_waiting"))
        for name in ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"):
            if scrape.has(name):
                self.kv_samples.append(scrape.value(name))
                break

    def add_delta(self, delta: Scrape) -> None:
        buckets = delta.buckets(TTFT)
        self.requests = buckets[-1][1] if buckets else 0.0
        self.ttft_p50 = histogram_quantile(0.5, buckets)
        self.ttft_p99 = histogram_quantile(0.99, buckets)
        self.prefill_p50 = histogram_quantile(0.5, delta.buckets(PREFILL))
        self.queue_p50 = histogram_quantile(0.5, delta.buckets(QUEUE))
        queries = delta.value("vllm:prefix_cache_queries_total")
        self.prefix_hit_rate = _ratio(delta.value("vllm:prefix_cache_hits_total"), queries)
        self.spec_draft_tokens = delta.value("vllm:spec_decode_num_draft_tokens_total")
        accepted = delta.value("vllm:spec_decode_num_accepted_tokens_total")
        self.spec_acceptance = _ratio(accepted, self.spec_draft_tokens)
        self.preemptions = delta.value("vllm:num_preemptions_total")


@dataclass
class GatewayWindow:
    """deja's own view of the window: how requests were routed."""

    url: str
    error: str | None = None
    routed: float = 0.0
    no_prefix: float = 0.0
    spill: float = 0.0

    def add_delta(self, delta: Scrape) -> None:
        reasons = delta.label_totals("deja_routing_decisions_total", "reason")
        self.routed = sum(reasons.values())
        self.no_prefix = reasons.get("no_prefix", 0.0)
        self.spill = reasons.get("spill", 0.0)


@dataclass
class Observation:
    """Everything one doctor run read."""

    window_seconds: float
    replicas: list[ReplicaWindow]
    gateway: GatewayWindow | None = None


def replicas_of_gateway(scrape: Scrape) -> list[str]:
    """The replicas a gateway reports (``deja_replica_healthy{replica="host:port"}``), as URLs."""
    names = scrape.label_totals("deja_replica_healthy", "replica")
    return [name if "://" in name else f"http://{name}" for name in sorted(names)]


async def _scrape_all(client: httpx.AsyncClient, urls: list[str]) -> list[Scrape | ReplicaError]:
    async def one(url: str) -> Scrape | ReplicaError:
        try:
            return await fetch_metrics(client, url)
        except ReplicaError as exc:
            return exc

    return list(await asyncio.gather(*(one(u) for u in urls)))


async def observe(
    replicas: list[str],
    gateway: str | None,
    *,
    window: float,
    interval: float,
    client: httpx.AsyncClient,
) -> Observation:
    """Scrape every target, sample the gauges every ``interval`` for ``window`` seconds,
    scrape again; an unreachable replica is reported with its error, the others go on."""
    urls = [*replicas, *([gateway] if gateway else [])]
    started = time.monotonic()
    first = await _scrape_all(client, urls)
    windows = [ReplicaWindow(url) for url in replicas]
    for rw, scrape in zip(windows, first, strict=False):
        if isinstance(scrape, ReplicaError):
            rw.error = scrape.message
        else:
            rw.add_gauges(scrape)
    live = [i for i, rw in enumerate(windows) if rw.error is None]
    while time.monotonic() - started + interval < window:
        await asyncio.sleep(interval)
        for i, scrape in zip(
            live, await _scrape_all(client, [replicas[i] for i in live]), strict=True
        ):
            if not isinstance(scrape, ReplicaError):
                windows[i].add_gauges(scrape)
    await asyncio.sleep(max(window - (time.monotonic() - started), 0.0))
    last = await _scrape_all(client, urls)
    for rw, before, after in zip(windows, first, last, strict=False):
        if rw.error is not None:
            continue
        if isinstance(after, ReplicaError) or isinstance(before, ReplicaError):
            rw.error = after.message if isinstance(after, ReplicaError) else "unreachable"
            continue
        rw.add_gauges(after)
        rw.add_delta(after.minus(before))
    observation = Observation(round(time.monotonic() - started, 3), windows)
    if gateway is not None:
        observation.gateway = _gateway_window(gateway, first[-1], last[-1])
    return observation


def _gateway_window(
    url: str, before: Scrape | ReplicaError, after: Scrape | ReplicaError
) -> GatewayWindow:
    gw = GatewayWindow(url)
    if isinstance(before, ReplicaError):
        gw.error = before.message
    elif isinstance(after, ReplicaError):
        gw.error = after.message
    else:
        gw.add_delta(after.minus(before))
    return gw
