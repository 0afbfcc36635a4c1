"""The simulator's scheduler, step-cost model, GPU profiles and virtual-time runs (no I/O)."""

from __future__ import annotations

import random

import pytest

from sim.config import SimConfig
from sim.cost import StepCost
from sim.gpus import GPU_PROFILES
from sim.scheduler import Scheduler, Seq, SeqState
from sim.virtual import LogHistogram, VirtualRequest, run_closed_loop


def scheduler(**kw: int | float) -> Scheduler:
    args: dict[str, int | float] = {
        "max_num_seqs": 8,
        "max_num_batched_tokens": 64,
        "block_size": 4,
        "num_blocks": 100,
    }
    args.update(kw)
    return Scheduler(**args)  # type: ignore[arg-type]


def run_step(s: Scheduler, now: float = 1.0) -> list[tuple[int, int]]:
    """One step; returns (prompt_len, tokens) of what was scheduled."""
    plan = s.schedule(now)
    s.commit(plan, now)
    return [(seq.prompt_len, n) for seq, n, _ in plan.items]


def test_a_sequence_keeps_the_time_it_was_first_scheduled() -> None:
    """vLLM's queue time ends, and its prefill time starts, when a request is first scheduled:
    a sequence that waits for a free slot is scheduled later."""
    s = scheduler(max_num_seqs=1, num_blocks=4)
    a, b = Seq(prompt_len=4, max_output=4), Seq(prompt_len=4, max_output=1)
    s.add(a)
    s.add(b)
    s.commit(s.schedule(2.0), 2.5)
    assert (a.scheduled_at, b.scheduled_at) == (2.0, -1.0)  # b waits: one sequence at a time
    assert a.first_token_at == 2.5
    now = 3.0
    while a.state != SeqState.FINISHED:
        s.commit(s.schedule(now), now + 0.5)
        now += 1.0
    assert a.scheduled_at == 2.0
    s.commit(s.schedule(now), now + 0.5)
    assert b.scheduled_at == now and b.first_token_at == now + 0.5


def test_decode_first_then_chunked_prefill_within_the_token_budget() -> None:
    s = scheduler(max_num_batched_tokens=10)
    a = Seq(prompt_len=5, max_output=10)
    s.add(a)
    assert run_step(s) == [(5, 5)] and a.output == 1  # whole prompt, first token sampled
    b = Seq(prompt_len=25, max_output=3)
    s.add(b)
    assert run_step(s) == [(5, 1), (25, 9)]  # a decodes first; b gets the rest of the budget
    assert b.output == 0 and b.computed == 9  # a chunk: nothing sampled yet
    assert run_step(s) == [(5, 1), (25, 9)]
    assert run_step(s) == [(5, 1), (25, 7)]  # b's last chunk
    assert b.output == 1 and a.output == 4


def test_max_num_seqs_keeps_the_rest_waiting() -> None:
    s = scheduler(max_num_seqs=2)
    for _ in range(5):
        s.add(Seq(prompt_len=4, max_output=3))
    run_step(s)
    assert len(s.running) == 2 and len(s.waiting) == 3


def test_kv_exhaustion_preempts_the_newest_and_it_recomputes() -> None:
    # 10 blocks of 4 tokens; each sequence needs 7 at full length (8 + 20 tokens), so both
    # fit at first (2 blocks each) but not to the end.
    s = scheduler(num_blocks=10, max_num_batched_tokens=100)
    old, new = Seq(prompt_len=8, max_output=20), Seq(prompt_len=8, max_output=20)
    s.add(old)
    s.add(new)
    run_step(s)
    assert s.used_blocks == 4 and s.kv_usage() == pytest.approx(0.4)
    for i in range(16):
        run_step(s, now=2.0 + i)
    assert s.num_preemptions >= 1 and new.preemptions >= 1 and old.preemptions == 0
    assert new in s.waiting or new.computed < 8 + new.output  # dropped its progress
    now = 18.0
    while s.has_work:
        run_step(s, now)
        now += 1.0
    assert new.state == SeqState.FINISHED and new.output == 20 and not new.truncated
    assert new.scheduled_at == 1.0  # rescheduled since, but its queue time ended at 1.0
    assert s.used_blocks == 0


def test_a_sequence_that_cannot_fit_alone_is_cut_short() -> None:
    s = scheduler(num_blocks=3)
    seq = Seq(prompt_len=10, max_output=10)  # needs 5 blocks at full length
    s.add(seq)
    while s.has_work:
        run_step(s)
    assert seq.truncated and seq.state == SeqState.FINISHED and seq.output < 10
    assert s.used_blocks == 0


def test_abort_frees_blocks() -> None:
    s = scheduler()
    seq = Seq(prompt_len=16, max_output=50)
    s.add(seq)
    run_step(s)
    assert s.used_blocks == 4  # 16 computed tokens; the sampled one is computed next step
    s.abort(seq)
    assert s.used_blocks == 0 and not s.has_work and seq.state == SeqState.ABORTED


