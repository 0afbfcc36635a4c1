"""KV-cache budget arithmetic from first principles (``deja kv-budget``).

Every token a sequence holds keeps one key and one value vector per layer per KV head::

    bytes/token = 2 (K and V) x layers x kv_heads x head_dim x dtype_bytes

Llama-3.1-8B in 16-bit: 2 x 32 x 8 x 128 x 2 = 131,072 B (128 KiB) per token. With grouped-query
attention only the KV heads count (8 here, not the 32 query heads); an fp8 KV cache halves it.

vLLM's KV budget on one GPU is what is left of ``memory x gpu_memory_utilization`` after the
weights and the memory its profiling run measures (activations of a
``max_num_batched_tokens`` step, CUDA graphs, non-torch allocations), split into blocks of
``block_size`` tokens. The real number of full-length sequences that fit at once is the blocks
divided by the blocks one ``max_model_len`` sequence needs. See ``docs/tuning.md``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deja.errors import ModelConfigError

__all__ = [
    "DTYPE_BYTES",
    "GIB",
    "RESERVE_GIB",
    "KvBudget",
    "ModelShape",
    "kv_budget",
    "load_model_config",
    "shape_from_config",
]

GIB = 2**30
RESERVE_GIB = 1.5
"""CUDA graphs and non-torch allocations when no overhead is given (an estimate; vLLM logs
the measured figure at start-up)."""
DTYPE_BYTES: dict[str, int] = {
    "float32": 4, "fp32": 4, "float": 4,
    "float16": 2, "fp16": 2, "half": 2, "bfloat16": 2, "bf16": 2,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "int8": 1,
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class ModelShape:
    """What the arithmetic needs to know of a model."""

    name: str
    layers: int
    kv_heads: int
    head_dim: int
    dtype: str = "bfloat16"
    attention_heads: int | None = None
    params: float | None = None
    hidden: int | None = None
    intermediate: int | None = None
    #: Why ``params`` is None: "quantized", or the config fields the estimate lacks.
    params_missing: str = ""

    def kv_bytes_per_token(self, kv_dtype: str = "auto") -> int:
        """``2 x layers x kv_heads x head_dim x bytes``; ``auto`` uses the weights' dtype."""
        dtype = self.dtype if kv_dtype == "auto" else kv_dtype
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes(dtype)

    def activation_bytes(self, batched_tokens: int) -> int:
        """Estimated peak activations of one step (the MLP's intermediate tensors and a few
        hidden-size ones per token, 16-bit); 0 when the config does not give the sizes."""
        if self.hidden is None or self.intermediate is None:
            return 0
        return (2 * self.intermediate + 4 * self.hidden) * 2 * batched_tokens


def dtype_bytes(dtype: str) -> int:
    try:
        return DTYPE_BYTES[dtype.lower()]
    except KeyError:
        known = ", ".join(sorted(DTYPE_BYTES))
        raise ModelConfigError(f"unknown dtype {dtype!r} (known: {known})") from None


def _int_field(cfg: Mapping[str, Any], *names: str, required: bool = True) -> int | None:
    for name in names:
        value = cfg.get(name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ModelConfigError(f"'{name}' must be a positive integer, got {value!r}")
        return value
    if required:
        raise ModelConfigError(f"missing '{names[0]}'")
    return None


#: Fields (with their aliases) the KV arithmetic cannot do without, and those the weights'
#: estimate needs too.
REQUIRED_FIELDS = (
    ("num_hidden_layers", "n_layer", "num_layers"),
    ("num_attention_heads", "n_head"),
)
PARAM_FIELDS = (
    ("hidden_size", "n_embd"),
    ("num_attention_heads", "n_head"),
    ("vocab_size",),
    ("intermediate_size", "moe_intermediate_size"),
)


def _require(cfg: Mapping[str, Any], fields: tuple[tuple[str, ...], ...], why: str) -> None:
    """One error naming every absent field (with its aliases), not the first."""
    absent = [names for names in fields if all(cfg.get(n) is None for n in names)]
    if absent:
        listed = ", ".join(
            f"'{names[0]}'" + (f" (or {', '.join(names[1:])})" if len(names) > 1 else "")
            for names in absent
        )
        raise ModelConfigError(f"config.json lacks {listed}" + (f" {why}" if why else ""))


def _estimate_params(cfg: Mapping[str, Any], layers: int, kv_heads: int, head_dim: int) -> float:
    """Parameters of a decoder-only transformer with gated MLPs (Llama, Mistral, Qwen):
    embeddings (twice unless tied) + per layer Q, K, V, O projections, the MLP (times the
    experts of a mixture-of-experts model) and two norms. Llama-3.1-8B: 8,030,261,248."""
    _require(cfg, PARAM_FIELDS, "")
    hidden = _int_field(cfg, "hidden_size", "n_embd")
    heads = _int_field(cfg, "num_attention_heads", "n_head")
    vocab = _int_field(cfg, "vocab_size")
    inter = _int_field(cfg, "intermediate_size", "moe_intermediate_size")
    assert hidden and heads and vocab and inter
    experts = _int_field(cfg, "num_local_experts", "num_experts", required=False) or 1
    embeddings = vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2)
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    mlp = 3 * hidden * inter * experts
    return float(embeddings + layers * (attention + mlp + 2 * hidden) + hidden)


