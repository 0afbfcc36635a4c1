"""The cache's settings: the exact store (Redis or the embedded one), the semantic layer
(θ, the verifier, the judge, shadow checks, the vector store, the embedder) and the temporal
bypass. A section of ``config.settings.Settings``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal, Self

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator

from config.values import (
    Bytes,
    Count,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PrecisionTarget,
)


class CacheSettings(BaseModel):
    """What the two cache layers store, where, and when they may answer."""

    # --- exact cache --------------------------------------------------------------------------
    cache_enabled: bool = Field(True, description="Master switch for the response cache.")
    redis_url: str | None = Field(
        None,
        description="Redis URL for the exact cache (and the shared θ store, rate limits, "
        "single-flight locks); redis+cluster:// or rediss+cluster:// = a Redis Cluster reached "
        "through that node; unset = the embedded store chosen by exact_store (disk by default).",
    )
    redis_cluster: bool = Field(
        False,
        description="Treat a plain redis:// or rediss:// URL as a Redis Cluster (a managed "
        "cluster-mode endpoint); the +cluster schemes select it without this.",
    )
    redis_client_cache: bool = Field(
        True,
        description="Keep answers read from Redis in a bounded in-process tier (the memory_cache "
        "bounds) that Redis keeps coherent across processes (CLIENT TRACKING invalidations).",
    )
    redis_auto_pipeline: bool = Field(
        True,
        description="Send the exact-cache reads that reach Redis in one event-loop turn as one "
        "MGET (auto-pipelining).",
    )
    exact_store: Literal["disk", "memory", "redis"] | None = Field(
        None,
        description="The exact cache: disk = SQLite under data_dir with a bounded in-process "
        "tier in front (survives restarts); memory = the in-process tier alone; redis = "
        "redis_url (one node or a cluster). Unset: redis when redis_url is set, else disk. "
        "A contradiction with "
        "redis_url is refused at start-up.",
    )
    exact_sweep_seconds: PositiveFloat = Field(
        60.0, description="How often expired entries are deleted from the disk store."
    )
    redis_timeout_seconds: PositiveFloat = Field(
        0.25, description="Per-operation Redis timeout; past it the cache is skipped."
    )
    redis_retry_seconds: NonNegativeFloat = Field(
        1.0, description="After a Redis failure, skip Redis this long before trying again."
    )
    single_flight: bool = Field(
        True,
        description="Identical concurrent misses make one upstream call (followers get "
        "X-Deja-Cache: coalesced); across processes through a short Redis lock.",
    )
    cache_ttl_seconds: Count = Field(86_400, description="Default TTL of a cached answer.")
    cache_max_ttl_seconds: Count = Field(
        7 * 86_400, description="Upper bound for a per-request X-Deja-TTL."
    )
    memory_cache_max_entries: Count = Field(
        10_000, description="Entry bound of the in-process exact tier (or store)."
    )
    memory_cache_max_bytes: Bytes = Field(
        256 * 1024 * 1024,
        description="Byte bound of the in-process exact tier (or store).",
    )

    request_memo_entries: NonNegativeInt = Field(
        4096,
        description="Byte-identical requests remembered with their validated form and exact "
        "key (never their answer), so a repeat skips parsing and hashing; 0 = off.",
    )

    # --- semantic cache ------------------------------------------------------------------------
    semantic_enabled: bool = Field(
        True, description="Answer paraphrases from cache (needs cache_enabled)."
    )
    semantic_precision: PrecisionTarget = Field(
        0.92,
        description="Precision target of semantic hits (about 0.80-0.97): deja turns it into the "
        "verifier's cut-off from the calibration table. Per tenant/model via the admin API.",
    )
    semantic_threshold: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="Raw θ override: least cosine similarity of a semantic candidate. Unset: the "
        "calibration table's floor with the verifier on, 0.98 with it off.",
    )
    semantic_verifier: Literal["onnx", "off"] = Field(
        "onnx",
        description="Verify semantic candidates with the shipped cross-encoder (off: cosine "
        "similarity alone decides, at θ).",
    )
    semantic_verifier_fallback: Literal["refuse", "cosine"] = Field(
        "refuse",
        description="When the verifier's files are corrupt or mismatched: refuse to start, or "
        "serve semantic hits on cosine alone at θ (loud warning).",
    )
    semantic_verifier_dir: Path | None = Field(
        None,
        description="Folder of a verifier model (verifier-int8.onnx, tokenizer.json, "
        "SHA256SUMS, calibration.json); default: the one shipped with deja.",
    )
    semantic_calibration_file: Path | None = Field(
        None,
        description="A calibration table written by `deja calibrate` (default: the verifier's).",
    )
    semantic_top_k: int | None = Field(
        None, ge=1, le=32, description="Candidates verified per lookup (default: the table's)."
    )
    verifier_threads: int = Field(1, ge=1, le=64, description="Verifier intra-op threads.")
    semantic_max_pending: int = Field(
        4,
        ge=1,
        le=1024,
        description="Semantic lookups embedding and verifying at once; the others wait their "
        "turn (up to semantic_queue_seconds) before their semantic_timeout_seconds starts.",
    )
    semantic_queue_seconds: float = Field(
        1.0,
        ge=0.0,
        le=60.0,
        description="How long a semantic lookup may wait for one of semantic_max_pending; past "
        'it, a plain miss with no work started (deja_semantic_errors_total{kind="shed"}).',
    )
    semantic_skip_verification_above: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="Serve a candidate at or above this cosine unverified (off: negations "
        "score 0.989 with their question).",
    )
    semantic_judge: Literal["off", "sync", "async"] = Field(
        "off",
        description="Ask the replicas themselves about grey-zone candidates (GPU deployments): "
        "sync waits for the verdict, async serves a miss and remembers the verdict.",
    )
    semantic_judge_floor: PrecisionTarget = Field(
        0.80,
        description="Lower edge of the judge's grey zone, as a precision target: candidates "
        "scoring between its cut-off and the request's are judged.",
    )
    semantic_promote: bool = Field(
        True,
        description="Add a grey-zone question the judge calls the same to the entry it "
        "matched, as an alias (its exact key and vector serve the entry's answer); a tenant's "
        "promote in the keys file overrides it.",
    )
    semantic_learning: bool = Field(
        True,
        description="Learn from live verdicts: each entry's cut-off from its evidence, and "
        "a tenant's precision target raised while its live precision is under it.",
    )
    semantic_judge_timeout_seconds: PositiveFloat = Field(
        2.0, description="Budget of one judge call (sync mode: added to the lookup)."
    )
    semantic_shadow_rate: float = Field(
        0.02,
        ge=0.0,
        le=1.0,
        description="Share of semantic hits re-asked to the model in the background to "
        "estimate live precision.",
    )
    semantic_shadow_invalidate: bool = Field(
        False, description="Invalidate an entry whose shadow check disagrees."
    )
    semantic_timeout_seconds: PositiveFloat = Field(
        0.25,
        description="Budget for embedding + vector search + verification; past it, a plain miss.",
    )
    semantic_context: Literal["conversation", "system"] = Field(
        "conversation",
        description="What scopes a semantic hit besides tenant/model/params: the whole "
        "conversation before the last user message, or only the system prompt.",
    )
    semantic_sweep_seconds: PositiveFloat = Field(
        60.0, description="How often expired vectors are deleted."
    )
    labels_refresh_seconds: PositiveFloat = Field(
        5.0,
        description="How often the labelled-pairs file is re-read for labels other processes "
        "on the data dir wrote, so they become this process's per-entry evidence too.",
    )
    qdrant_url: str | None = Field(
        None, description="Qdrant server URL; unset = embedded Qdrant Edge under data_dir."
    )
    qdrant_api_key: SecretStr | None = Field(None, description="API key for the Qdrant server.")
    qdrant_shard_number: int | None = Field(
        None,
        ge=1,
        description="Shards of a collection the gateway creates on a distributed Qdrant "
        "(applied at creation only; unset = the server's default).",
    )
    qdrant_replication_factor: int | None = Field(
        None,
        ge=1,
        description="Copies of each shard of a collection the gateway creates (applied at "
        "creation only; unset = the server's default).",
    )
    qdrant_write_consistency_factor: int | None = Field(
        None,
        ge=1,
        description="Replicas that must confirm a write before it succeeds (at most the "
        "replication factor; applied at creation only).",
    )
    embedder: Literal["onnx", "sentence-transformers"] = Field(
        "onnx", description="Embedding backend; sentence-transformers needs `pip install deja[st]`."
    )
    embedder_model: str | None = Field(
        None,
        description="Local path or name of a sentence-transformers model (embedder="
        "sentence-transformers only; never downloaded at run time).",
    )
    embedder_threads: int = Field(1, ge=1, le=64, description="ONNX Runtime intra-op threads.")
    embedder_batching: bool = Field(
        False,
        description="Micro-batch concurrent embeddings (measured: no gain with this model, so "
        "off; see docs/architecture.md).",
    )
    data_dir: Path = Field(
        Path(".deja"),
        description="Where the embedded stores (exact answers, vectors) and, by default, "
        "derived model files live.",
    )
    disk_reserve_mb: Count = Field(
        64,
        description="Free space kept on data_dir's disk: below it the gateway stops storing and "
        "indexing (answers are still served, /readyz and deja_disk_low say so) and resumes "
        "once 25% more is free again. Qdrant Edge writes through mmap: a full disk would end "
        "the process with SIGBUS.",
    )
    model_dir: Path | None = Field(
        None,
        description="Where derived embedding-model files are cached (default: data_dir/models).",
    )

    # --- temporal bypass -----------------------------------------------------------------------
    temporal_bypass: bool = Field(
        True, description="Skip both caches for time-dependent questions (today, latest, hoy…)."
    )
    temporal_extra_patterns: list[str] = Field(
        default_factory=list,
        description="Extra volatile regexes (JSON list in the environment, a list in YAML).",
    )

    @field_validator("temporal_extra_patterns")
    @classmethod
    def _check_patterns(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"temporal pattern {pattern!r} is not a regex: {exc}") from exc
        return value

    @model_validator(mode="after")
    def _check_write_consistency(self) -> Self:
        wanted, copies = self.qdrant_write_consistency_factor, self.qdrant_replication_factor
        if wanted is not None and copies is not None and wanted > copies:
            raise ValueError(
                f"qdrant_write_consistency_factor ({wanted}) cannot exceed "
                f"qdrant_replication_factor ({copies})"
            )
        return self
