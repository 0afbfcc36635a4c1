"""Named GPU profiles of the simulator: a roofline-style step cost and a KV budget, derived from
datasheet figures for one reference model (Llama-3.1-8B in 16-bit weights).

How the five cost terms of :class:`sim.cost.StepCost` follow from hardware figures:

* every step reads all weights once: ``weights_bytes / (MBU * bandwidth)``
  (``decode_ms_per_token``: a lone sequence's time per token);
* every token that goes through the model (a prefill token or a sequence's decode token) costs
  ``2 * params`` FLOPs: ``2 * params / (MFU * peak_flops)`` (``prefill_ms_per_token`` and
  ``decode_ms_per_seq``);
* a decoding sequence's attention reads its whole KV cache: ``kv_bytes_per_token /
  (MBU * bandwidth)`` per context token (``kv_read_ms_per_token``).

The terms are summed, not max-ed as in a true roofline: a step that is both memory- and
compute-heavy is over-estimated (at most 2x), which keeps the model monotone and simple.

KV budget (vLLM's arithmetic, see ``docs/tuning.md``): ``memory * gpu_memory_utilization -
weights - activations - reserve``, divided by ``2 * layers * kv_heads * head_dim * dtype_bytes``.
vLLM sizes the activations in a profiling run of ``max_num_batched_tokens`` tokens, so a larger
token budget leaves less room for the KV cache; here they are estimated as the MLP's
intermediate tensors plus a few hidden-size tensors per batched token.

Sources and assumptions (change them here, nowhere else):

* memory as CUDA reports it (``nvidia-smi``): H100 SXM 80GB 81,559 MiB, A100 SXM 80GB
  81,920 MiB, L4 23,034 MiB;
* bandwidth and dense BF16 peak from NVIDIA's datasheets: H100 SXM 3.35 TB/s and 989 TFLOPS,
  A100 SXM 2.039 TB/s and 312 TFLOPS, L4 0.300 TB/s and 121 TFLOPS;
* achieved fractions (assumed, typical of published vLLM measurements): MBU 0.8 of the
  bandwidth, MFU 0.5 of the peak FLOPS;
* Llama-3.1-8B: 8.03e9 parameters (16.06 GB in BF16), 32 layers, 8 KV heads of dimension 128;
* ``gpu_memory_utilization`` 0.9 (vLLM's default), 1.5 GiB reserved for CUDA graphs and
  non-torch allocations, and ``(2 * intermediate + 4 * hidden) * 2`` bytes of activations per
  batched token (90 KiB for Llama-3.1-8B: 0.7 GiB at 8,192 tokens). vLLM measures both in its
  profiling run; these are estimates.

This module imports nothing else of the project (the simulator is standalone); the KV-budget
arithmetic is repeated from :mod:`tuning.kvbudget`, and a unit test checks they agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["GPU_PROFILES", "GpuProfile", "ReferenceModel"]

MBU = 0.8
"""Achieved fraction of the memory bandwidth (assumed)."""
MFU = 0.5
"""Achieved fraction of the dense BF16 peak FLOPS in prefill (assumed)."""
GPU_MEMORY_UTILIZATION = 0.9
RESERVE_BYTES = int(1.5 * 2**30)
"""CUDA graphs, non-torch memory (assumed)."""


@dataclass(frozen=True, slots=True)
class ReferenceModel:
    """The model a profile's figures are for."""

    name: str
    params: float
    weight_bytes_per_param: int
    layers: int
    kv_heads: int
    head_dim: int
    hidden: int
    intermediate: int

    @property
    def weights_bytes(self) -> float:
        return self.params * self.weight_bytes_per_param

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """``2 (K and V) * layers * kv_heads * head_dim * dtype_bytes``."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes

    def activation_bytes(self, batched_tokens: int) -> int:
        """Estimated peak activations of a step of ``batched_tokens`` tokens (16-bit)."""
        return (2 * self.intermediate + 4 * self.hidden) * 2 * batched_tokens


LLAMA_3_1_8B = ReferenceModel(
    "Llama-3.1-8B",
    params=8.03e9,
    weight_bytes_per_param=2,
    layers=32,
    kv_heads=8,
    head_dim=128,
    hidden=4096,
    intermediate=14336,
)


@dataclass(frozen=True, slots=True)
class GpuProfile:
    """One GPU running :attr:`model`; :meth:`sim_fields` turns it into ``SimConfig`` fields."""

    name: str
    description: str
    memory_mib: int
    bandwidth_tb_s: float
    bf16_tflops: float
    model: ReferenceModel = LLAMA_3_1_8B

    def kv_tokens(self, *, fp8: bool = False, batched_tokens: int = 8192) -> int:
        """Tokens the KV cache holds (16-bit KV, or fp8) with that ``max_num_batched_tokens``."""
        usable = self.memory_mib * 2**20 * GPU_MEMORY_UTILIZATION
        reserved = RESERVE_BYTES + self.model.activation_bytes(batched_tokens)
        free = usable - self.model.weights_bytes - reserved
        return max(int(free // self.model.kv_bytes_per_token(1 if fp8 else 2)), 0)

    def sim_fields(
        self, *, fp8: bool = False, block_size: int = 16, batched_tokens: int = 8192
    ) -> dict[str, Any]:
        """The cost terms (ms) and ``kv_blocks`` this profile implies."""
        bandwidth = MBU * self.bandwidth_tb_s * 1e12  # bytes/s
        flops = MFU * self.bf16_tflops * 1e12
        per_token_compute_ms = 2 * self.model.params / flops * 1e3
        kv_bytes = self.model.kv_bytes_per_token(1 if fp8 else 2)
        return {
            "decode_ms_per_token": round(self.model.weights_bytes / bandwidth * 1e3, 4),
            "base_ttft_ms": 0.0,
            "prefill_ms_per_token": round(per_token_compute_ms, 6),
            "decode_ms_per_seq": round(per_token_compute_ms, 6),
            "kv_read_ms_per_token": round(kv_bytes / bandwidth * 1e3, 9),
            "kv_blocks": max(
                self.kv_tokens(fp8=fp8, batched_tokens=batched_tokens) // block_size, 1
            ),
        }


GPU_PROFILES: dict[str, GpuProfile] = {
    p.name: p
    for p in (
        GpuProfile("h100-llama8b", "H100 SXM 80GB, Llama-3.1-8B BF16", 81_559, 3.35, 989.0),
        GpuProfile("a100-llama8b", "A100 SXM 80GB, Llama-3.1-8B BF16", 81_920, 2.039, 312.0),
        GpuProfile("l4-llama8b", "L4 24GB, Llama-3.1-8B BF16", 23_034, 0.300, 121.0),
    )
}
"""The named profiles, by name."""
