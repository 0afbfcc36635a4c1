"""Opening the gateway's parts, one function each: the upstream side, the stores, the semantic
layer. ``app.gateway.Gateway.build`` calls them in order and registers each one's close on its
exit stack, so whatever a function opens is closed by the gateway that asked for it."""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

import redis.asyncio as aioredis
from qdrant_client import AsyncQdrantClient

from config.settings import Settings
from deja.cache.exact.base import ExactStore
from deja.cache.exact.disk import FILE_NAME as DISK_FILE
from deja.cache.exact.disk import SqliteExactStore
from deja.cache.exact.memory import MemoryExactStore
from deja.cache.exact.redis import KEY_PREFIX as REDIS_KEY_PREFIX
from deja.cache.exact.redis import RedisExactStore, connect_redis
from deja.cache.exact.tiered import TieredExactStore
from deja.cache.exact.tracking import TrackedTier
from deja.cache.flightlock import FlightLock
from deja.embedding.base import Embedder
from deja.errors import VerifierError
from deja.observability.lookups import RecentLookups
from deja.observability.metrics import Metrics
from deja.observability.tracing import Tracing
from deja.replicas.admission import Admission
from deja.replicas.discovery import ModelDiscovery
from deja.replicas.health import HealthMonitor
from deja.replicas.pool import ReplicaPool
from deja.replicas.upstream import Upstream, build_session
from deja.routing.router import Router
from deja.semantic.cache import SemanticCache
from deja.semantic.crossencoder import MODEL_FILE, SHIPPED_DIR, check_sums, load_verifier
from deja.semantic.cutoffs import CALIBRATION_FILE, CalibrationTable, load_table
from deja.semantic.judge import Judge
from deja.semantic.shadow import ShadowChecks
from deja.semantic.verifier import Verifier
from deja.temporal.classifier import load_classifier
from deja.temporal.rules import TemporalDetector
from deja.tenancy.keyring import KeyRing
from deja.tenancy.keywatch import KeysFile
from deja.tenancy.thresholds import Thresholds
from deja.vectorstore.base import VectorStore, collection_name
from deja.vectorstore.edge import EdgeVectorStore
from deja.vectorstore.qdrant import QdrantServerVectorStore
from middleware.semantic import Checks, SemanticSettings, SemanticStep
from middleware.tasks import BackgroundTasks

log = logging.getLogger("deja")

#: θ when cosine similarity alone decides (verifier off): the smallest θ whose pairwise precision
#: on qqp_dev reached 0.90 (README, "Choosing θ").
COSINE_ONLY_THETA = 0.98
#: ``DEJA_QDRANT_URL`` value that runs the server implementation on qdrant-client's in-process
#: local mode (same client API, no server): for tests and demos only.
QDRANT_LOCAL_MEMORY = ":memory:"


@dataclass(frozen=True)
class Replicas:
    """The upstream side: one HTTP session, the pool, and what watches and uses it."""

    upstream: Upstream
    discovery: ModelDiscovery
    monitor: HealthMonitor

    @classmethod
    async def open(cls, stack: AsyncExitStack, settings: Settings, metrics: Metrics) -> Replicas:
        urls, simulated = await replica_urls(stack, settings)
        http = build_session(
            connect_timeout=settings.upstream_connect_timeout_seconds,
            read_timeout=settings.upstream_timeout_seconds,
            max_connections=settings.upstream_max_connections,
        )
        stack.push_async_callback(http.close)
        pool = ReplicaPool(
            urls,
            cooldown=settings.replica_cooldown_seconds,
            scrape_interval=settings.health_check_interval_seconds,
            simulated=simulated,
            max_inflight=settings.replica_max_inflight,
        )
        metrics.watch_pool(pool)
        api_key = settings.replica_api_key.get_secret_value() if settings.replica_api_key else None
        router = Router(pool, settings.routing_policy, settings.routing_epsilon)
        timeout = settings.health_check_timeout_seconds
        admission = Admission(
            router,
            queue_size=settings.admission_queue_size,
            max_wait=settings.admission_max_wait_seconds,
            metrics=metrics,
        )
        return cls(
            upstream=Upstream(
                router,
                http,
                api_key,
                metrics,
                admission=admission,
                request_timeout=settings.request_timeout_seconds,
            ),
            discovery=ModelDiscovery(pool, http, timeout=timeout, api_key=api_key),
            monitor=HealthMonitor(
                pool, http, interval=settings.health_check_interval_seconds, timeout=timeout
            ),
        )


