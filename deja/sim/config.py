"""Configuration of the simulated vLLM replica (``deja sim``).

The simulator stands in for ONE vLLM replica on a laptop CPU. It is meant for tests,
benchmarks and demos only; it never replaces vLLM in production.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SimConfig(BaseModel):
    """Settings of one simulated vLLM replica.

    Timing model: a request's time to first token is
    ``(base_ttft_ms + uncached_prompt_tokens * prefill_ms_per_token) / 1000 * speed`` seconds
    and every further token takes ``decode_ms_per_token / 1000 * speed`` seconds. ``speed``
    scales the modelled engine time only; the injected faults (``added_latency_ms``,
    ``stall_ms``) are applied verbatim so that a test can make a ``speed=0`` replica slow.
    """

    model_config = ConfigDict(extra="forbid")

    model: str = Field(default="deja-sim-1", min_length=1, description="Served model name.")
    replica_name: str = Field(
        default="sim",
        min_length=1,
        description="Replica name, sent back in the X-Sim-Replica response header.",
    )
    block_size: int = Field(default=16, ge=1, description="Tokens per KV-cache block.")
    kv_blocks: int = Field(default=4096, ge=1, description="KV-cache budget in blocks.")
    base_ttft_ms: float = Field(
        default=15.0, ge=0.0, description="Fixed part of the time to first token, in ms."
    )
    prefill_ms_per_token: float = Field(
        default=0.02, ge=0.0, description="Prefill time per UNCACHED prompt token, in ms."
    )
    decode_ms_per_token: float = Field(
        default=4.0, ge=0.0, description="Decode time per generated token after the first, in ms."
    )
    max_num_seqs: int = Field(
        default=16, ge=1, description="Requests running at once; the rest wait in a queue."
    )
    speed: float = Field(
        default=1.0,
        ge=0.0,
        description="Multiplies all simulated engine time; 0 means no simulated delay at all.",
    )
    max_model_len: int = Field(
        default=8192, ge=1, description="Context length: prompt plus completion tokens."
    )
    error_rate: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="Fraction of generation requests answered with an injected error.",
    )
    error_status: int = Field(
        default=500, ge=400, le=599, description="HTTP status of injected errors."
    )
    added_latency_ms: float = Field(
        default=0.0,
        ge=0.0,
        description="Injected latency before anything else of a generation request, in ms.",
    )
    stall_ms: float = Field(
        default=0.0,
        ge=0.0,
        description="Injected stall before the response headers (the first byte), in ms.",
    )
    seed: int = Field(default=0, description="Seed of the error-rate random number generator.")
