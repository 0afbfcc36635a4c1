"""``deja doctor``'s diagnostic matrix: symptoms in the replicas' metrics → the flag to change.

* ``ttft_spread``: TTFT p99/p50 ≫ 2 (here ≥ 3) → raise ``--max-num-batched-tokens``;
* ``slow_prefill_low_hits``: prefill time p50 > 500 ms with a prefix-cache hit rate < 30% →
  check the system prompt and the prefix key (deja knows both). The prefill time is vLLM's
  ``vllm:request_prefill_time_seconds`` (first scheduled to first token), so time spent waiting
  in a queue, which ``queue_with_free_kv`` and ``kv_full_preempting`` explain, is not read as
  a slow prefill; a replica without that histogram is judged on TTFT;
* ``spec_acceptance``: speculative-decoding acceptance < 0.6 → change or disable the drafter;
* ``kv_full_preempting``: KV usage at 1.0 (≥ 0.95) with preemptions → lower
  ``--max-num-seqs`` or use ``--kv-cache-dtype fp8``;
* ``queue_with_free_kv``: requests waiting (in ≥ 25% of the samples) while KV usage < 0.7 → raise
  ``--max-num-batched-tokens``.

Every finding carries the numbers that triggered it. A rule needs its metric: a replica that
does not export speculative-decoding counters cannot trigger ``spec_acceptance``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tuning.observe import GatewayWindow, Observation, ReplicaWindow

__all__ = [
    "KV_FULL",
    "LOW_HIT_RATE",
    "MIN_REQUESTS",
    "QUEUE_KV_BELOW",
    "QUEUE_SHARE",
    "SLOW_TTFT_S",
    "SPEC_MIN_ACCEPTANCE",
    "TTFT_SPREAD",
    "Finding",
    "diagnose",
]

TTFT_SPREAD = 3.0
"""p99/p50 of TTFT at or above this is "≫ 2"."""
MIN_REQUESTS = 10
"""TTFT rules need this many first tokens in the window (a quantile of three is noise)."""
SLOW_TTFT_S = 0.5
LOW_HIT_RATE = 0.3
SPEC_MIN_ACCEPTANCE = 0.6
KV_FULL = 0.95
""""KV usage at 1.0": vLLM preempts before the last block is gone, so 0.95 counts as full
(the same bound as the deploy alert ``VllmKVCacheSaturatedWithPreemptions``)."""
QUEUE_KV_BELOW = 0.7
QUEUE_SHARE = 0.25
"""A queue counts when requests wait in at least this share of the samples (not a blip)."""


@dataclass
class Finding:
    """One diagnosis: which replica, the symptom, its numbers, and the flag to change."""

    rule: str
    replica: str
    symptom: str
    change: str
    numbers: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "replica": self.replica,
            "symptom": self.symptom,
            "change": self.change,
            "numbers": self.numbers,
        }


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _ttft_spread(w: ReplicaWindow) -> Finding | None:
    if w.requests < MIN_REQUESTS or not w.ttft_p50 or w.ttft_p99 is None:
        return None
    spread = w.ttft_p99 / w.ttft_p50
    if spread < TTFT_SPREAD:
        return None
    return Finding(
        "ttft_spread",
        w.url,
        f"TTFT p99/p50 = {spread:.1f} (≫ 2): long prefills hold short requests back",
        "raise --max-num-batched-tokens (more prompt tokens per step)",
        {"ttft_p50_s": _r(w.ttft_p50), "ttft_p99_s": _r(w.ttft_p99), "ratio": _r(spread, 2),
         "requests": w.requests},
    )  # fmt: skip


def _slow_prefill(w: ReplicaWindow, gateway: GatewayWindow | None) -> Finding | None:
    if w.requests < MIN_REQUESTS or w.ttft_p50 is None or w.prefix_hit_rate is None:
        return None
    prefill = w.prefill_p50 if w.prefill_p50 is not None else w.ttft_p50
    if prefill <= SLOW_TTFT_S or w.prefix_hit_rate >= LOW_HIT_RATE:
        return None
    numbers: dict[str, Any] = {
        "ttft_p50_s": _r(w.ttft_p50),
        "prefill_p50_s": _r(w.prefill_p50),
        "queue_p50_s": _r(w.queue_p50),
        "prefix_hit_rate": _r(w.prefix_hit_rate),
    }
    change = (
        "check the system prompt (a timestamp or a user id in it breaks every prefix) and the "
        "prefix key (deja serve: DEJA_PREFIX_MODE, X-Prefix-Hash)"
    )
    if gateway is not None and gateway.error is None and gateway.routed > 0:
        numbers["gateway_no_prefix_share"] = _r(gateway.no_prefix / gateway.routed)
        numbers["gateway_spill_share"] = _r(gateway.spill / gateway.routed)
        if gateway.no_prefix / gateway.routed > 0.5:
            change += "; deja routed most requests without a prefix key (no system prompt?)"
    return Finding(
        "slow_prefill_low_hits",
        w.url,
        f"{'prefill time' if w.prefill_p50 is not None else 'TTFT'} p50 = "
        f"{prefill * 1000:.0f} ms with a prefix-cache hit rate of "
        f"{w.prefix_hit_rate:.0%}: prompts are prefilled from scratch",
        change,
        numbers,
    )


def _spec(w: ReplicaWindow) -> Finding | None:
    if w.spec_acceptance is None or w.spec_acceptance >= SPEC_MIN_ACCEPTANCE:
        return None
    return Finding(
        "spec_acceptance",
        w.url,
        f"speculative-decoding acceptance = {w.spec_acceptance:.2f} (< {SPEC_MIN_ACCEPTANCE})",
        "change the drafter or disable speculative decoding (--speculative-config)",
        {"acceptance": _r(w.spec_acceptance), "draft_tokens": w.spec_draft_tokens},
    )


def _kv_full(w: ReplicaWindow) -> Finding | None:
    if w.kv_max is None or w.kv_max < KV_FULL or w.preemptions <= 0:
        return None
    return Finding(
        "kv_full_preempting",
        w.url,
        f"KV cache full ({w.kv_max:.2f}) with {w.preemptions:.0f} preemptions: sequences are "
        "evicted and recomputed",
        "lower --max-num-seqs, or --kv-cache-dtype fp8 (twice the tokens in the same memory)",
        {
            "kv_usage_max": _r(w.kv_max),
            "kv_usage_mean": _r(w.kv_mean),
            "preemptions": w.preemptions,
        },
    )


def _queue(w: ReplicaWindow) -> Finding | None:
    if w.kv_max is None or w.waiting_share < QUEUE_SHARE or w.kv_max >= QUEUE_KV_BELOW:
        return None
    return Finding(
        "queue_with_free_kv",
        w.url,
        f"requests waiting (mean {w.waiting_mean:.1f}, max {w.waiting_max:.0f}) while the KV "
        f"cache is at most {w.kv_max:.0%} used: the scheduler, not memory, is the limit",
        "raise --max-num-batched-tokens (and --max-num-seqs if running sits at its limit)",
        {"waiting_mean": _r(w.waiting_mean, 2), "waiting_max": w.waiting_max,
         "kv_usage_max": _r(w.kv_max)},
    )  # fmt: skip


def diagnose(observation: Observation) -> list[Finding]:
    """Apply every rule to every replica that answered."""
    findings: list[Finding] = []
    for w in observation.replicas:
        if w.error is not None:
            continue
        for finding in (
            _ttft_spread(w),
            _slow_prefill(w, observation.gateway),
            _spec(w),
            _kv_full(w),
            _queue(w),
        ):
            if finding is not None:
                findings.append(finding)
    return findings
