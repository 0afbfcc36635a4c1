"""``deja doctor``'s rules on windows built by hand: which symptom names which cause."""

from __future__ import annotations

from tuning.doctor import diagnose
from tuning.observe import Observation, ReplicaWindow


def queued(prefill_p50: float | None) -> ReplicaWindow:
    """Sixteen requests with 0.8 s to the first token, 0.7 s of it waiting for a slot while
    the KV cache is mostly free, and no prefix-cache hits (unique prompts)."""
    return ReplicaWindow(
        "http://replica:8000",
        requests=16,
        ttft_p50=0.8,
        ttft_p99=1.0,
        prefill_p50=prefill_p50,
        queue_p50=0.7 if prefill_p50 is not None else None,
        prefix_hit_rate=0.0,
        kv_samples=[0.2] * 10,
        waiting_samples=[5.0] * 10,
    )


def rules(window: ReplicaWindow) -> set[str]:
    return {f.rule for f in diagnose(Observation(1.0, [window]))}


def test_time_spent_queued_is_not_read_as_a_slow_prefill() -> None:
    assert rules(queued(prefill_p50=0.02)) == {"queue_with_free_kv"}


def test_a_slow_prefill_is_named_with_its_own_time_and_the_queue_beside_it() -> None:
    window = queued(prefill_p50=0.65)
    [slow] = [f for f in diagnose(Observation(1.0, [window])) if f.rule == "slow_prefill_low_hits"]
    assert slow.numbers["prefill_p50_s"] == 0.65 and slow.numbers["queue_p50_s"] == 0.7
    assert slow.symptom.startswith("prefill time p50 = 650 ms")


def test_a_replica_without_the_prefill_histogram_is_judged_on_ttft() -> None:
    window = queued(prefill_p50=None)
    assert rules(window) == {"queue_with_free_kv", "slow_prefill_low_hits"}
    [slow] = [f for f in diagnose(Observation(1.0, [window])) if f.rule == "slow_prefill_low_hits"]
    assert slow.symptom.startswith("TTFT p50 = 800 ms") and slow.numbers["prefill_p50_s"] is None