def client_keys(settings: Settings) -> tuple[KeyRing, KeysFile | None]:
    """The keys file's tenants (open mode without one), warning about what is left open, and
    the file to follow for changes."""
    if settings.admin_key is None:
        log.warning("DEJA_ADMIN_KEY is not set: the admin API (/admin) is disabled")
    if settings.keys_file is None:
        log.warning(
            "NO CLIENT KEYS CONFIGURED (DEJA_KEYS_FILE): the gateway is open, every caller "
            "is tenant 'default'"
        )
        return KeyRing(), None
    keys_file = KeysFile(settings.keys_file)
    return keys_file.load(), keys_file


def temporal_detector(settings: Settings) -> TemporalDetector | None:
    if not settings.temporal_bypass:
        return None
    return TemporalDetector(settings.temporal_extra_patterns)


def uses_data_dir_exclusively(settings: Settings) -> bool:
    """True when this process would open files under ``data_dir`` that one process must own:
    Qdrant Edge (single-writer: the semantic cache's, the corpora's) or the exact store on disk
    (its in-process tier would not see another process's deletes)."""
    disk_exact = (
        settings.cache_enabled and not settings.redis_url and settings.exact_store == "disk"
    )
    if settings.qdrant_url:
        return disk_exact
    edge = (settings.cache_enabled and settings.semantic_enabled) or settings.corpora_enabled
    return disk_exact or edge


def embedded_parts(settings: Settings) -> list[str]:
    """The single-process parts this configuration would use: what ``--workers N`` cannot
    share. Each worker would hold its own copy (an in-process exact store: invalidation in one
    worker would not reach the others) or fight over one data dir (Qdrant Edge, the disk
    store)."""
    parts: list[str] = []
    if settings.cache_enabled and not settings.redis_url:
        parts.append("the embedded exact store (set DEJA_REDIS_URL)")
    if settings.cache_enabled and settings.semantic_enabled and not settings.qdrant_url:
        parts.append("Qdrant Edge (set DEJA_QDRANT_URL, or DEJA_SEMANTIC_ENABLED=false)")
    if settings.corpora_enabled and not settings.qdrant_url:
        parts.append("corpora on Qdrant Edge (set DEJA_QDRANT_URL, or DEJA_CORPORA_ENABLED=false)")
    if settings.demo and not settings.replicas:
        parts.append("the in-process simulated replicas (set DEJA_REPLICAS)")
    return parts


async def replica_urls(stack: AsyncExitStack, settings: Settings) -> tuple[list[str], bool]:
    """The configured replicas, or in demo mode simulated ones started in-process."""
    if settings.replicas or not settings.demo:
        if not settings.replicas:
            log.warning("no replicas configured (DEJA_REPLICAS); generation requests get 503")
        return list(settings.replicas), False
    from deja.sim.config import SimConfig
    from deja.sim.runner import start_simulators

    cluster = await start_simulators(settings.demo_replicas, SimConfig(), host="127.0.0.1")
    stack.push_async_callback(cluster.stop)
    log.warning(
        "no replicas configured: started %d SIMULATED vLLM replicas (deja sim) at %s "
        "-- answers are synthetic, not from a model",
        len(cluster.urls),
        ", ".join(cluster.urls),
    )
    return list(cluster.urls), True


async def flight_lock(stack: AsyncExitStack, settings: Settings) -> FlightLock | None:
    """Cross-process single-flight locks, on a small Redis pool of their own: a lock that
    fails only means "lead", and its connections never compete with the exact store's."""
    if not settings.redis_url or not settings.cache_enabled:
        return None
    client = connect_redis(
        settings.redis_url, timeout=settings.redis_timeout_seconds, max_connections=64
    )
    stack.push_async_callback(client.aclose)
    return FlightLock(client)


