"""The simulated replica's engine in real time: :class:`SimEngine` runs the scheduler's steps
in an asyncio task, sleeping each step's modelled time (times ``speed``), and wakes the HTTP
handlers whose sequences got tokens.

The same :class:`~sim.scheduler.Scheduler` runs without sleeping in
:mod:`sim.virtual` (simulated time, for ``deja tune``).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from deja.kvcache.blockhash import BlockHasher
from deja.kvcache.wire import KVEventBatch
from sim.config import SimConfig
from sim.cost import StepCost
from sim.engine import tokenize
from sim.kvevents import KVEventPublisher
from sim.scheduler import Scheduler, Seq, SeqState, StepOutcome

__all__ = ["SimEngine", "StepObserver", "Ticket"]

_STEPS_PER_YIELD = 32
"""At ``speed`` 0 steps take no time: run this many before letting other tasks in."""


class StepObserver(Protocol):
    """Receives what each step produced (the replica's Prometheus metrics)."""

    def observe_step(self, outcome: StepOutcome, now: float) -> None: ...


class Ticket:
    """The sequences of one HTTP request: :meth:`wait` returns when any of them got tokens,
    :meth:`wait_done` when all of them finished (a blocking answer waits only for that)."""

    def __init__(self, seqs: Sequence[Seq]) -> None:
        self.seqs = list(seqs)
        self._progress = asyncio.Event()
        self._done = asyncio.Event()

    @property
    def done(self) -> bool:
        return all(s.state in (SeqState.FINISHED, SeqState.ABORTED) for s in self.seqs)

    def notify(self) -> None:
        self._progress.set()

    def notify_finished(self) -> None:
        self._progress.set()
        if self.done:
            self._done.set()

    async def wait(self) -> None:
        """Wait for the next step that gave any of these sequences a token (or finished one)."""
        await self._progress.wait()
        self._progress.clear()

    async def wait_done(self) -> None:
        """Wait until every sequence finished."""
        await self._done.wait()


class SimEngine:
    """State of one simulated replica: its scheduler (whose block pool is the prefix cache),
    block hasher, tokenizer, KV-event publisher and engine-loop task.

    The loop task runs only while there is work: it is started by :meth:`submit` and ends when
    the last sequence finishes, so an idle replica holds no task. The publisher (with
    ``--kv-events-config``) binds its sockets here; :meth:`close` releases them.
    """

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.cost = StepCost.from_config(config)
        self.scheduler = Scheduler.from_config(config)
        seed = config.hash_seed or os.environ.get("PYTHONHASHSEED") or os.urandom(16).hex()
        self.hasher = BlockHasher(config.prefix_caching_hash_algo, seed, config.block_size)
        self.tokenize: Callable[[str], list[int]] = tokenize
        if config.tokenizer:
            from tokenizers import Tokenizer

            encoder = Tokenizer.from_file(config.tokenizer)
            encoder.no_truncation()  # a replica tokenizes the whole prompt
            encoder.no_padding()
            self.tokenize = lambda text: encoder.encode(text, add_special_tokens=False).ids
        events = config.kv_events
        self.publisher = KVEventPublisher(events) if events is not None else None
        self.observer: StepObserver | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> int:
        return len(self.scheduler.running)

    @property
    def waiting(self) -> int:
        return len(self.scheduler.waiting)

    @property
    def num_preemptions(self) -> int:
        return self.scheduler.num_preemptions

    def kv_cache_usage_perc(self) -> float:
        """Blocks held by running sequences over ``kv_blocks``, 0..1."""
        return self.scheduler.kv_usage()

    def prompt_hashes(self, tokens: Sequence[int], cache_salt: str | None) -> list[bytes] | None:
        """vLLM's block hashes of a prompt (None when prefix caching is off)."""
        if not self.config.enable_prefix_caching:
            return None
        return self.hasher.chain(tokens, cache_salt=cache_salt)

    def lookup_prefix(self, hashes: Sequence[bytes] | None, prompt_len: int) -> int:
        """Prompt tokens cached right now (a peek: the scheduler looks again when it
        schedules the sequence, and that is what the prefix-cache counters count)."""
        if not hashes:
            return 0
        limit = (prompt_len - 1) // self.config.block_size
        return self.scheduler.pool.peek(hashes[:limit]) * self.config.block_size

    def reset_prefix_cache(self) -> bool:
        """vLLM's ``POST /reset_prefix_cache``: False while a sequence holds blocks."""
        done = self.scheduler.pool.reset()
        self._flush_events()
        return done

    def close(self) -> None:
        """Stop the KV-event publisher (its sockets and thread)."""
        if self.publisher is not None:
            self.publisher.close()

    def _flush_events(self) -> None:
        events = self.scheduler.pool.drain()
        if events and self.publisher is not None:
            self.publisher.publish(KVEventBatch(ts=time.time(), events=events))

    def submit(self, seqs: Sequence[Seq]) -> Ticket:
        """Queue a request's sequences; their tokens come as the loop's steps end."""
        loop = asyncio.get_running_loop()
        ticket = Ticket(seqs)
        now = loop.time()
        for seq in ticket.seqs:
            seq.arrival = now
            seq.owner = ticket
            self.scheduler.add(seq)
        if self._task is None:
            name = f"sim-engine-{self.config.replica_name}"
            self._task = loop.create_task(self._run(), name=name)
        return ticket

    def abort(self, ticket: Ticket) -> None:
        """Drop a request's unfinished sequences (its client went away)."""
        for seq in ticket.seqs:
            if seq.state in (SeqState.WAITING, SeqState.RUNNING):
                self.scheduler.abort(seq)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        scheduler = self.scheduler
        speed = self.config.speed
        step_end = loop.time()
        steps = 0
        try:
            while scheduler.has_work:
                plan = scheduler.schedule(loop.time())
                seconds = speed * self.cost.seconds(
                    plan.prefill_tokens, plan.decode_seqs, plan.decode_context
                )
                if speed > 0:
                    # Pace steps back to back; when the CPU falls behind, do not catch up.
                    step_end = max(step_end, loop.time()) + seconds
                    await asyncio.sleep(max(step_end - loop.time(), 0.0))
                elif steps % _STEPS_PER_YIELD == 0:
                    await asyncio.sleep(0)  # no simulated time: let arrivals and writers in
                steps += 1
                now = loop.time()
                outcome = scheduler.commit(plan, now)
                if scheduler.pool.events:
                    self._flush_events()
                if self.observer is not None:
                    self.observer.observe_step(outcome, now)
                for seq, _ in outcome.emitted:
                    seq.owner.notify()
                for seq in outcome.finished:
                    seq.owner.notify_finished()
        finally:
            self._task = None
