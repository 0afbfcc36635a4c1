"""Prometheus metrics, ``deja_``-prefixed, on one registry per app (no global registry).

The per-request series (request count and latency, lookup latency, tokens and model time
saved) are lock-free loop metrics (``loopmetrics``); other hot-path counters and histograms are
bound to their label values once (``_child``), so a request pays an increment, not a label
lookup. Replica state is read from the pool at scrape time by a collector
(``deja.observability.replicas``): nothing per request.
Label values are bounded: routes, cache outcomes, layers, replicas from config, HTTP statuses;
tenants only when ``metrics_tenant_label`` is on; never a prompt or a key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from deja.observability.loopmetrics import LoopCounter, LoopHistogram
from deja.observability.replicas import ReplicaCollector, ReplicaSample, ReplicaSamples

LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
)
TOKEN_BUCKETS = tuple(float(2**k) for k in range(4, 18))
"""16 ... 131,072 tokens: powers of two, as fine as `deja tune --from-gateway` needs."""
SIMILARITY_BUCKETS = (
    0.5,
    0.6,
    0.7,
    0.75,
    0.8,
    0.82,
    0.84,
    0.86,
    0.88,
    0.9,
    0.91,
    0.92,
    0.93,
    0.94,
    0.95,
    0.96,
    0.97,
    0.98,
    0.99,
    0.995,
    1.0,
)


class Metrics:
    """Every metric the gateway exports."""

    def __init__(self, *, tenant_label: bool = False) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.tenant_label = tenant_label
        for define in (
            self._define_requests,
            self._define_semantic,
            self._define_quality,
            self._define_tokens,
            self._define_cache,
            self._define_upstream,
            self._define_rag,
            self._define_flights,
        ):
            define(self.registry)
        self._replicas: ReplicaSamples | None = None
        self.registry.register(ReplicaCollector(self._replica_samples))
        self._children: dict[tuple[Any, ...], Any] = {}

    def _define_requests(self, r: CollectorRegistry) -> None:
        """Every generation request, once, and the cache lookup's latency."""
        # status and reason (the error code) count the requests refused before the pipeline too
        # (cache="rejected"): a 401 or a 429 is as visible as a hit.
        request_labels = [
            "route",
            "cache",
            "status",
            "reason",
            *(["tenant"] if self.tenant_label else []),
        ]
        # Updated on every request, on the event loop: lock-free (deja.observability.loopmetrics).
        self.requests = LoopCounter(
            "deja_requests",
            "Generation requests by route, cache outcome (rejected: refused before the cache), "
            "HTTP status and error code",
            request_labels,
            registry=r,
        )
        self.request_seconds = LoopHistogram(
            "deja_request_duration_seconds",
            "Whole-request latency (streams: until the last byte)",
            ["route", "cache"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.lookup_seconds = LoopHistogram(
            "deja_cache_lookup_duration_seconds",
            "Cache lookup latency by layer",
            ["layer"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )

    def _define_quality(self, r: CollectorRegistry) -> None:
        """What decides a semantic hit, and what checks it afterwards."""
        self.verifier_seconds = Histogram(
            "deja_verifier_duration_seconds",
            "Scoring one lookup's candidates with the verifier (one batched call)",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.verifier_score = Histogram(
            "deja_verifier_score",
            "Decision score of the best candidate of every verified lookup",
            buckets=SIMILARITY_BUCKETS,
            registry=r,
        )
        self.verifier_errors = Counter(
            "deja_verifier_errors", "Verifications that failed (served as misses)", registry=r
        )
        self.precision_target = Gauge(
            "deja_semantic_precision_target", "The global precision target", registry=r
        )
        self.judge_calls = Counter(
            "deja_judge_requests",
            "Model-as-judge calls to the replicas by mode and verdict",
            ["mode", "verdict"],
            registry=r,
        )
        self.judge_tokens = Counter(
            "deja_judge_tokens", "Prompt and completion tokens spent on judge calls", registry=r
        )
        self.promotions = Counter(
            "deja_promotions",
            "Judged paraphrases promoted to aliases of an entry, by outcome (promoted, "
            "exact_only: its vector failed, skipped: no entry to promote onto, failed)",
            ["outcome"],
            registry=r,
        )
        self.precision_corrections = Counter(
            "deja_precision_corrections",
            "Tenant targets raised because live precision fell under them",
            registry=r,
        )
        self.shadow_checks = Counter(
            "deja_shadow_checks",
            "Semantic hits re-asked in the background, by similarity band and verdict",
            ["band", "verdict", *(["tenant"] if self.tenant_label else [])],
            registry=r,
        )
        self.shadow_invalidations = Counter(
            "deja_shadow_invalidations",
            "Entries invalidated after a disagreeing shadow check",
            registry=r,
        )

    def _define_cache(self, r: CollectorRegistry) -> None:
        """The cache's contents, failures and admin actions."""
        self.entries = Gauge(
            "deja_cache_entries",
            "Entries per cache layer (refreshed periodically)",
            ["layer"],
            registry=r,
        )
        self.store_errors = Counter(
            "deja_store_errors", "Failed cache reads/writes by layer", ["layer"], registry=r
        )
        self.admin_actions = Counter(
            "deja_admin_actions", "Admin API actions", ["action"], registry=r
        )
        self.feedback = Counter(
            "deja_feedback",
            "Verdicts on served cache entries (source: app, admin)",
            ["verdict", "source"],
            registry=r,
        )

    def _define_semantic(self, r: CollectorRegistry) -> None:
        """The semantic lookup: embedding, similarity, θ, what skips or breaks it."""
        self.embedding_seconds = Histogram(
            "deja_embedding_duration_seconds",
            "Embedding one question",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.similarity = Histogram(
            "deja_semantic_similarity",
            "Top-1 similarity of every semantic lookup",
            buckets=SIMILARITY_BUCKETS,
            registry=r,
        )
        self.threshold = Gauge("deja_semantic_threshold", "The global θ", registry=r)
        self.bypasses = Counter("deja_bypass", "Cache bypasses by reason", ["reason"], registry=r)
        self.semantic_errors = Counter(
            "deja_semantic_errors", "Semantic lookups skipped, by kind", ["kind"], registry=r
        )
        self.semantic_orphans = Counter(
            "deja_semantic_orphans",
            "Semantic neighbours whose answer was gone from the exact store (their point deleted)",
            registry=r,
        )

    def _define_tokens(self, r: CollectorRegistry) -> None:
        """Tokens the replicas produced (``deja tune`` reads them) and what hits saved."""
        self.prompt_tokens = Histogram(
            "deja_prompt_tokens",
            "Prompt tokens of requests answered by a replica, per model (deja tune reads it)",
            ["model"],
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        self.completion_tokens = Histogram(
            "deja_completion_tokens",
            "Completion tokens of requests answered by a replica, per model",
            ["model"],
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        self.cached_tokens = LoopCounter(
            "deja_cached_completion_tokens", "Completion tokens served from cache", registry=r
        )
        self.saved_seconds = LoopCounter(
            "deja_saved_model_seconds",
            "Model decode time saved by cache hits (tokens × replicas' time per output token)",
            registry=r,
        )

    def _define_upstream(self, r: CollectorRegistry) -> None:
        """The replicas: calls, routing decisions, admission to an in-flight slot."""
        self.ttfb_seconds = Histogram(
            "deja_upstream_ttfb_seconds",
            "Time to the replica's response headers",
            ["replica"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.upstream = Counter(
            "deja_upstream_requests",
            "Requests sent to replicas by answer status",
            ["replica", "status"],
            registry=r,
        )
        self.routing = Counter(
            "deja_routing_decisions",
            "Replica choices by policy and reason",
            ["policy", "reason"],
            registry=r,
        )
        self.admission_queue = Gauge(
            "deja_admission_queue",
            "Requests waiting for a free replica slot (every replica at its in-flight limit)",
            registry=r,
        )
        self.admission_wait_seconds = Histogram(
            "deja_admission_wait_seconds",
            "Time admitted requests waited for a replica slot (only those that waited)",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.admission_rejections = Counter(
            "deja_admission_rejections",
            "Requests refused for want of a replica slot: queue_full (503), wait_expired (429)",
            ["reason"],
            registry=r,
        )

    def _define_flights(self, r: CollectorRegistry) -> None:
        self.coalesced = Counter(
            "deja_coalesced",
            "Requests answered by an identical request's upstream call (where: local, this "
            "process; remote, another through Redis; stored, one ended during the lookup)",
            ["where"],
            registry=r,
        )

    def _define_rag(self, r: CollectorRegistry) -> None:
        self.retrievals = Counter(
            "deja_retrievals",
            "RAG retrievals by outcome (ok, empty_answered, empty_refused, failed_answered, "
            "failed_refused)",
            ["outcome"],
            registry=r,
        )
        self.retrieval_seconds = Histogram(
            "deja_retrieval_seconds",
            "Time to retrieve a RAG request's chunks (embedding included when needed)",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.corpus_chunks = Counter(
            "deja_corpus_chunks_ingested",
            "Chunks embedded and stored, by corpus",
            ["corpus"],
            registry=r,
        )
        self.corpus_documents = Counter(
            "deja_corpus_documents",
            "Documents by corpus and action (added, updated, unchanged, failed, removed)",
            ["corpus", "action"],
            registry=r,
        )
        self.corpus_invalidated = Counter(
            "deja_corpus_invalidated",
            "Cached answers invalidated because a document they were built from changed",
            ["corpus"],
            registry=r,
        )

    def watch_replicas(self, samples: ReplicaSamples) -> None:
        """Export the replicas' health, breaker, in-flight and limit gauges, read at scrape."""
        self._replicas = samples

    def _replica_samples(self) -> Iterable[ReplicaSample]:
        return self._replicas() if self._replicas is not None else ()

    def watch_admission(self, waiting: Callable[[], int]) -> None:
        self.admission_queue.set_function(lambda: float(waiting()))

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    # --- recording helpers used on the request path -----------------------------------------
    def request(
        self,
        route: str,
        cache: str,
        tenant: str,
        seconds: float,
        status: str = "200",
        reason: str = "",
    ) -> None:
        labels = (route, cache, status, reason)
        self.requests.inc((*labels, tenant) if self.tenant_label else labels)
        self.request_seconds.observe((route, cache), seconds)

    def tokens(self, model: str, usage: dict[str, Any]) -> None:
        """The prompt and completion lengths of one replica answer (the tuning workload)."""
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if isinstance(prompt, int) and prompt > 0:
            self._child(self.prompt_tokens, model).observe(prompt)
        if isinstance(completion, int) and completion > 0:
            self._child(self.completion_tokens, model).observe(completion)

    def lookup(self, layer: str, seconds: float) -> None:
        self.lookup_seconds.observe((layer,), seconds)

    def upstream_answer(self, replica: str, status: str, ttfb: float | None) -> None:
        self._child(self.upstream, replica, status).inc()
        if ttfb is not None:
            self._child(self.ttfb_seconds, replica).observe(ttfb)

    def routed(self, policy: str, reason: str) -> None:
        self._child(self.routing, policy, reason).inc()

    def served_from_cache(self, completion_tokens: int, seconds_per_token: float | None) -> None:
        if completion_tokens > 0:
            self.cached_tokens.inc((), completion_tokens)
            if seconds_per_token:
                self.saved_seconds.inc((), completion_tokens * seconds_per_token)

    def count(self, metric: Any, *labels: str) -> None:
        self._child(metric, *labels).inc()