async def exact_store(
    stack: AsyncExitStack, settings: Settings, redis: aioredis.Redis | None
) -> ExactStore | None:
    """Redis when configured, else the embedded store ``exact_store`` names (opened, with its
    close registered on ``stack``)."""
    if not settings.cache_enabled:
        return None
    memory = MemoryExactStore(
        max_entries=settings.memory_cache_max_entries, max_bytes=settings.memory_cache_max_bytes
    )
    if redis is not None:
        tracking = None
        if settings.redis_client_cache:
            tracking = TrackedTier(redis, prefix=REDIS_KEY_PREFIX, tier=memory)
        remote = RedisExactStore(
            redis,
            timeout=settings.redis_timeout_seconds,
            retry_seconds=settings.redis_retry_seconds,
            tracking=tracking,
            auto_pipeline=settings.redis_auto_pipeline,
        )
        await remote.open()
        stack.push_async_callback(remote.close)
        return remote
    if settings.exact_store == "memory":
        stack.push_async_callback(memory.close)
        return memory
    disk = SqliteExactStore(
        settings.data_dir / DISK_FILE, sweep_seconds=settings.exact_sweep_seconds
    )
    tiered = TieredExactStore(memory, disk)
    await tiered.open()
    stack.push_async_callback(tiered.close)
    return tiered


def load_embedder(settings: Settings) -> Embedder:
    if settings.embedder == "sentence-transformers":
        from deja.embedding.st import load_st_embedder

        return load_st_embedder(settings.embedder_model)
    from deja.embedding.onnx.embedder import load_onnx_embedder

    model_dir = settings.model_dir or settings.data_dir / "models"
    return load_onnx_embedder(
        model_dir, threads=settings.embedder_threads, batching=settings.embedder_batching
    )


def vector_store(settings: Settings, embedder: Embedder) -> VectorStore:
    collection = collection_name(embedder.model_id, embedder.dim)
    if settings.qdrant_url == QDRANT_LOCAL_MEMORY:
        client = AsyncQdrantClient(location=":memory:")
        return QdrantServerVectorStore(collection=collection, dim=embedder.dim, client=client)
    if settings.qdrant_url:
        key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
        return QdrantServerVectorStore(
            collection=collection,
            dim=embedder.dim,
            url=settings.qdrant_url,
            api_key=key,
            timeout=settings.semantic_timeout_seconds,
        )
    return EdgeVectorStore(settings.data_dir, collection=collection, dim=embedder.dim)


def open_embedder(stack: AsyncExitStack, settings: Settings) -> Embedder | None:
    """The one embedder of the process, shared by the semantic cache and the corpora; None when
    neither is on."""
    semantic = settings.cache_enabled and settings.semantic_enabled
    if not (semantic or settings.corpora_enabled):
        return None
    embedder = load_embedder(settings)
    stack.push_async_callback(embedder.close)
    return embedder


async def semantic_cache(
    stack: AsyncExitStack,
    settings: Settings,
    metrics: Metrics,
    tracing: Tracing,
    embedder: Embedder | None,
) -> SemanticCache | None:
    if not (settings.cache_enabled and settings.semantic_enabled) or embedder is None:
        return None
    store = vector_store(settings, embedder)
    await store.open()
    stack.push_async_callback(store.close)
    log.info(
        "semantic cache: %s (dim %d) on %s, precision target %.2f",
        embedder.model_id,
        embedder.dim,
        store.name,
        settings.semantic_precision,
    )
    return SemanticCache(
        embedder, store, on_embedded=metrics.embedding_seconds.observe, tracing=tracing
    )


def verifier_table(settings: Settings) -> tuple[Path, CalibrationTable]:
    """The verifier's folder (files checked against their sha256) and the calibration table
    that belongs to it. Raises ``VerifierError`` in one sentence; cheap enough for preflight."""
    folder = settings.semantic_verifier_dir or SHIPPED_DIR
    sums = check_sums(folder)
    table = load_table(settings.semantic_calibration_file or folder / CALIBRATION_FILE)
    if table.model_sha256 and table.model_sha256 != sums[MODEL_FILE]:
        raise VerifierError(
            "the calibration table was measured for another verifier model "
            f"({table.model_sha256[:12]}…, this one is {sums[MODEL_FILE][:12]}…)"
        )
    return folder, table


