"""The simulator's step-time model: a roofline-style sum of a few terms per engine step.

One vLLM engine step runs one forward pass over every token scheduled in it. Its time is
modelled as a fixed part (reading the weights, launching kernels), plus a part per token pushed
through the model (compute), plus the attention reads of the decoding sequences' KV caches.
Where the figures of a named GPU come from: :mod:`sim.gpus`.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.config import SimConfig

__all__ = ["StepCost"]


@dataclass(frozen=True, slots=True)
class StepCost:
    """Milliseconds per term; :meth:`seconds` is the time of one step (before ``speed``)."""

    step_ms: float
    """Every step (a lone sequence's decode step): ``SimConfig.decode_ms_per_token``."""
    prefill_step_ms: float
    """A step that runs any prefill: ``SimConfig.base_ttft_ms``."""
    prefill_ms_per_token: float
    decode_ms_per_seq: float
    kv_read_ms_per_token: float

    @classmethod
    def from_config(cls, config: SimConfig) -> StepCost:
        return cls(
            step_ms=config.decode_ms_per_token,
            prefill_step_ms=config.base_ttft_ms,
            prefill_ms_per_token=config.prefill_ms_per_token,
            decode_ms_per_seq=config.decode_ms_per_seq,
            kv_read_ms_per_token=config.kv_read_ms_per_token,
        )

    def seconds(self, prefill_tokens: int, decode_seqs: int, decode_context: int) -> float:
        """Time of a step that prefills ``prefill_tokens`` tokens and decodes ``decode_seqs``
        sequences holding ``decode_context`` context tokens in all; 0 for an empty step.
        """
        if prefill_tokens <= 0 and decode_seqs <= 0:
            return 0.0
        ms = self.step_ms + decode_seqs * self.decode_ms_per_seq
        ms += decode_context * self.kv_read_ms_per_token
        if prefill_tokens > 0:
            ms += self.prefill_step_ms + prefill_tokens * self.prefill_ms_per_token
        return ms / 1000.0
