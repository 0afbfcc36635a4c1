"""Admission control: a replica takes at most its in-flight limit, and a request that finds every
replica serving its model full waits, first come first served, in one bounded queue.

Why wait here rather than in vLLM's own queue: a request waiting in the gateway goes to whichever
replica frees a slot first (vLLM's queue pins it to the replica it was sent to), requests are
admitted in arrival order across all replicas, and a request whose wait runs out is refused
with ``Retry-After`` instead of holding a connection behind work it will never see finish.

Room on a replica (``Admission.room``):

- breaker closed: its load (``Replica.load``) is below ``ReplicaPool.limit``;
- breaker half-open, or open past its cooldown: room for the one probe;
- breaker open and cooling down, or ``/health`` failing: none.

With routing by resident prefix (``kv_models``) there is one exception: a replica at its limit
that holds most of the request's prompt (its KV index: at least half of the prompt's blocks)
still has room for it, up to ``HOLDER_QUEUE`` x its limit more, so the request waits in that
replica's own queue, where its prefix is cached. In the gateway's queue it would go to whichever
replica frees a slot first, a full prefill there that evicts another prompt's blocks: measured
on a saturating closed loop under KV pressure (``bench/kv_routing.py``, simulated replicas),
that placement scattered the customers' contexts until half the requests found theirs held
nowhere. The router's bounded-load cap still applies to every placement.

A request is refused at once only when no healthy replica serves its model (503,
``NoHealthyReplicaError``) or the queue is full (503, ``QueueFullError``). Otherwise it waits —
for a slot, or for a breaker's probe: a half-open breaker never turns a request away while its
replica answers ``/health`` — until a slot is granted or its wait ends (429,
``OverloadedError``). Slots are handed out in ``release`` and whenever the pool reports a change
(a breaker closes, a health round, a reload), and a timer wakes the queue when the first open
breaker's cooldown ends.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections import deque
from dataclasses import dataclass

from deja.errors import NoHealthyReplicaError, OverloadedError, QueueFullError
from deja.observability.metrics import Metrics
from deja.upstream.pool import BreakerState, Replica
from deja.upstream.router import Route, Router

#: ``Retry-After`` is an estimate (mean slot hold time × queue position / capacity) capped here.
RETRY_AFTER_MAX_SECONDS = 60
#: Weight of the newest slot in the moving average of how long a slot is held.
HOLD_EWMA = 0.1
#: A full replica that holds most of a request's prompt (KV routing) takes it into its own
#: queue up to this share of its limit more (see the module docstring).
HOLDER_QUEUE = 1.0


@dataclass(slots=True, eq=False)
class Slot:
    """One admitted request's place on a replica; ``Admission.release`` gives it back."""

    replica: Replica
    taken_at: float
    #: This request is the probe of a half-open breaker.
    probe: bool = False
    released: bool = False


@dataclass(slots=True, eq=False)
class _Waiter:
    model: str
    prefix_key: str | None
    seq: int
    since: float
    future: asyncio.Future[tuple[Route, Slot]]
    queued: bool = True


