"""Prometheus metrics of a simulated replica, under vLLM's metric names.

Each simulator app owns its own :class:`~prometheus_client.CollectorRegistry`, so several
simulators can live in one process.
"""

from __future__ import annotations

import bisect
from collections import Counter as Tally
from collections.abc import Iterable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from sim.config import SimConfig
from sim.loop import SimEngine
from sim.scheduler import StepOutcome

__all__ = ["METRICS_CONTENT_TYPE", "SimMetrics"]

METRICS_CONTENT_TYPE: str = CONTENT_TYPE_LATEST
"""Content type of :meth:`SimMetrics.render`'s output."""

# Buckets as in vLLM's metrics.
_TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
    0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0,
)  # fmt: skip
_TPOT_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
    0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
_E2E_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0,
    20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
)  # fmt: skip


class CountingHistogram(Collector):
    """A histogram that takes many equal observations at once (one engine step gives every
    decoding sequence the same gap): per step, one bucket search per distinct value instead of
    one ``Histogram.observe`` per token. Exposed like a ``prometheus_client`` histogram."""

    def __init__(self, name: str, doc: str, buckets: tuple[float, ...], model: str) -> None:
        self.name, self.doc, self.model = name, doc, model
        self.bounds = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.total = 0.0

    def observe(self, value: float, count: int = 1) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += count
        self.total += value * count

    def collect(self) -> Iterable[Metric]:
        family = HistogramMetricFamily(self.name, self.doc, labels=["model_name"])
        cumulative, buckets = 0, []
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            cumulative += count
            buckets.append((str(bound) if bound != float("inf") else "+Inf", cumulative))
        family.add_metric([self.model], buckets, self.total)
        return [family]


def _cache_config_info(registry: CollectorRegistry, config: SimConfig) -> None:
    """``vllm:cache_config_info``: vLLM's CacheConfig.metrics_info(), the labels a router
    reads (the KV cache's size, ``num_gpu_blocks``, among them), value 1."""
    labels = {
        "block_size": str(config.block_size),
        "enable_prefix_caching": str(config.enable_prefix_caching),
        "num_gpu_blocks": str(config.kv_blocks),
        "prefix_caching_hash_algo": config.prefix_caching_hash_algo,
    }
    Gauge(
        "vllm:cache_config_info",
        "Information of the LLMEngine CacheConfig (simulated).",
        list(labels),
        registry=registry,
    ).labels(**labels).set(1)


