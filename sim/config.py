"""Configuration of the simulated vLLM replica (``deja sim``).

The simulator stands in for ONE vLLM replica on a laptop CPU. It is meant for tests,
benchmarks and demos only; it never replaces vLLM in production.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sim.gpus import GPU_PROFILES
from sim.kvevents import KVEventsConfig, parse_kv_events_config

KvCacheDtype = Literal["auto", "fp16", "bfloat16", "fp8"]


class SimConfig(BaseModel):
    """Settings of one simulated vLLM replica.

    Scheduler: vLLM's V1 loop (:mod:`sim.scheduler`): each step decodes one token per
    running sequence, then fills the rest of ``max_num_batched_tokens`` with (chunked)
    prefill, never running more than ``max_num_seqs`` sequences; KV blocks are allocated per
    sequence and the newest sequence is preempted (recomputed later) when they run out.

    Step time (:mod:`sim.cost`), in ms, times ``speed``::

        decode_ms_per_token                                (every step: the weights are read)
      + base_ttft_ms                                       (a step that runs any prefill)
      + prefill_ms_per_token * prefill tokens in the step
      + decode_ms_per_seq * decoding sequences in the step
      + kv_read_ms_per_token * context tokens of those sequences

    With the defaults (no per-sequence terms) a lone request's first token comes after
    ``base_ttft_ms + decode_ms_per_token + uncached_prompt_tokens * prefill_ms_per_token`` and
    every further token after ``decode_ms_per_token``. ``gpu`` names a profile of
    :data:`sim.gpus.GPU_PROFILES` that sets the five cost terms and ``kv_blocks`` from
    hardware figures (fields given explicitly keep their value). ``speed`` scales the modelled
    engine time only; injected faults (``added_latency_ms``, ``stall_ms``) are applied verbatim
    so that a test can make a ``speed=0`` replica slow.
    """

    model_config = ConfigDict(extra="forbid")

    model: str = Field(default="deja-sim-1", min_length=1, description="Served model name.")
    replica_name: str = Field(
        default="sim",
        min_length=1,
        description="Replica name, sent back in the X-Sim-Replica response header.",
    )
    gpu: str = Field(
        default="",
        description="GPU profile (" + ", ".join(GPU_PROFILES) + "): sets the step-cost terms "
        "and --kv-blocks unless given explicitly. Empty: the explicit values.",
    )
    block_size: int = Field(default=16, ge=1, description="Tokens per KV-cache block.")
    kv_blocks: int = Field(default=4096, ge=1, description="KV-cache budget in blocks.")
    kv_cache_dtype: KvCacheDtype = Field(
        default="auto",
        description="KV-cache dtype; with --gpu, fp8 doubles the KV budget and halves KV reads.",
    )
    base_ttft_ms: float = Field(
        default=15.0, ge=0.0, description="Fixed time of a step that runs any prefill, in ms."
    )
    prefill_ms_per_token: float = Field(
        default=0.02, ge=0.0, description="Step time per prefilled (uncached) token, in ms."
    )
    decode_ms_per_token: float = Field(
        default=4.0,
        ge=0.0,
        description="Fixed time of every step, in ms (a lone sequence's time per token).",
    )
    decode_ms_per_seq: float = Field(
        default=0.0, ge=0.0, description="Step time per decoding sequence, in ms."
    )
    kv_read_ms_per_token: float = Field(
        default=0.0,
        ge=0.0,
        description="Step time per context token of each decoding sequence (KV reads), in ms.",
    )
    max_num_seqs: int = Field(
        default=16, ge=1, description="Sequences running at once; the rest wait in a queue."
    )
    max_num_batched_tokens: int = Field(
        default=8192, ge=1, description="Tokens (decode + prefill) scheduled per step."
    )
    enable_prefix_caching: bool = Field(
        default=True, description="Reuse the KV blocks of a cached prompt prefix."
    )
    spec_tokens: int = Field(
        default=0,
        ge=0,
        le=16,
        description="Speculative decoding: draft tokens proposed per decode step (0: off).",
    )
    spec_acceptance: float = Field(
        default=0.8,
        ge=0.0,
        le=1.0,
        description="Probability that the drafter's next token is accepted (drafts are "
        "accepted up to the first rejection).",
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
    seed: int = Field(
        default=0, description="Seed of the error-rate and draft-acceptance random generators."
    )
    kv_events_config: str = Field(
        default="",
        description="vLLM's --kv-events-config JSON: publish KV-cache events over ZMQ, e.g. "
        '\'{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557", '
        '"replay_endpoint": "tcp://*:5558"}\'. Empty: off.',
    )
    prefix_caching_hash_algo: Literal["sha256", "sha256_cbor"] = Field(
        default="sha256", description="vLLM's block-hash function (its flag of the same name)."
    )
    hash_seed: str = Field(
        default="",
        description="The block-hash seed, as vLLM takes it from PYTHONHASHSEED. Empty: "
        "$PYTHONHASHSEED, else random (then no router can reproduce the hashes).",
    )
    tokenizer: str = Field(
        default="",
        description="A local tokenizer.json for prompt tokens (as the gateway tokenizes). "
        "Empty: the simulator's own word tokenizer.",
    )

    judge_labels: str = Field(
        default="",
        description='A JSON Lines file of {"question", "cluster"}: judge requests about '
        "labelled questions are answered by cluster (a SIMULATED judge for replay benchmarks, "
        "sim/labels.py) and a cluster's questions get one answer. Empty: the word-overlap judge.",
    )
    judge_accuracy: float = Field(
        default=1.0,
        ge=0.5,
        le=1.0,
        description="With judge_labels: the share of pairs the simulated judge gets right.",
    )

    @field_validator("kv_events_config")
    @classmethod
    def _check_kv_events(cls, value: str) -> str:
        parse_kv_events_config(value)  # raises on bad JSON or unknown keys
        return value

    @property
    def kv_events(self) -> KVEventsConfig | None:
        """The parsed ``kv_events_config``, None when events are off."""
        return parse_kv_events_config(self.kv_events_config)

    @model_validator(mode="before")
    @classmethod
    def _apply_gpu_profile(cls, data: Any) -> Any:
        """Fill the cost terms and the KV budget from ``gpu`` where not given explicitly."""
        if not isinstance(data, dict) or not data.get("gpu"):
            return data
        name = data["gpu"]
        profile = GPU_PROFILES.get(name)
        if profile is None:
            raise ValueError(f"unknown gpu profile {name!r}; known: {', '.join(GPU_PROFILES)}")
        fp8 = data.get("kv_cache_dtype") == "fp8"
        fields = profile.sim_fields(
            fp8=fp8,
            block_size=int(data.get("block_size", 16)),
            batched_tokens=int(data.get("max_num_batched_tokens", 8192)),
        )
        return {**fields, **data}