def shape_from_config(cfg: Mapping[str, Any], name: str = "model") -> ModelShape:
    """A :class:`ModelShape` from a Hugging Face ``config.json`` (nested ``text_config`` of a
    multimodal model included). Raises :class:`ModelConfigError` naming the missing field."""
    if isinstance(cfg.get("text_config"), Mapping):
        cfg = {**cfg, **cfg["text_config"]}
    if "kv_lora_rank" in cfg:
        raise ModelConfigError("multi-head latent attention (kv_lora_rank) is not covered")
    _require(cfg, REQUIRED_FIELDS, "")
    layers = _int_field(cfg, "num_hidden_layers", "n_layer", "num_layers")
    heads = _int_field(cfg, "num_attention_heads", "n_head")
    assert layers and heads
    kv_heads = _int_field(cfg, "num_key_value_heads", required=False) or heads
    hidden = _int_field(cfg, "hidden_size", "n_embd", required=False)
    head_dim = _int_field(cfg, "head_dim", required=False)
    if head_dim is None:
        if hidden is None:
            raise ModelConfigError("missing 'head_dim' (and 'hidden_size' to derive it)")
        head_dim = hidden // heads
    dtype = cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"
    if not isinstance(dtype, str):
        raise ModelConfigError(f"'torch_dtype' must be a string, got {dtype!r}")
    dtype_bytes(dtype)
    params: float | None = None
    missing = "quantized (quantization_config)" if "quantization_config" in cfg else ""
    if not missing:
        try:
            params = _estimate_params(cfg, layers, kv_heads, head_dim)
        except ModelConfigError as exc:
            missing = exc.message
    intermediate = _int_field(cfg, "intermediate_size", required=False)
    return ModelShape(
        name, layers, kv_heads, head_dim, dtype, heads, params, hidden, intermediate, missing
    )


def load_model_config(path: Path) -> ModelShape:
    """Read a ``config.json``; every problem is one :class:`ModelConfigError` naming the file."""
    try:
        raw = json.loads(path.read_text())
    except OSError as exc:
        raise ModelConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelConfigError(f"{path}: not JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise ModelConfigError(f"{path}: expected a JSON object, got {type(raw).__name__}")
    name = raw.get("_name_or_path") or path.parent.name or path.name
    try:
        return shape_from_config(raw, str(name))
    except ModelConfigError as exc:
        raise ModelConfigError(f"{path}: {exc.message}") from None


@dataclass(frozen=True, slots=True)
class KvBudget:
    """The result of :func:`kv_budget`, every figure in bytes or tokens."""

    shape: ModelShape
    kv_dtype: str
    bytes_per_token: int
    gpu_bytes: float
    gpu_memory_utilization: float
    weights_bytes: float
    overhead_bytes: float
    kv_bytes: float
    block_size: int
    kv_blocks: int
    max_model_len: int

    @property
    def usable_bytes(self) -> float:
        return self.gpu_bytes * self.gpu_memory_utilization

    @property
    def kv_tokens(self) -> int:
        return self.kv_blocks * self.block_size

    @property
    def blocks_per_sequence(self) -> int:
        return math.ceil(self.max_model_len / self.block_size)

    @property
    def max_full_length_sequences(self) -> int:
        """Sequences of ``max_model_len`` tokens that fit at once (whole blocks)."""
        return self.kv_blocks // self.blocks_per_sequence

    @property
    def max_concurrency(self) -> float:
        """vLLM's start-up figure: KV tokens / ``max_model_len``."""
        return self.kv_tokens / self.max_model_len

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.shape.name,
            "layers": self.shape.layers,
            "kv_heads": self.shape.kv_heads,
            "head_dim": self.shape.head_dim,
            "kv_dtype": self.kv_dtype,
            "bytes_per_token": self.bytes_per_token,
            "gpu_bytes": self.gpu_bytes,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "weights_bytes": self.weights_bytes,
            "overhead_bytes": self.overhead_bytes,
            "kv_bytes": self.kv_bytes,
            "kv_tokens": self.kv_tokens,
            "block_size": self.block_size,
            "kv_blocks": self.kv_blocks,
            "max_model_len": self.max_model_len,
            "max_full_length_sequences": self.max_full_length_sequences,
            "max_concurrency": round(self.max_concurrency, 2),
        }


def kv_budget(
    shape: ModelShape,
    *,
    gpu_memory_gib: float,
    max_model_len: int,
    gpu_memory_utilization: float = 0.9,
    weights_gib: float | None = None,
    kv_dtype: str = "auto",
    block_size: int = 16,
    overhead_gib: float | None = None,
    max_num_batched_tokens: int = 8192,
) -> KvBudget:
    """The KV budget of ``shape`` on one GPU. Without ``weights_gib`` the weights are the
    estimated parameters times the weights' dtype; without ``overhead_gib`` the overhead is
    :data:`RESERVE_GIB` plus the activations of a ``max_num_batched_tokens`` step."""
    if not 0 < gpu_memory_utilization <= 1:
        raise ModelConfigError("--gpu-memory-utilization must be in (0, 1]")
    if min(gpu_memory_gib, max_model_len, block_size) <= 0:
        raise ModelConfigError("GPU memory, max-model-len and block size must be positive")
    if weights_gib is not None:
        weights = weights_gib * GIB
    elif shape.params is not None:
        weights = shape.params * dtype_bytes(shape.dtype)
    else:
        raise ModelConfigError(
            f"{shape.name}: cannot estimate the weights' size "
            f"({shape.params_missing or 'unknown'}); pass --weights-gib"
        )
    if overhead_gib is not None:
        overhead = overhead_gib * GIB
    else:
        overhead = RESERVE_GIB * GIB + shape.activation_bytes(max_num_batched_tokens)
    per_token = shape.kv_bytes_per_token(kv_dtype)
    gpu = gpu_memory_gib * GIB
    kv_bytes = max(gpu * gpu_memory_utilization - weights - overhead, 0.0)
    blocks = int(kv_bytes // (per_token * block_size))
    return KvBudget(
        shape, kv_dtype, per_token, gpu, gpu_memory_utilization, weights, overhead, kv_bytes,
        block_size, blocks, max_model_len,
    )  # fmt: skip
