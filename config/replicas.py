"""The upstream replicas' settings: the replica list and its ``;weight=`` / ``;max_inflight=``
syntax, timeouts, routing, health checks and admission. A section of ``config.settings.Settings``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, field_validator
from pydantic_settings import NoDecode

from config.values import Count, NonNegativeFloat, NonNegativeInt, PositiveFloat


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


class UpstreamSettings(BaseModel):
    """Where the replicas are and how deja talks to them."""

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
    upstream_connect_timeout_seconds: PositiveFloat = Field(
        2.0, description="TCP connect timeout towards a replica."
    )
    upstream_timeout_seconds: PositiveFloat = Field(
        120.0,
        description="Read timeout towards a replica: longest wait for the first byte or between "
        "two chunks. Past it the client gets 504.",
    )
    upstream_max_connections: Count = Field(512, description="Connection pool size (total).")
    request_timeout_seconds: PositiveFloat = Field(
        600.0,
        description="Overall deadline of one generation request, from its arrival to the last "
        "byte of its answer (streams included), on top of the read timeout. 600 s is the "
        "openai SDK's own default: past it, its client has given up anyway.",
    )
    body_read_timeout_seconds: PositiveFloat = Field(
        30.0,
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
    admission_queue_size: NonNegativeInt = Field(
        1024,
        description="Requests that may wait (FIFO) for a free replica slot; past it, 503 at once.",
    )
    admission_max_wait_seconds: float | None = Field(
        None,
        gt=0,
        description="Longest wait for a free replica slot before 429 (unset: the request's "
        "deadline, request_timeout_seconds).",
    )
    replica_cooldown_seconds: NonNegativeFloat = Field(
        5.0,
        description="How long an open circuit breaker keeps a failing replica out before one "
        "probe request (longer when the replica sent Retry-After).",
    )
    routing_policy: Literal["prefix", "least_loaded", "round_robin"] = Field(
        "prefix", description="How a replica is chosen for a request that is not a cache hit."
    )
    routing_epsilon: NonNegativeFloat = Field(
        0.25,
        description="Bounded-load factor ε: no replica takes more than ⌈(1+ε)·average⌉ "
        "in-flight requests under the prefix policy.",
    )
    prefix_mode: Literal["static", "blocks"] = Field(
        "static",
        description="Prefix key: model + system prompt + tools (static), or a chain of the "
        "first prefix_max_blocks token blocks of the prompt (blocks, for RAG prompts).",
    )
    prefix_block_size: Count = Field(16, description="Tokens per block in blocks mode.")
    prefix_max_blocks: Count = Field(32, description="Blocks hashed in blocks mode (K).")
    health_check_interval_seconds: PositiveFloat = Field(
        5.0, description="How often each replica's /health is probed and /metrics scraped."
    )
    health_check_timeout_seconds: PositiveFloat = Field(
        2.0, description="Timeout of one health probe or metrics scrape."
    )
    model_refresh_seconds: PositiveFloat = Field(
        30.0, description="How often the served-model list is re-read from the replicas."
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
