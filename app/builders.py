"""Build the gateway's resources from settings. Called only from the app lifespan."""

from __future__ import annotations

import logging

from qdrant_client import AsyncQdrantClient

from config.settings import Settings
from middleware.embedder import Embedder
from middleware.exact import ExactStore, MemoryExactStore
from middleware.exact_redis import RedisExactStore
from middleware.pipeline import SemanticSettings
from middleware.temporal import TemporalDetector
from middleware.thresholds import (
    FileThresholdStore,
    RedisThresholdStore,
    ThresholdStore,
)
from middleware.vector_edge import EdgeVectorStore
from middleware.vector_qdrant import QdrantServerVectorStore
from middleware.vectorstore import VectorStore, collection_name

log = logging.getLogger("deja")

#: ``DEJA_QDRANT_URL`` value that runs the server implementation on qdrant-client's in-process
#: local mode (same client API, no server): for tests and demos only.
QDRANT_LOCAL_MEMORY = ":memory:"


def build_exact_store(settings: Settings) -> ExactStore | None:
    if not settings.cache_enabled:
        return None
    if settings.redis_url:
        return RedisExactStore(
            settings.redis_url,
            timeout=settings.redis_timeout_seconds,
            retry_seconds=settings.redis_retry_seconds,
        )
    return MemoryExactStore(
        max_entries=settings.memory_cache_max_entries,
        max_bytes=settings.memory_cache_max_bytes,
    )


def build_embedder(settings: Settings) -> Embedder:
    if settings.embedder == "sentence-transformers":
        from middleware.embedder_st import load_st_embedder

        return load_st_embedder(settings.embedder_model)
    from middleware.embedder_onnx import load_onnx_embedder

    model_dir = settings.model_dir or settings.data_dir / "models"
    return load_onnx_embedder(
        model_dir, threads=settings.embedder_threads, batching=settings.embedder_batching
    )


def build_vector_store(settings: Settings, embedder: Embedder) -> VectorStore:
    collection = collection_name(embedder.model_id, embedder.dim)
    if settings.qdrant_url == QDRANT_LOCAL_MEMORY:
        return QdrantServerVectorStore(
            collection=collection, dim=embedder.dim, client=AsyncQdrantClient(location=":memory:")
        )
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


def build_temporal(settings: Settings) -> TemporalDetector | None:
    if not settings.temporal_bypass:
        return None
    return TemporalDetector(settings.temporal_extra_patterns)


def semantic_settings(settings: Settings) -> SemanticSettings:
    return SemanticSettings(
        timeout=settings.semantic_timeout_seconds, context_rule=settings.semantic_context
    )


def build_threshold_store(settings: Settings, exact: ExactStore | None) -> ThresholdStore:
    """Redis when the exact cache is on Redis (shared by every process), else the data dir."""
    if isinstance(exact, RedisExactStore):
        return RedisThresholdStore(exact.client)
    return FileThresholdStore(settings.data_dir / "thresholds.json")