class Admission:
    """The in-flight limits and the wait queue of one gateway process."""

    def __init__(
        self,
        router: Router,
        *,
        queue_size: int = 1024,
        max_wait: float | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.router = router
        self.pool = router.pool
        self.queue_size = queue_size
        self.max_wait = max_wait
        self.metrics = metrics or Metrics()
        #: Live waiters per model, oldest first (a granted or withdrawn waiter leaves at once).
        self._queues: dict[str, deque[_Waiter]] = {}
        self.waiting = 0
        self._seq = itertools.count()
        #: Moving average of the seconds a slot is held, for ``Retry-After``.
        self.hold_seconds = 1.0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf
        self.pool.on_change(self.wake)
        self.metrics.watch_admission(lambda: self.waiting)

    # --- slots ----------------------------------------------------------------------------
    def room(self, replica: Replica, now: float) -> bool:
        """May one more request go to ``replica`` now? (See the module docstring.)"""
        if not replica.healthy:
            return False
        if replica.breaker.state is BreakerState.CLOSED:
            return replica.load(now, self.pool.scrape_interval) < self.pool.limit(replica)
        return replica.breaker.available(now)

    def try_reserve(self, replica: Replica) -> Slot | None:
        """A slot on ``replica`` if it has room (a failover attempt), else None."""
        now = time.monotonic()
        return self._reserve(replica, now) if self.room(replica, now) else None

    def release(self, slot: Slot) -> None:
        """The request left ``slot.replica`` (answered, failed or cancelled); idempotent."""
        if slot.released:
            return
        slot.released = True
        replica = slot.replica
        replica.in_flight -= 1
        if slot.probe:
            replica.breaker.abandon()  # no-op once success/failure gave the verdict
        held = time.monotonic() - slot.taken_at
        self.hold_seconds += HOLD_EWMA * (held - self.hold_seconds)
        if self.waiting:
            self._dispatch()

    def _reserve(self, replica: Replica, now: float) -> Slot:
        probe = replica.breaker.state is not BreakerState.CLOSED
        replica.breaker.begin(now)
        replica.in_flight += 1
        return Slot(replica, now, probe)

    def _place(self, model: str, prefix_key: str | None, now: float) -> tuple[Route, Slot] | None:
        """Route among the replicas with room and reserve the first; None when all are full.
        Raises ``NoHealthyReplicaError`` when no healthy replica serves ``model`` at all."""
        serving = [r for r in self.pool.replicas if r.healthy and r.serves(model)]
        if not serving:
            raise NoHealthyReplicaError(f"no healthy replica serves model {model!r} right now")
        free = [r for r in serving if self.room(r, now)]
        if len(free) < len(serving):
            free += self._holding(serving, free, prefix_key, now)
        if not free:
            return None
        route = self.router.order(free, prefix_key, now)
        return route, self._reserve(route.order[0], now)

    def _holding(
        self, serving: list[Replica], free: list[Replica], prefix_key: str | None, now: float
    ) -> list[Replica]:
        """Full replicas that hold most of this request's prompt (KV routing) and still have
        room in their own queue: up to ``HOLDER_QUEUE`` x their limit more."""
        full = [
            r
            for r in serving
            if r not in free and r.healthy and r.breaker.state is BreakerState.CLOSED
        ]
        interval = self.pool.scrape_interval
        return [
            r
            for r in self.router.holders(full, prefix_key)
            if r.load(now, interval) < self.pool.limit(r) * (1.0 + HOLDER_QUEUE)
        ]

    # --- admission ------------------------------------------------------------------------
    async def admit(
        self, model: str, prefix_key: str | None, deadline: float
    ) -> tuple[Route, Slot]:
        """A route whose first replica holds a slot for this request, waiting (FIFO) while
        every replica serving ``model`` is full, at most until ``deadline`` (monotonic) or
        ``max_wait``."""
        now = time.monotonic()
        if model in self._queues:
            self._dispatch()  # room may have appeared without a release (a scrape, a timer)
        if model not in self._queues:  # nobody is ahead of this request
            placed = self._place(model, prefix_key, now)
            if placed is not None:
                return placed
        return await self._wait(model, prefix_key, deadline, now)

    async def _wait(
        self, model: str, prefix_key: str | None, deadline: float, now: float
    ) -> tuple[Route, Slot]:
        if self.waiting >= self.queue_size:
            self.metrics.count(self.metrics.admission_rejections, "queue_full")
            raise QueueFullError(
                f"every replica serving {model!r} is at its in-flight limit and the wait queue "
                f"is full ({self.waiting} requests)",
                retry_after=self.retry_after(model, now),
            )
        until = deadline if self.max_wait is None else min(deadline, now + self.max_wait)
        waiter = _Waiter(
            model, prefix_key, next(self._seq), now, asyncio.get_running_loop().create_future()
        )
        self._queues.setdefault(model, deque()).append(waiter)
        self.waiting += 1
        self._arm_timer(now)
        try:
            async with asyncio.timeout(until - now):
                placed = await waiter.future
        except TimeoutError:
            self._withdraw(waiter)
            self.metrics.count(self.metrics.admission_rejections, "wait_expired")
            raise OverloadedError(
                f"every replica serving {model!r} stayed at its in-flight limit for "
                f"{time.monotonic() - now:.1f} s",
                retry_after=self.retry_after(model, time.monotonic()),
            ) from None
        except BaseException:  # cancelled (client gone), or no healthy replica any more
            self._withdraw(waiter)
            raise
        self.metrics.admission_wait_seconds.observe(time.monotonic() - now)
        return placed

    def _withdraw(self, waiter: _Waiter) -> None:
        """A waiter leaves: out of its queue, or, granted a slot too late to use it, the slot
        goes back."""
        future = waiter.future
        if waiter.queued:
            self._unqueue(waiter, self._queues[waiter.model])
            future.cancel()
        elif future.done() and not future.cancelled() and future.exception() is None:
            self.release(future.result()[1])

    def _unqueue(self, waiter: _Waiter, queue: deque[_Waiter]) -> None:
        queue.remove(waiter)
        waiter.queued = False
        self.waiting -= 1
        if not queue:
            del self._queues[waiter.model]

    def wake(self) -> None:
        """The pool changed (``ReplicaPool.on_change``): grant what the change made room for."""
        if self.waiting:
            self._dispatch()

    def _dispatch(self) -> None:
        """Grant slots oldest waiter first, across models; a model whose head finds no room
        is skipped for the rest of this pass (nobody behind it could be placed either)."""
        now = time.monotonic()
        blocked: set[str] = set()
        while True:
            heads = [(q[0].seq, m) for m, q in self._queues.items() if m not in blocked]
            if not heads:
                break
            model = min(heads)[1]
            queue = self._queues[model]
            waiter = queue[0]
            if waiter.future.done():  # its task was cancelled and has not withdrawn it yet
                self._unqueue(waiter, queue)
                continue
            try:
                placed = self._place(model, waiter.prefix_key, now)
            except NoHealthyReplicaError as exc:
                self._fail(model, exc)
                continue
            if placed is None:
                blocked.add(model)
                continue
            self._unqueue(waiter, queue)
            waiter.future.set_result(placed)
        if self._queues:
            self._arm_timer(now)

    def _fail(self, model: str, exc: NoHealthyReplicaError) -> None:
        """No healthy replica serves ``model`` any more: its waiters get the 503 now."""
        for waiter in list(self._queues[model]):
            self._unqueue(waiter, self._queues[model])
            if not waiter.future.done():
                waiter.future.set_exception(NoHealthyReplicaError(exc.message))

    def _arm_timer(self, now: float) -> None:
        """Wake the queue when the first open breaker of a healthy replica may take a probe."""
        soonest = min(
            (
                r.breaker.open_until
                for r in self.pool.replicas
                if r.healthy and r.breaker.state is BreakerState.OPEN and r.breaker.open_until > now
            ),
            default=math.inf,
        )
        if soonest >= self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = soonest
        self._timer = asyncio.get_running_loop().call_later(soonest - now, self._on_timer)

    def _on_timer(self) -> None:
        self._timer, self._timer_at = None, math.inf
        self.wake()

    def retry_after(self, model: str, now: float) -> int:
        """Seconds until a slot is likely free for one more request for ``model``: the mean
        hold time × (queue position) / capacity; with no closed breaker, the first cooldown."""
        serving = [r for r in self.pool.replicas if r.healthy and r.serves(model)]
        capacity = sum(
            self.pool.limit(r) for r in serving if r.breaker.state is BreakerState.CLOSED
        )
        if capacity:
            seconds = self.hold_seconds * (len(self._queues.get(model, ())) + 1) / capacity
        else:
            seconds = min((r.breaker.open_until - now for r in serving), default=1.0)
        return int(min(RETRY_AFTER_MAX_SECONDS, max(1, math.ceil(seconds))))
