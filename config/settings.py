"""Settings: one pydantic-settings model, ``DEJA_*`` environment variables mirroring YAML keys.

Precedence, highest first: explicit overrides (CLI flags) > environment (``DEJA_*``) > the YAML
file (``--config`` / ``DEJA_CONFIG``) > defaults.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit, urlunsplit

import yaml
from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

ENV_PREFIX = "DEJA_"
MASK = "********"


class ConfigError(ValueError):
    """The configuration cannot be used (bad YAML, unknown key, invalid value).

    Raised at start-up and by the CLI, never on a request; ``deja.errors`` re-exports it.
    """


@dataclass(frozen=True, slots=True)
class ReplicaSpec:
    """One entry of ``replicas``: ``http://host:port;weight=2;max_inflight=64``."""

    url: str
    weight: float = 1.0
    #: This replica's in-flight limit, overriding ``replica_max_inflight`` and what is learned.
    max_inflight: int | None = None


def parse_replica_spec(spec: str) -> ReplicaSpec:
    """``http://host:port`` with optional ``;weight=N`` and ``;max_inflight=N`` parameters."""
    url, _, params = spec.partition(";")
    weight, max_inflight = 1.0, None
    for param in filter(None, params.split(";")):
        name, _, value = param.partition("=")
        name = name.strip()
        if name == "weight":
            weight = float(value)
            if not weight > 0:
                raise ValueError(f"replica weight must be > 0 in {spec!r}")
        elif name == "max_inflight":
            max_inflight = int(value)
            if max_inflight < 1:
                raise ValueError(f"replica max_inflight must be >= 1 in {spec!r}")
        else:
            raise ValueError(f"unknown replica parameter {name!r} in {spec!r}")
    return ReplicaSpec(url.rstrip("/"), weight, max_inflight)


def parse_replica(spec: str) -> tuple[str, float]:
    """``http://host:port`` or ``http://host:port;weight=2`` → (url, weight)."""
    parsed = parse_replica_spec(spec)
    return parsed.url, parsed.weight