def open_verifier(
    stack: AsyncExitStack, settings: Settings
) -> tuple[Verifier | None, CalibrationTable | None]:
    """The verifier and its table; with ``semantic_verifier_fallback=cosine`` a broken model
    gives (None, None) — cosine alone at θ — with a loud warning, else start-up stops."""
    if settings.semantic_verifier == "off":
        log.warning("semantic verifier off: cosine similarity alone decides semantic hits")
        return None, None
    try:
        folder, table = verifier_table(settings)
        verifier = load_verifier(
            folder, max_tokens=table.max_tokens, threads=settings.verifier_threads
        )
    except VerifierError as exc:
        if settings.semantic_verifier_fallback != "cosine":
            raise
        log.error(
            "SEMANTIC HITS ARE NOT VERIFIED: %s; serving on cosine alone at θ "
            "(DEJA_SEMANTIC_VERIFIER_FALLBACK=cosine)",
            exc.message,
        )
        return None, None
    stack.push_async_callback(verifier.close)
    log.info("semantic verifier %s, calibrated on %s", verifier.model_id, table.fitted_on)
    return verifier, table


def semantic_step(
    settings: Settings,
    parts: SemanticParts,
    thresholds: Thresholds,
    metrics: Metrics,
    background: BackgroundTasks,
    recent: RecentLookups | None = None,
) -> SemanticStep | None:
    if parts.cache is None or parts.exact is None:
        return None
    checks = parts.checks(settings, metrics, background)
    top_k = settings.semantic_top_k or (checks.table.k if checks.table is not None else 1)
    return SemanticStep(
        parts.cache,
        parts.exact,
        settings=SemanticSettings(
            timeout=settings.semantic_timeout_seconds,
            context_rule=settings.semantic_context,
            top_k=top_k,
            skip_verification_above=settings.semantic_skip_verification_above,
        ),
        thresholds=thresholds,
        metrics=metrics,
        spawn=background.spawn,
        checks=checks,
        recent=recent,
    )


@dataclass
class SemanticParts:
    """What the semantic step is built from."""

    cache: SemanticCache | None
    exact: ExactStore | None
    upstream: Upstream
    verifier: Verifier | None = None
    table: CalibrationTable | None = None

    @classmethod
    async def open(
        cls,
        stack: AsyncExitStack,
        settings: Settings,
        metrics: Metrics,
        tracing: Tracing,
        exact: ExactStore | None,
        replicas: Replicas,
        embedder: Embedder | None,
    ) -> SemanticParts:
        """The semantic cache (vector store on the shared embedder) and, with it, the verifier
        and table."""
        cache = await semantic_cache(stack, settings, metrics, tracing, embedder)
        parts = cls(cache, exact, replicas.upstream)
        if cache is not None:
            parts.verifier, parts.table = open_verifier(stack, settings)
        return parts

    def thresholds(self, settings: Settings, metrics: Metrics) -> Thresholds:
        """θ and the precision target, live values seeded from settings, exported as gauges."""
        thresholds = Thresholds(global_=self.theta(settings))
        thresholds.precision.global_ = settings.semantic_precision
        metrics.threshold.set_function(lambda: thresholds.global_)
        metrics.precision_target.set_function(lambda: thresholds.precision.global_)
        return thresholds

    def theta(self, settings: Settings) -> float:
        """θ: the configured override, else the table's candidate floor, else cosine-only's."""
        if settings.semantic_threshold is not None:
            return settings.semantic_threshold
        return self.table.cosine_floor if self.table is not None else COSINE_ONLY_THETA

    def checks(self, settings: Settings, metrics: Metrics, background: BackgroundTasks) -> Checks:
        assert self.cache is not None and self.exact is not None
        judge = None
        if settings.semantic_judge != "off" and self.table is not None:
            judge = Judge(
                self.upstream,
                metrics,
                mode=settings.semantic_judge,
                timeout=settings.semantic_judge_timeout_seconds,
            )
        shadow = None
        if settings.semantic_shadow_rate > 0:
            shadow = ShadowChecks(
                rate=settings.semantic_shadow_rate,
                upstream=self.upstream,
                embedder=self.cache.embedder,
                metrics=metrics,
                spawn=background.spawn,
                exact=self.exact,
                vectors=self.cache.store,
                invalidate=settings.semantic_shadow_invalidate,
            )
        classifier = None
        if settings.temporal_bypass:
            classifier = load_classifier(self.cache.embedder.model_id)
        return Checks(
            verifier=self.verifier,
            table=self.table,
            judge=judge,
            judge_floor=settings.semantic_judge_floor,
            shadow=shadow,
            classifier=classifier,
        )
