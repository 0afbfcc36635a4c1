"""Settings of routing by resident prefix: the models whose prompts deja can hash as vLLM
does, where each replica publishes its KV-cache events, and the scoring weights."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class KVModelSettings(BaseModel):
    """How one model's replicas tokenize and hash a prompt (they must agree with vLLM's flags:
    ``--block-size``, ``--prefix-caching-hash-algo`` and the replicas' ``PYTHONHASHSEED``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tokenizer: str = Field(description="Path of the model's local tokenizer.json.")
    chat_template: Literal["sim", "chatml"] = Field(
        "chatml", description="The model's chat template: 'chatml' (Qwen) or 'sim' (deja sim)."
    )
    block_size: int = Field(16, ge=1, description="The replicas' --block-size.")
    hash_algo: Literal["sha256", "sha256_cbor"] = Field(
        "sha256", description="The replicas' --prefix-caching-hash-algo."
    )
    hash_seed: str = Field(description="The replicas' PYTHONHASHSEED.")


class KVEventEndpoint(BaseModel):
    """Where one replica publishes its KV events (vLLM's --kv-events-config)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    endpoint: str = Field(description="The PUB socket, e.g. tcp://10.0.0.5:5557.")
    replay_endpoint: str | None = Field(None, description="The ROUTER replay socket.")
    topic: str = ""


class KVRoutingSettings(BaseModel):
    """Routing by what each replica really holds (off until ``kv_models`` names a model)."""

    kv_models: dict[str, KVModelSettings] = Field(
        default_factory=dict,
        description="Models routed by resident prefix, each with its tokenizer, template and "
        "vLLM hash settings (JSON in the environment). Other models keep prefix-hash routing.",
    )
    kv_events: dict[str, KVEventEndpoint] = Field(
        default_factory=dict,
        description="Replica URL -> its KV event endpoints (JSON in the environment).",
    )
    kv_events_endpoint: str = Field(
        "",
        description="The PUB endpoint of replicas not in kv_events, with {host} for the "
        "replica's host (e.g. tcp://{host}:5557). Empty: only those in kv_events.",
    )
    kv_events_replay_endpoint: str = Field(
        "", description="Their replay endpoint, with {host} (e.g. tcp://{host}:5558)."
    )
    kv_route_load_weight: float = Field(
        1.0,
        ge=0.0,
        description="Score = resident share of the prompt - this x load / bounded-load capacity "
        "- kv_route_kv_weight x KV-cache use.",
    )
    kv_route_kv_weight: float = Field(0.25, ge=0.0, description="Weight of KV-cache use.")
    kv_route_min_capacity: int = Field(
        2,
        ge=1,
        description="The bounded-load capacity a replica holding at least half of the "
        "prompt is never held below (requests in flight): at low load the (1+epsilon) x "
        "average bound is 1, and a "
        "second request would spill to a full prefill elsewhere.",
    )
    kv_index_max_blocks: int = Field(
        2_000_000, ge=1, description="Resident blocks kept per replica before its index resets."
    )
    kv_stale_tokens: int = Field(
        1024,
        ge=1,
        description="Uncached prompt tokens a replica may serve in one scrape interval without "
        "publishing before its index counts as stale.",
    )
    prefix_cache_isolation: bool = Field(
        True,
        description="Send each tenant's requests with its own vLLM cache_salt (tenants opt out "
        "with share_prefix_cache: true in the keys file).",
    )