class Settings(BaseSettings):
    """Effective configuration of one gateway process."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

    # --- server -------------------------------------------------------------------------------
    host: str = Field("127.0.0.1", description="Address the gateway listens on.")
    port: int = Field(8080, ge=0, le=65535, description="Port the gateway listens on.")
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="Log level of the gateway's own logger."
    )
    workers: int = Field(
        1,
        ge=1,
        le=64,
        description="Worker processes sharing the listening socket. Above 1, every store must "
        "be shared (Redis, a Qdrant server): embedded stores are refused at start-up.",
    )
    max_body_bytes: int = Field(
        4 * 1024 * 1024, ge=1024, description="Largest request body accepted; larger gets 413."
    )

    # --- upstream replicas --------------------------------------------------------------------
    replicas: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="vLLM replica base URLs (comma-separated in the environment, a list in "
        "YAML); append ;weight=N for a replica with N times the capacity, ;max_inflight=N for its "
        "own in-flight limit.",
    )
    demo: bool = Field(
        False,
        description="Start two simulated vLLM replicas in-process when no replicas are configured.",
    )
    demo_replicas: int = Field(
        2, ge=1, le=8, description="How many simulated replicas --demo starts."
    )
    upstream_connect_timeout_seconds: float = Field(
        2.0, gt=0, description="TCP connect timeout towards a replica."
    )
    upstream_timeout_seconds: float = Field(
        120.0,
        gt=0,
        description="Read timeout towards a replica: longest wait for the first byte or between "
        "two chunks. Past it the client gets 504.",
    )
    upstream_max_connections: int = Field(512, ge=1, description="Connection pool size (total).")
    request_timeout_seconds: float = Field(
        600.0,
        gt=0,
        description="Overall deadline of one generation request, from its arrival to the last "
        "byte of its answer (streams included), on top of the read timeout. 600 s is the "
        "openai SDK's own default: past it, its client has given up anyway.",
    )
    body_read_timeout_seconds: float = Field(
        30.0,
        gt=0,
        description="Time a client has to send its whole request body; a slower sender gets "
        "408 and its connection is closed.",
    )
    replica_max_inflight: int | None = Field(
        None,
        ge=1,
        description="In-flight limit per replica. Unset: learned from each replica's /metrics "
        "(the most requests it runs while others wait: its max-num-seqs), 256 (vLLM's default "
        "max-num-seqs) until then. ;max_inflight=N on a replica URL overrides it.",
    )
    admission_queue_size: int = Field(
        1024,
        ge=0,
        description="Requests that may wait (FIFO) for a free replica slot; past it, 503 at once.",
    )
    admission_max_wait_seconds: float | None = Field(
        None,
        gt=0,
        description="Longest wait for a free replica slot before 429 (unset: the request's "
        "deadline, request_timeout_seconds).",
    )
    replica_cooldown_seconds: float = Field(
        5.0,
        ge=0,
        description="How long an open circuit breaker keeps a failing replica out before one "
        "probe request (longer when the replica sent Retry-After).",
    )
    routing_policy: Literal["prefix", "least_loaded", "round_robin"] = Field(
        "prefix", description="How a replica is chosen for a request that is not a cache hit."
    )
    routing_epsilon: float = Field(
        0.25,
        ge=0,
        description="Bounded-load factor ε: no replica takes more than ⌈(1+ε)·average⌉ "
        "in-flight requests under the prefix policy.",
    )
    prefix_mode: Literal["static", "blocks"] = Field(
        "static",
        description="Prefix key: model + system prompt + tools (static), or a chain of the "
        "first prefix_max_blocks token blocks of the prompt (blocks, for RAG prompts).",
    )
    prefix_block_size: int = Field(16, ge=1, description="Tokens per block in blocks mode.")
    prefix_max_blocks: int = Field(32, ge=1, description="Blocks hashed in blocks mode (K).")
    health_check_interval_seconds: float = Field(
        5.0, gt=0, description="How often each replica's /health is probed and /metrics scraped."
    )
    health_check_timeout_seconds: float = Field(
        2.0, gt=0, description="Timeout of one health probe or metrics scrape."
    )
    model_refresh_seconds: float = Field(
        30.0, gt=0, description="How often the served-model list is re-read from the replicas."
    )

    # --- exact cache --------------------------------------------------------------------------
    cache_enabled: bool = Field(True, description="Master switch for the response cache.")
    redis_url: str | None = Field(
        None,
        description="Redis URL for the exact cache (and the shared θ store); unset = the "
        "embedded store chosen by exact_store.",
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
    exact_store: Literal["disk", "memory"] = Field(
        "disk",
        description="The exact cache without Redis: disk = SQLite under data_dir with a bounded "
        "in-process tier in front (survives restarts); memory = the in-process tier alone.",
    )
    exact_sweep_seconds: float = Field(
        60.0, gt=0, description="How often expired entries are deleted from the disk store."
    )
    redis_timeout_seconds: float = Field(
        0.25, gt=0, description="Per-operation Redis timeout; past it the cache is skipped."
    )
    redis_retry_seconds: float = Field(
        1.0, ge=0, description="After a Redis failure, skip Redis this long before trying again."
    )
    single_flight: bool = Field(
        True,
        description="Identical concurrent misses make one upstream call (followers get "
        "X-Deja-Cache: coalesced); across processes through a short Redis lock.",
    )
    cache_ttl_seconds: int = Field(86_400, ge=1, description="Default TTL of a cached answer.")
    cache_max_ttl_seconds: int = Field(
        7 * 86_400, ge=1, description="Upper bound for a per-request X-Deja-TTL."
    )
    memory_cache_max_entries: int = Field(
        10_000, ge=1, description="Entry bound of the in-process exact tier (or store)."
    )
    memory_cache_max_bytes: int = Field(
        256 * 1024 * 1024,
        ge=1024,
        description="Byte bound of the in-process exact tier (or store).",
    )

    request_memo_entries: int = Field(
        4096,
        ge=0,
        description="Byte-identical requests remembered with their validated form and exact "
        "key (never their answer), so a repeat skips parsing and hashing; 0 = off.",
    )

    # --- semantic cache ------------------------------------------------------------------------
    semantic_enabled: bool = Field(
        True, description="Answer paraphrases from cache (needs cache_enabled)."
    )
    semantic_precision: float = Field(
        0.92,
        ge=0.5,
        le=1.0,
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
    semantic_judge_floor: float = Field(
        0.80,
        ge=0.5,
        le=1.0,
        description="Lower edge of the judge's grey zone, as a precision target: candidates "
        "scoring between its cut-off and the request's are judged.",
    )
    semantic_judge_timeout_seconds: float = Field(
        2.0, gt=0, description="Budget of one judge call (sync mode: added to the lookup)."
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
    semantic_timeout_seconds: float = Field(
        0.25,
        gt=0,
        description="Budget for embedding + vector search + verification; past it, a plain miss.",
    )
    semantic_context: Literal["conversation", "system"] = Field(
        "conversation",
        description="What scopes a semantic hit besides tenant/model/params: the whole "
        "conversation before the last user message, or only the system prompt.",
    )
    semantic_sweep_seconds: float = Field(
        60.0, gt=0, description="How often expired vectors are deleted."
    )
    qdrant_url: str | None = Field(
        None, description="Qdrant server URL; unset = embedded Qdrant Edge under data_dir."
    )
    qdrant_api_key: SecretStr | None = Field(None, description="API key for the Qdrant server.")
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
    model_dir: Path | None = Field(
        None,
        description="Where derived embedding-model files are cached (default: data_dir/models).",
    )

    # --- corpora (issue 11) -----------------------------------------------------------------------
    corpora_enabled: bool = Field(
        True,
        description="Keep document corpora for RAG (`deja corpus …`, /admin/corpora): chunks in "
        "their own collection of the semantic store (Qdrant Edge under data_dir, or the Qdrant "
        "server); loads the embedder even with the semantic cache off.",
    )
    corpus_chunk_tokens: int = Field(
        200,
        ge=32,
        le=512,
        description="Token budget of one chunk, its heading path included (MiniLM reads 256).",
    )
    corpus_chunk_overlap: int = Field(
        32, ge=0, description="Tokens a chunk repeats from the end of the one before it."
    )
    corpus_max_file_bytes: int = Field(
        20 * 1024 * 1024, ge=1024, description="Largest file ingested; larger ones are refused."
    )
    corpus_embed_batch: int = Field(
        32, ge=1, le=1024, description="Chunks embedded per call during ingestion."
    )
    rag_retrieval_timeout_seconds: float = Field(
        1.0, gt=0, description="Budget of one retrieval from a corpus; past it, RetrievalError."
    )
    corpus_refresh_seconds: float = Field(
        30.0,
        gt=0,
        description="How often the corpus list is re-read from a shared Qdrant server (other "
        "gateways' ingests).",
    )
    corpus_preload: Annotated[dict[str, list[str]], NoDecode] = Field(
        default_factory=dict,
        description="Corpora ingested at start-up for corpus_preload_tenant: "
        "'name=path,path;name2=path' in the environment, a mapping of name to paths in YAML. "
        "Idempotent: unchanged files are skipped, so a restart is fast.",
    )
    corpus_preload_tenant: str = Field(
        "default", min_length=1, description="The tenant that owns the preloaded corpora."
    )

    # --- temporal bypass -----------------------------------------------------------------------
    temporal_bypass: bool = Field(
        True, description="Skip both caches for time-dependent questions (today, latest, hoy…)."
    )
    temporal_extra_patterns: list[str] = Field(
        default_factory=list,
        description="Extra volatile regexes (JSON list in the environment, a list in YAML).",
    )

    # --- RAG: asking with retrieval (issue 11) ---------------------------------------------------
    rag_top_k: int = Field(4, ge=1, le=64, description="Chunks retrieved per RAG request.")
    rag_system_prompt: str = Field(
        "Answer the question using only the context below. If the context does not contain "
        "the answer, say that you do not know. Cite the documents you used by their ids.",
        description="The static system prompt every RAG request starts with (before the "
        "context block), so the replicas' prefix cache sees one prefix per document set.",
    )
    rag_context_order: Literal["document", "score"] = Field(
        "document",
        description="Order of the chunks in the context block: document id and chunk index "
        "(one prompt prefix per document set, which the replicas' prefix cache reuses) or "
        "score (what most RAG apps do; for comparison).",
    )
    rag_default_corpus: str | None = Field(
        None,
        description="Corpus of requests that name none (after X-Deja-Corpus, the tenant's "
        "`corpus` and rag_model_corpus).",
    )
    rag_model_corpus: dict[str, str] = Field(
        default_factory=dict,
        description='Per-model default corpus, e.g. {"my-model": "handbook"} (JSON in '
        "the environment).",
    )
    rag_invalidate_near: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="Also invalidate cached questions whose cosine to a chunk of a new or "
        "changed document is at least this (answers the new text may contradict, whatever "
        "they were built from); unset: provenance only. Preview with a dry-run ingest.",
    )
    rag_on_failure: Literal["answer", "error"] = Field(
        "error",
        description="When retrieval fails: answer without context (marked X-Deja-Retrieval: "
        "failed, never cached) or refuse with a 503. A tenant's keys-file entry overrides it.",
    )

    # --- observability -------------------------------------------------------------------------
    access_log: bool = Field(
        True,
        description="One JSON line per request on the deja.access logger (ids, tenant, "
        "outcome, similarity, replica, latency; never prompts or keys).",
    )
    models_require_key: bool = Field(
        False,
        description="GET /v1/models needs a client key (a keys file must be set) like the "
        "generation routes; off: anyone who reaches the port may list the models.",
    )
    metrics_tenant_label: bool = Field(
        False,
        description="Add a tenant label to deja_requests_total (bounded by your tenant count).",
    )
    console_sample_seconds: float = Field(
        10.0,
        gt=0,
        description="How often the console's traffic history (/admin/timeline) takes a point; "
        "the last 360 points are kept.",
    )
    langfuse_host: str | None = Field(
        None,
        description="Langfuse base URL (https://cloud.langfuse.com, or your own): every request "
        "becomes a trace there, sent over OTLP/HTTP to {host}/api/public/otel/v1/traces in "
        "batches, off the request path. Needs langfuse_public_key and langfuse_secret_key.",
    )
    langfuse_public_key: str | None = Field(
        None, description="The Langfuse project's public key (pk-lf-...)."
    )

    # --- secrets (masked in --print-config) ---------------------------------------------------
    keys_file: Path | None = Field(
        None,
        description="YAML file of tenants and their key hashes (`deja keys add`); unset = open "
        "gateway, one `default` tenant.",
    )
    keys_reload_seconds: float = Field(
        2.0,
        ge=0,
        description="How often the keys file is checked for changes (a revoked key stops "
        "working within this); 0: only on SIGHUP.",
    )
    admin_key: SecretStr | None = Field(
        None,
        description="Bearer key for /admin. Unset: /admin is open (logged loudly at start-up).",
    )
    metrics_key: SecretStr | None = Field(
        None,
        description="Bearer key GET /metrics requires (the admin key works too); unset: open, "
        "as Prometheus scrapers expect on a private network.",
    )
    replica_api_key: SecretStr | None = Field(
        None, description="Bearer key sent to the replicas (vLLM --api-key), if they need one."
    )
    langfuse_secret_key: SecretStr | None = Field(
        None, description="The Langfuse project's secret key (sk-lf-...)."
    )

    @field_validator("replicas", mode="before")
    @classmethod
    def _split_replicas(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("replicas")
    @classmethod
    def _check_replicas(cls, value: list[str]) -> list[str]:
        cleaned = []
        for spec in value:
            url, _, params = spec.partition(";")
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError(f"replica URL must be http(s)://host:port, got {spec!r}")
            parse_replica_spec(spec)  # raises ValueError on a bad ;weight= or ;max_inflight=
            cleaned.append(url.rstrip("/") + (f";{params}" if params else ""))
        return cleaned

    @field_validator("corpus_preload", mode="before")
    @classmethod
    def _split_preload(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        corpora: dict[str, list[str]] = {}
        for spec in filter(None, (part.strip() for part in value.split(";"))):
            name, sep, paths = spec.partition("=")
            if not sep or not name.strip():
                raise ValueError(f"corpus_preload entry {spec!r} is not name=path[,path…]")
            corpora[name.strip()] = [p.strip() for p in paths.split(",") if p.strip()]
        return corpora

    @model_validator(mode="after")
    def _check_overlap(self) -> Settings:
        if self.corpus_chunk_overlap * 2 > self.corpus_chunk_tokens:
            raise ValueError("corpus_chunk_overlap must be at most half of corpus_chunk_tokens")
        return self

    @model_validator(mode="after")
    def _check_langfuse(self) -> Settings:
        given = [self.langfuse_host, self.langfuse_public_key, self.langfuse_secret_key]
        if any(v is not None for v in given) and not all(v is not None for v in given):
            raise ValueError(
                "Langfuse needs all three of langfuse_host, langfuse_public_key and "
                "langfuse_secret_key"
            )
        if self.langfuse_host is not None:
            parts = urlsplit(self.langfuse_host)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError(
                    f"langfuse_host must be http(s)://host, got {self.langfuse_host!r}"
                )
        return self

    @field_validator("admin_key", "replica_api_key", "qdrant_api_key", "langfuse_secret_key")
    @classmethod
    def _no_empty_secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().strip():
            raise ValueError("a key, when set, must not be empty")
        return value

    @field_validator("temporal_extra_patterns")
    @classmethod
    def _check_patterns(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"temporal pattern {pattern!r} is not a regex: {exc}") from exc
        return value

    def masked(self) -> dict[str, Any]:
        """The effective config as plain data, with secrets and URL passwords masked."""
        data = self.model_dump(mode="json")
        for name, field in type(self).model_fields.items():
            if field.annotation is not None and "SecretStr" in str(field.annotation):
                data[name] = MASK if data[name] is not None else None
        if self.redis_url:
            data["redis_url"] = mask_url(self.redis_url)
        return data


def mask_url(url: str) -> str:
    """Replace the password of ``scheme://user:password@host`` with a mask."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username or ''}:{MASK}@{parts.hostname}"
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from exc
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"config file {path} must hold a mapping of settings")
    return loaded


def load_settings(config_file: Path | str | None = None, **overrides: Any) -> Settings:
    """Build the effective settings: overrides > ``DEJA_*`` env > YAML file > defaults."""
    path = config_file or os.environ.get(f"{ENV_PREFIX}CONFIG")
    from_file = _read_yaml(Path(path)) if path else {}
    unknown = sorted(set(from_file) - set(Settings.model_fields))
    if unknown:
        raise ConfigError(f"unknown setting(s) in {path}: {', '.join(unknown)}")
    env_names = {name.upper() for name in os.environ}
    init = {
        key: value
        for key, value in from_file.items()
        if f"{ENV_PREFIX}{key}".upper() not in env_names
    }
    init.update({key: value for key, value in overrides.items() if value is not None})
    try:
        return Settings(**init)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