def test_prefix_cache_hit_skips_prefill() -> None:
    s = scheduler()
    seq = Seq(prompt_len=40, max_output=2, cached=32)
    s.add(seq)
    assert run_step(s) == [(40, 8)]


def test_speculative_decoding_accepts_drafts_up_to_the_first_miss() -> None:
    always = scheduler(spec_tokens=3, spec_acceptance=1.0)
    seq = Seq(prompt_len=4, max_output=9)
    always.add(seq)
    run_step(always)
    plan = always.schedule(1.5)
    out = always.commit(plan, 2.0)
    assert plan.items[0][1:] == (4, 3) and seq.output == 5  # 1 + 3 accepted drafts
    assert (out.drafts, out.draft_tokens, out.accepted_tokens) == (1, 3, 3)
    never = scheduler(spec_tokens=3, spec_acceptance=0.0)
    other = Seq(prompt_len=4, max_output=9)
    never.add(other)
    run_step(never)
    out = never.commit(never.schedule(1.5), 2.0)
    assert other.output == 2 and out.accepted_tokens == 0 and out.draft_tokens == 3


def test_step_cost_terms() -> None:
    cost = StepCost(
        step_ms=5, prefill_step_ms=10, prefill_ms_per_token=0.5, decode_ms_per_seq=1,
        kv_read_ms_per_token=0.01,
    )  # fmt: skip
    assert cost.seconds(0, 0, 0) == 0
    assert cost.seconds(0, 4, 1000) == pytest.approx((5 + 4 + 10) / 1000)
    assert cost.seconds(100, 0, 0) == pytest.approx((5 + 10 + 50) / 1000)


def test_gpu_profile_fills_only_what_was_not_given() -> None:
    h100 = SimConfig(gpu="h100-llama8b")
    assert h100.base_ttft_ms == 0 and 5 < h100.decode_ms_per_token < 7
    assert h100.kv_blocks == GPU_PROFILES["h100-llama8b"].kv_tokens() // 16
    assert SimConfig(gpu="h100-llama8b", kv_blocks=99).kv_blocks == 99
    fp8 = SimConfig(gpu="h100-llama8b", kv_cache_dtype="fp8")
    assert fp8.kv_blocks == pytest.approx(2 * h100.kv_blocks, abs=1)
    assert fp8.kv_read_ms_per_token == pytest.approx(h100.kv_read_ms_per_token / 2, rel=1e-3)
    big = SimConfig(gpu="h100-llama8b", max_num_batched_tokens=65536)
    assert big.kv_blocks < h100.kv_blocks  # a larger token budget needs more activations
    with pytest.raises(ValueError, match="unknown gpu profile"):
        SimConfig(gpu="tpu")


def test_log_histogram_quantiles() -> None:
    h = LogHistogram()
    assert h.quantile(0.5) is None
    for v in range(1, 101):
        h.add(v / 100)
    assert h.quantile(0.5) == pytest.approx(0.5, rel=0.03)
    assert h.quantile(0.99) == pytest.approx(0.99, rel=0.03)


def rag_requests(n: int = 400) -> list[VirtualRequest]:
    rng = random.Random(1)
    return [VirtualRequest(rng.randint(3000, 8000), rng.randint(200, 600)) for _ in range(n)]


def throughput(seqs: int, tokens: int, requests: list[VirtualRequest]) -> float:
    config = SimConfig(
        gpu="h100-llama8b", max_num_seqs=seqs, max_num_batched_tokens=tokens, max_model_len=32768
    )
    return run_closed_loop(config, requests, 256, measured=300, warmup=128).throughput


def test_the_grid_has_an_interior_optimum_in_max_num_seqs() -> None:
    """Too few sequences leave throughput on the table; too many preempt (the design's shape)."""
    requests = rag_requests()
    for tokens in (4096, 32768):
        few, mid, many = (throughput(s, tokens, requests) for s in (16, 64, 256))
        assert mid > 1.2 * few, (tokens, few, mid)
        assert mid > many, (tokens, mid, many)


def test_virtual_run_counts_and_is_deterministic() -> None:
    config = SimConfig(gpu="h100-llama8b", max_num_seqs=32)
    requests = [VirtualRequest(500, 50), VirtualRequest(1500, 100)]
    first = run_closed_loop(config, requests, 64, measured=100, warmup=20)
    again = run_closed_loop(config, requests, 64, measured=100, warmup=20)
    assert first.completed == 100 and first.output_tokens == again.output_tokens
    assert first.throughput == pytest.approx(again.throughput)
    assert first.waiting_mean > 20 and first.running_mean == pytest.approx(32, rel=0.1)
    ttft = first.ttft.quantile(0.5)
    assert ttft is not None and ttft > 0.05  # half the load waits for a slot
    timed = run_closed_loop(config, requests, 64, measured=10**6, warmup=0, wall_limit=0.05)
    assert timed.timed_out
