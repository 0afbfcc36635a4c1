"""The simulator's scheduler driven in simulated time: a closed-loop load at a fixed
concurrency, run to completion without sleeping (``deja tune --in-process``).

A step's modelled time is added to a virtual clock instead of being slept, so a grid cell that
stands for minutes of GPU time runs in about a second of CPU. The scheduler and the step-time
model are the same objects the HTTP simulator runs in real time (:mod:`sim.loop`).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from sim.config import SimConfig
from sim.cost import StepCost
from sim.scheduler import Scheduler, Seq, StepOutcome

__all__ = ["LogHistogram", "VirtualRequest", "VirtualResult", "run_closed_loop"]

_WALL_CHECK_STEPS = 256


class LogHistogram:
    """Counts in buckets 2% wide (relative), so quantiles cost no sample list."""

    _BASE = math.log(1.02)

    def __init__(self) -> None:
        self.counts: Counter[int] = Counter()
        self.total = 0

    def add(self, value: float, count: int = 1) -> None:
        key = -10_000 if value <= 0 else math.floor(math.log(value) / self._BASE)
        self.counts[key] += count
        self.total += count

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile (bucket midpoint, 1% error), None when empty."""
        if not self.total:
            return None
        rank = q * self.total
        seen = 0
        for key in sorted(self.counts):
            seen += self.counts[key]
            if seen >= rank:
                return 0.0 if key == -10_000 else math.exp((key + 0.5) * self._BASE)
        return None


@dataclass(frozen=True, slots=True)
class VirtualRequest:
    """One request of the workload: prompt tokens, output tokens, prefix-cache hit."""

    prompt_len: int
    output_len: int
    cached: int = 0


@dataclass(slots=True)
class VirtualResult:
    """Figures of the measured window (after the warm-up completions)."""

    completed: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    ttft: LogHistogram = field(default_factory=LogHistogram)
    itl: LogHistogram = field(default_factory=LogHistogram)
    preemptions: int = 0
    truncated: int = 0
    waiting_mean: float = 0.0
    waiting_max: int = 0
    running_mean: float = 0.0
    kv_usage_mean: float = 0.0
    steps: int = 0
    timed_out: bool = False
    wall_seconds: float = 0.0

    @property
    def throughput(self) -> float:
        """Output tokens per simulated second."""
        return self.output_tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass(slots=True)
class _Window:
    """Time-weighted gauges accumulated over the measured window."""

    start: float = -1.0
    preemptions_at_start: int = 0
    waiting: float = 0.0
    running: float = 0.0
    kv: float = 0.0


def run_closed_loop(
    config: SimConfig,
    requests: Sequence[VirtualRequest],
    concurrency: int,
    *,
    measured: int,
    warmup: int,
    wall_limit: float | None = None,
) -> VirtualResult:
    """Keep ``concurrency`` requests in flight (a finished one is replaced at once, taking
    ``requests`` in order, cyclically) until ``warmup + measured`` have completed; figures
    cover the completions after the first ``warmup``. ``wall_limit`` (seconds of real time)
    stops the run early with ``timed_out`` set.
    """
    if not requests or concurrency < 1 or measured < 1:
        raise ValueError("need requests, concurrency >= 1 and measured >= 1")
    run = _ClosedLoop(config, requests, warmup)
    for _ in range(concurrency):
        run.issue()
    deadline = None if wall_limit is None else time.monotonic() + wall_limit
    while run.completed < warmup + measured and run.scheduler.has_work:
        run.step()
        if deadline is not None and run.result.steps % _WALL_CHECK_STEPS == 0:
            run.result.timed_out = time.monotonic() > deadline
            if run.result.timed_out:
                break
    return run.close()


class _ClosedLoop:
    """State of one closed-loop run in virtual time."""

    def __init__(self, config: SimConfig, requests: Sequence[VirtualRequest], warmup: int) -> None:
        self.scheduler = Scheduler.from_config(config)
        self.cost = StepCost.from_config(config)
        self.requests = requests
        self.warmup = warmup
        self.result = VirtualResult()
        self.window = _Window(start=0.0 if warmup == 0 else -1.0)
        self.started = time.monotonic()
        self.clock = 0.0
        self.issued = 0
        self.completed = 0

    def issue(self) -> None:
        r = self.requests[self.issued % len(self.requests)]
        self.scheduler.add(Seq(r.prompt_len, r.output_len, r.cached, arrival=self.clock))
        self.issued += 1

    def step(self) -> None:
        scheduler, result, window = self.scheduler, self.result, self.window
        plan = scheduler.schedule(self.clock)
        dt = self.cost.seconds(plan.prefill_tokens, plan.decode_seqs, plan.decode_context)
        measuring = window.start >= 0
        if measuring:
            waiting = len(scheduler.waiting)
            window.waiting += waiting * dt
            window.running += len(scheduler.running) * dt
            window.kv += scheduler.kv_usage() * dt
            result.waiting_max = max(result.waiting_max, waiting)
        self.clock += dt
        outcome = scheduler.commit(plan, self.clock)
        result.steps += 1
        if measuring:
            _record_tokens(result, outcome, self.clock)
        for seq in outcome.finished:
            self.completed += 1
            if self.completed == self.warmup:
                window.start = self.clock
                window.preemptions_at_start = scheduler.num_preemptions
            elif self.completed > self.warmup:
                result.completed += 1
                result.truncated += seq.truncated
                if seq.first_token_at >= 0:
                    result.ttft.add(seq.first_token_at - seq.arrival)
            self.issue()

    def close(self) -> VirtualResult:
        _close(self.result, self.window, self.scheduler, self.clock)
        self.result.wall_seconds = time.monotonic() - self.started
        return self.result


def _record_tokens(result: VirtualResult, outcome: StepOutcome, now: float) -> None:
    gaps: Counter[float] = Counter()
    for seq, count in outcome.emitted:
        result.output_tokens += count
        if seq.output != count:
            gaps[now - seq.prev_token_at] += 1
    for gap, count in gaps.items():
        result.itl.add(gap, count)


def _close(result: VirtualResult, window: _Window, scheduler: Scheduler, clock: float) -> None:
    if window.start < 0:
        return
    span = clock - window.start
    result.seconds = span
    result.preemptions = scheduler.num_preemptions - window.preemptions_at_start
    if span > 0:
        result.waiting_mean = window.waiting / span
        result.running_mean = window.running / span
        result.kv_usage_mean = window.kv / span