class SimMetrics:
    """vLLM-named metrics of one simulated replica, each labelled ``model_name``.

    Gauges (read live from the :class:`SimEngine`): ``vllm:num_requests_running``,
    ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``. Counters:
    ``vllm:prefix_cache_queries_total``, ``vllm:prefix_cache_hits_total`` (in tokens),
    ``vllm:num_preemptions_total``, ``vllm:generation_tokens_total``,
    ``vllm:prompt_tokens_total``, ``vllm:request_success_total`` (also labelled
    ``finished_reason``) and, with speculative decoding on, ``vllm:spec_decode_num_drafts_total``,
    ``vllm:spec_decode_num_draft_tokens_total``, ``vllm:spec_decode_num_accepted_tokens_total``.
    Info: ``vllm:cache_config_info`` (``block_size``, ``enable_prefix_caching``,
    ``num_gpu_blocks``, ``prefix_caching_hash_algo``). Histograms:
    ``vllm:time_to_first_token_seconds``, ``vllm:inter_token_latency_seconds`` (one
    observation per step that gave a running sequence tokens),
    ``vllm:time_per_output_token_seconds`` (a finished sequence's mean time per token after the
    first), ``vllm:e2e_request_latency_seconds``, and, observed as a sequence finishes as vLLM
    does, ``vllm:request_queue_time_seconds`` (arrival to first scheduled) and
    ``vllm:request_prefill_time_seconds`` (first scheduled to first token).
    """

    def __init__(self, engine: SimEngine) -> None:
        self.engine = engine
        self.registry = CollectorRegistry(auto_describe=True)
        model = engine.config.model
        labels = ["model_name"]
        reg = self.registry

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, labels, registry=reg)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, labels, registry=reg).labels(model_name=model)

        gauge("vllm:num_requests_running", "Requests running (simulated).").labels(
            model_name=model
        ).set_function(lambda: float(engine.running))
        gauge("vllm:num_requests_waiting", "Requests waiting (simulated).").labels(
            model_name=model
        ).set_function(lambda: float(engine.waiting))
        gauge("vllm:kv_cache_usage_perc", "KV-cache usage, 0..1 (simulated).").labels(
            model_name=model
        ).set_function(engine.kv_cache_usage_perc)

        _cache_config_info(reg, engine.config)
        self.prefix_cache_queries = counter(
            "vllm:prefix_cache_queries", "Prefix-cache queries, in tokens (simulated)."
        )
        self.prefix_cache_hits = counter(
            "vllm:prefix_cache_hits", "Prefix-cache hits, in tokens (simulated)."
        )
        self.num_preemptions = counter("vllm:num_preemptions", "Preemptions (simulated).")
        self.generation_tokens = counter("vllm:generation_tokens", "Generated tokens (simulated).")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Prefilled prompt tokens (simulated).")
        self._request_success = Counter(
            "vllm:request_success",
            "Finished requests (simulated).",
            ["model_name", "finished_reason"],
            registry=reg,
        )
        self._model = model
        self._define_latencies()
        self._preemptions_seen = 0
        self._queries_seen = 0
        self._hits_seen = 0
        self.spec: tuple[Counter, Counter, Counter] | None = None
        if engine.config.spec_tokens:
            self.spec = (
                counter("vllm:spec_decode_num_drafts", "Draft proposals (simulated)."),
                counter("vllm:spec_decode_num_draft_tokens", "Draft tokens (simulated)."),
                counter("vllm:spec_decode_num_accepted_tokens", "Accepted drafts (simulated)."),
            )
        engine.observer = self

    def _define_latencies(self) -> None:
        self.time_to_first_token = self._histogram(
            "vllm:time_to_first_token_seconds",
            "Time to first token, in seconds (simulated).",
            _TTFT_BUCKETS,
        )
        self.time_per_output_token = self._histogram(
            "vllm:time_per_output_token_seconds",
            "Mean time per output token after the first, per sequence, in seconds (simulated).",
            _TPOT_BUCKETS,
        )
        self.inter_token_latency = CountingHistogram(
            "vllm:inter_token_latency_seconds",
            "Time between two token emissions of a sequence, in seconds (simulated).",
            _TPOT_BUCKETS,
            self._model,
        )
        self.registry.register(self.inter_token_latency)
        self.e2e_request_latency = self._histogram(
            "vllm:e2e_request_latency_seconds",
            "End-to-end request latency, in seconds (simulated).",
            _E2E_BUCKETS,
        )
        self.request_queue_time = self._histogram(
            "vllm:request_queue_time_seconds",
            "Time spent in WAITING phase for request, in seconds (simulated).",
            _E2E_BUCKETS,
        )
        self.request_prefill_time = self._histogram(
            "vllm:request_prefill_time_seconds",
            "Time spent in PREFILL phase for request, in seconds (simulated).",
            _E2E_BUCKETS,
        )

    def _histogram(self, name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
        """A ``model_name``-labelled histogram in this registry, its label set to our model."""
        histogram = Histogram(name, doc, ["model_name"], buckets=buckets, registry=self.registry)
        return histogram.labels(model_name=self._model)

    def record_prompt(self, prompt_tokens: int, cached_tokens: int) -> None:
        """Count a prompt's tokens (the prefix-cache counters come from the block pool, which
        counts a prompt when it is first scheduled, as vLLM does)."""
        self.prompt_tokens.inc(prompt_tokens)

    def sync_preemptions(self) -> None:
        """Bring ``vllm:num_preemptions_total`` and the prefix-cache counters up to the
        engine's counts."""
        new = self.engine.num_preemptions - self._preemptions_seen
        if new > 0:
            self.num_preemptions.inc(new)
            self._preemptions_seen += new
        pool = self.engine.scheduler.pool
        queries, hits = pool.queries - self._queries_seen, pool.hits - self._hits_seen
        if queries > 0:
            self.prefix_cache_queries.inc(queries)
            self._queries_seen = pool.queries
        if hits > 0:
            self.prefix_cache_hits.inc(hits)
            self._hits_seen = pool.hits

    def observe_step(self, outcome: StepOutcome, now: float) -> None:
        """Tokens, first-token and inter-token times of one engine step (the engine calls it)."""
        tokens = 0
        ttft = self.time_to_first_token.observe
        gaps: Tally[float] = Tally()
        for seq, count in outcome.emitted:
            tokens += count
            if seq.output == count:
                ttft(now - seq.arrival)
            else:
                gaps[now - seq.prev_token_at] += 1
        for gap, count in gaps.items():
            self.inter_token_latency.observe(gap, count)
        if tokens:
            self.generation_tokens.inc(tokens)
        for seq in outcome.finished:
            # as vLLM: waiting until first scheduled, then scheduled until the first token
            # (a sequence cut short may have neither)
            if seq.scheduled_at >= 0:
                self.request_queue_time.observe(seq.scheduled_at - seq.arrival)
                if seq.first_token_at >= 0:
                    self.request_prefill_time.observe(seq.first_token_at - seq.scheduled_at)
            if seq.output > 1:
                mean = (seq.last_token_at - seq.first_token_at) / (seq.output - 1)
                self.time_per_output_token.observe(mean)
        if self.spec is not None and outcome.drafts:
            drafts, draft_tokens, accepted = self.spec
            drafts.inc(outcome.drafts)
            draft_tokens.inc(outcome.draft_tokens)
            accepted.inc(outcome.accepted_tokens)

    def record_success(self, finished_reason: str) -> None:
        """Count one finished sequence."""
        self._request_success.labels(model_name=self._model, finished_reason=finished_reason).inc()

    def render(self) -> bytes:
        """Prometheus text exposition of this replica's metrics."""
        return generate_latest(self.registry)
