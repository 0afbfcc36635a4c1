"""vLLM's V1 scheduler, at the level that matters for tuning. Pure logic: no I/O, no clock.

One engine step (:meth:`Scheduler.schedule`, then :meth:`Scheduler.commit` when the step's
time has passed):

1. **Running sequences first**, oldest first. Each needs the tokens it has not computed yet:
   one for a decoding sequence (``1 + k`` with ``k`` speculative drafts), the rest of its
   prompt (in chunks) for one still in prefill. Every sequence has KV blocks of
   ``block_size`` tokens for what it has computed; when a block is needed and none is free,
   the **newest** running sequence is preempted: its blocks are freed, its progress is
   dropped (recompute: later it prefills its prompt *and* the tokens it already generated
   again) and it goes to the front of the waiting queue. Counted in ``num_preemptions``.
2. **Then waiting sequences**, first come first served (preempted ones first), only if
   nothing was preempted in this step, while fewer than ``max_num_seqs`` run and
   ``max_num_batched_tokens`` has room: a long prompt is split across steps (chunked prefill).
3. At the end of the step every sequence whose tokens are all computed samples one token
   (plus the accepted drafts with speculative decoding); one that reached its output length
   finishes and frees its blocks.

This is how vLLM's ``vllm/v1/core/sched/scheduler.py`` behaves with the default FCFS policy.
KV blocks live in a :class:`~sim.blocks.BlockPool` as in vLLM: a sequence with block
hashes (``Seq.hashes``: the HTTP simulator's requests) looks up the prefix cache each time it
is scheduled from the waiting queue (so a recompute after a preemption finds its freed blocks
if they are still cached), shares the cached blocks, and caches its full prompt blocks once
computed; freed blocks stay cached until the allocator evicts them (LRU). A sequence without
hashes (``deja tune``'s closed loop) starts with ``Seq.cached`` tokens counted as computed,
held in blocks of its own. A sequence that cannot fit even alone in the KV cache is cut short.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sim.blocks import BlockPool
from sim.config import SimConfig

__all__ = ["Scheduler", "Seq", "SeqState", "StepOutcome", "StepPlan"]


class SeqState:
    """States of a :class:`Seq` (plain ints: this code runs once per token)."""

    WAITING = 0
    RUNNING = 1
    FINISHED = 2
    ABORTED = 3


@dataclass(slots=True, eq=False)
class Seq:
    """One sequence: a prompt and how many tokens it will generate."""

    prompt_len: int
    max_output: int
    cached: int = 0
    """Leading prompt tokens found in the prefix cache when it arrived."""
    arrival: float = 0.0
    owner: Any = None
    """Whatever the driver attaches (the HTTP server's ticket)."""
    hashes: list[bytes] | None = None
    """vLLM block hashes of the prompt's full blocks: the prefix cache is used when given."""
    token_ids: Sequence[int] = ()
    """The prompt's token ids (for the KV events' ``token_ids``)."""
    computed: int = 0
    output: int = 0
    block_ids: list[int] = field(default_factory=list)
    stored: int = 0
    """Leading blocks of ``block_ids`` that are in the prefix cache (shared or cached)."""
    scheduled_at: float = -1.0
    """When it was first scheduled (vLLM's queue time ends, its prefill time starts)."""
    first_token_at: float = -1.0
    last_token_at: float = -1.0
    prev_token_at: float = -1.0
    """When the emission before the last one happened (for inter-token latency)."""
    preemptions: int = 0
    state: int = SeqState.WAITING
    truncated: bool = False
    """Cut short because it cannot fit in the KV cache even alone."""
    started: bool = False


@dataclass(slots=True)
class StepPlan:
    """What one step runs: ``(seq, tokens, drafts)`` per scheduled sequence."""

    items: list[tuple[Seq, int, int]] = field(default_factory=list)
    prefill_tokens: int = 0
    decode_seqs: int = 0
    decode_context: int = 0
    preempted: int = 0

    @property
    def empty(self) -> bool:
        return not self.items


@dataclass(slots=True)
class StepOutcome:
    """What one step produced."""

    emitted: list[tuple[Seq, int]] = field(default_factory=list)
    finished: list[Seq] = field(default_factory=list)
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0


class Scheduler:
    """The waiting queue, the running sequences and the KV blocks of one replica."""

    def __init__(
        self,
        *,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        block_size: int,
        num_blocks: int,
        spec_tokens: int = 0,
        spec_acceptance: float = 0.0,
        seed: int = 0,
        publish_events: bool = False,
    ) -> None:
        if min(max_num_seqs, max_num_batched_tokens, block_size, num_blocks) < 1:
            raise ValueError("scheduler limits must be >= 1")
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.spec_tokens = spec_tokens
        self.spec_acceptance = spec_acceptance
        self._rng = random.Random(seed)
        self.running: list[Seq] = []
        self.waiting: deque[Seq] = deque()
        self.pool = BlockPool(num_blocks, block_size, publish=publish_events)
        self.num_preemptions = 0
        self._cut: list[Seq] = []

    @classmethod
    def from_config(cls, config: SimConfig) -> Scheduler:
        """A scheduler with ``config``'s limits, KV budget and drafter."""
        return cls(
            max_num_seqs=config.max_num_seqs,
            max_num_batched_tokens=config.max_num_batched_tokens,
            block_size=config.block_size,
            num_blocks=config.kv_blocks,
            spec_tokens=config.spec_tokens,
            spec_acceptance=config.spec_acceptance,
            seed=config.seed,
            publish_events=config.kv_events is not None,
        )

    # ------------------------------------------------------------------ queue

    def add(self, seq: Seq) -> None:
        """Queue a new sequence."""
        seq.state = SeqState.WAITING
        self.waiting.append(seq)

    def abort(self, seq: Seq) -> None:
        """Drop a sequence (its client went away) and free its blocks."""
        if seq.state == SeqState.RUNNING:
            self.running.remove(seq)
            self._free(seq)
        elif seq.state == SeqState.WAITING:
            self.waiting.remove(seq)
        seq.state = SeqState.ABORTED

    @property
    def has_work(self) -> bool:
        return bool(self.running or self.waiting or self._cut)

    @property
    def used_blocks(self) -> int:
        """Blocks held by sequences."""
        return self.pool.used

    def kv_usage(self) -> float:
        """Blocks held by running sequences over all blocks (vLLM's ``kv_cache_usage_perc``:
        cached blocks no sequence holds count as free)."""
        return min(self.pool.used / self.num_blocks, 1.0)

    # ------------------------------------------------------------------ one step

    def schedule(self, now: float) -> StepPlan:
        """Choose what the next step, starting at ``now``, runs (allocating blocks, preempting
        on exhaustion)."""
        plan = StepPlan()
        budget = self._schedule_running(plan, self.max_num_batched_tokens)
        if not plan.preempted:
            self._schedule_waiting(plan, budget, now)
        return plan

    def _schedule_running(self, plan: StepPlan, budget: int) -> int:
        running = self.running
        i = 0
        while i < len(running) and budget > 0:
            seq = running[i]
            remaining = seq.prompt_len + seq.output - seq.computed
            decoding = remaining == 1 and seq.output > 0
            drafts = 0
            if decoding and self.spec_tokens:
                drafts = max(min(self.spec_tokens, seq.max_output - seq.output - 1, budget - 1), 0)
            n = min(remaining + drafts, budget)
            if not self._allocate(seq, seq.computed + n) and not self._make_room(seq, n, plan):
                continue  # ``seq`` itself was preempted (it was the newest)
            plan.items.append((seq, n, drafts))
            budget -= n
            if decoding:
                plan.decode_seqs += 1
                plan.decode_context += seq.computed
            else:
                plan.prefill_tokens += n
            i += 1
        return budget

    def _make_room(self, seq: Seq, n: int, plan: StepPlan) -> bool:
        """Preempt the newest running sequences until ``seq`` gets its blocks; False when
        ``seq`` itself had to go."""
        while True:
            victim = self.running[-1]
            alone = len(self.running) == 1
            self.running.pop()
            self._free(victim)
            if alone:  # it cannot fit even with the whole cache to itself
                self._cut_short(victim)
                return False
            self.num_preemptions += 1
            plan.preempted += 1
            victim.preemptions += 1
            victim.computed = 0
            victim.state = SeqState.WAITING
            self.waiting.appendleft(victim)
            if victim is seq:
                return False
            if self._allocate(seq, seq.computed + n):
                return True

    def _schedule_waiting(self, plan: StepPlan, budget: int, now: float) -> None:
        waiting = self.waiting
        running = self.running
        while waiting and budget > 0 and len(running) < self.max_num_seqs:
            seq = waiting[0]
            if seq.hashes is not None:
                if not seq.block_ids:
                    self._lookup(seq)
            elif not seq.started:
                seq.computed = min(seq.cached, seq.prompt_len - 1)
            n = min(seq.prompt_len + seq.output - seq.computed, budget)
            if not self._allocate(seq, seq.computed + n):
                self._free(seq)  # shared prefix blocks too: it looks them up again later
                if not running:
                    waiting.popleft()
                    self._cut_short(seq)
                    continue
                return
            waiting.popleft()
            if seq.hashes is not None and not seq.started:
                # vLLM's prefix-cache counters count a request when it is first scheduled
                self.pool.queries += seq.prompt_len
                self.pool.hits += seq.computed
                seq.cached = seq.computed
            if not seq.started:
                seq.scheduled_at = now
            seq.started = True
            seq.state = SeqState.RUNNING
            running.append(seq)
            plan.items.append((seq, n, 0))
            plan.prefill_tokens += n
            budget -= n

    def commit(self, plan: StepPlan, now: float) -> StepOutcome:
        """Apply a step that ended at ``now``: sample tokens, finish sequences."""
        out = StepOutcome()
        any_finished = False
        for seq, n, drafts in plan.items:
            if seq.state != SeqState.RUNNING:
                continue  # aborted while the step ran
            count = 1
            if drafts:
                accepted = self._accepted(drafts)
                out.drafts += 1
                out.draft_tokens += drafts
                out.accepted_tokens += accepted
                seq.computed += 1 + accepted
                count += accepted
            else:
                seq.computed += n
                if seq.hashes:
                    self._cache_computed(seq)
                if seq.computed < seq.prompt_len + seq.output:
                    continue  # a prefill chunk: nothing sampled yet
            count = min(count, seq.max_output - seq.output)
            if seq.output == 0:
                seq.first_token_at = now
            seq.output += count
            seq.prev_token_at = seq.last_token_at
            seq.last_token_at = now
            out.emitted.append((seq, count))
            if seq.output >= seq.max_output:
                seq.state = SeqState.FINISHED
                self._free(seq)
                out.finished.append(seq)
                any_finished = True
        if any_finished:
            self.running = [s for s in self.running if s.state == SeqState.RUNNING]
        if self._cut:
            out.finished.extend(self._cut)
            self._cut = []
        return out

    # ------------------------------------------------------------------ blocks

    def _lookup(self, seq: Seq) -> None:
        """Share the cached blocks of ``seq``'s prompt prefix (at least one prompt token is
        always computed, as in vLLM)."""
        assert seq.hashes is not None
        limit = (seq.prompt_len - 1) // self.block_size
        seq.block_ids = self.pool.take_prefix(seq.hashes, limit)
        seq.stored = len(seq.block_ids)
        seq.computed = seq.stored * self.block_size

    def _cache_computed(self, seq: Seq) -> None:
        assert seq.hashes is not None
        full = min(seq.computed // self.block_size, len(seq.hashes), len(seq.block_ids))
        if full > seq.stored:
            self.pool.cache(seq.block_ids, seq.hashes, seq.token_ids, seq.stored, full)
            seq.stored = full

    def _allocate(self, seq: Seq, tokens: int) -> bool:
        need = -(-tokens // self.block_size) - len(seq.block_ids)
        if need <= 0:
            return True
        blocks = self.pool.allocate(need)
        if blocks is None:
            return False
        seq.block_ids.extend(blocks)
        return True

    def _free(self, seq: Seq) -> None:
        self.pool.release(seq.block_ids)
        seq.block_ids = []
        seq.stored = 0

    def _cut_short(self, seq: Seq) -> None:
        seq.state = SeqState.FINISHED
        seq.truncated = True
        self._cut.append(seq)

    def _accepted(self, drafts: int) -> int:
        """Drafts accepted: each with probability ``spec_acceptance``, up to the first miss."""
        accepted = 0
        while accepted < drafts and self._rng.random() < self.spec_acceptance:
            accepted += 1
        return accepted
