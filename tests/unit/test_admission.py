"""In-flight limits, the wait queue and breakers as admission sees them (no I/O: a pool of
replica objects, the real router and admission, on the test's event loop)."""

from __future__ import annotations

import asyncio
import time

import pytest

from config.replicas import parse_replica_spec
from deja.errors import NoHealthyReplicaError, OverloadedError, QueueFullError
from deja.upstream.admission import Admission, Slot
from deja.upstream.health import parse_vllm_metrics
from deja.upstream.pool import UNLEARNED_MAX_INFLIGHT, BreakerState, ReplicaPool
from deja.upstream.router import Route, Router

A, B = "http://10.0.0.1:8000", "http://10.0.0.2:8000"


def admission(
    specs: list[str], *, max_inflight: int | None = 1, queue_size: int = 8, cooldown: float = 5.0
) -> Admission:
    pool = ReplicaPool(specs, cooldown=cooldown, scrape_interval=5.0, max_inflight=max_inflight)
    return Admission(Router(pool, "least_loaded", 0.25), queue_size=queue_size)


def soon(seconds: float = 5.0) -> float:
    return time.monotonic() + seconds


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


def test_replica_spec_parameters() -> None:
    spec = parse_replica_spec("http://a:1/;weight=2;max_inflight=8")
    assert (spec.url, spec.weight, spec.max_inflight) == ("http://a:1", 2.0, 8)
    for bad in ("http://a:1;max_inflight=0", "http://a:1;max_inflight=x"):
        with pytest.raises(ValueError):
            parse_replica_spec(bad)


def test_limit_precedence_and_learning_from_running_and_waiting() -> None:
    pool = ReplicaPool([A + ";max_inflight=3", B], cooldown=5.0, scrape_interval=5.0)
    a, b = pool.replicas
    assert pool.limit(a) == 3  # the spec wins
    assert pool.limit(b) == UNLEARNED_MAX_INFLIGHT
    busy = "vllm:num_requests_running 16\nvllm:num_requests_waiting 0\n"
    b.learn_capacity(parse_vllm_metrics(busy, 1.0))
    assert b.max_num_seqs is None  # nobody waited: 16 running says nothing about the limit
    queued = "vllm:num_requests_running 16\nvllm:num_requests_waiting 7\n"
    b.learn_capacity(parse_vllm_metrics(queued, 2.0))
    assert b.max_num_seqs == 16 and pool.limit(b) == 16 + 2  # 1/8 headroom to learn upwards
    b.learn_capacity(parse_vllm_metrics("vllm:num_requests_running 12\n", 3.0))
    assert b.max_num_seqs == 16  # later scrapes only raise it
    b.learn_capacity(parse_vllm_metrics("vllm:num_requests_running 18\n", 4.0))
    assert b.max_num_seqs == 18 + 3  # all it was sent, nothing waiting: it had room
    exported = (
        'vllm:cache_config_info{block_size="16",num_gpu_blocks="4096"} 1.0\n'
        'vllm:scheduler_config_info{max_model_len="8192",max_num_seqs="64"} 1.0\n'
    )
    metrics = parse_vllm_metrics(exported, 5.0)
    assert metrics.max_num_seqs == 64
    b.learn_capacity(metrics)
    assert pool.limit(b) == 64  # exported: taken as is
    assert parse_vllm_metrics(exported.splitlines()[0], 6.0).max_num_seqs is None
    fixed = ReplicaPool([A], cooldown=5.0, scrape_interval=5.0, max_inflight=5)
    fixed.replicas[0].learn_capacity(metrics)
    assert fixed.limit(fixed.replicas[0]) == 5  # the setting wins over what is learned


def test_a_learned_capacity_rises_again_on_evidence() -> None:
    """Issue 19 (8): a replica with max-num-seqs 16, first learned as 6 (requests waited while
    only 6 ran), under churn: each scrape finds one of the gateway's slots momentarily free
    and nothing waiting. The learned value must climb to the replica's real 16 within a few
    scrapes, and not run away past it once the replica queues."""
    pool = ReplicaPool([A], cooldown=5.0, scrape_interval=5.0)
    (r,) = pool.replicas
    r.learn_capacity(
        parse_vllm_metrics("vllm:num_requests_running 6\nvllm:num_requests_waiting 3\n", 1)
    )
    assert r.max_num_seqs == 6
    seen = []
    for i in range(12):
        sent = pool.limit(r) - 1  # churn: one slot between a stream's end and the next
        running, waiting = min(sent, 16), max(0, sent - 16)
        text = f"vllm:num_requests_running {running}\nvllm:num_requests_waiting {waiting}\n"
        r.learn_capacity(parse_vllm_metrics(text, 2.0 + i))
        seen.append(r.max_num_seqs)
    assert seen[7] is not None and seen[7] >= 16, seen
    assert max(s or 0 for s in seen) <= 16 + 2 + 1, seen  # at most one probe step past it
    idle = parse_vllm_metrics("vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n", 20)
    before = r.max_num_seqs
    r.learn_capacity(idle)
    assert r.max_num_seqs == before  # an idle replica is no evidence either way


async def test_saturated_requests_wait_in_arrival_order() -> None:
    adm = admission([A])
    _, first = await adm.admit("m", None, soon())
    order: list[int] = []
    slots: list[Slot] = []

    async def wait(i: int) -> None:
        _, slot = await adm.admit("m", None, soon())
        order.append(i)
        slots.append(slot)

    waiters = [asyncio.create_task(wait(i)) for i in range(3)]
    await settle()
    assert adm.waiting == 3 and not order
    adm.release(first)
    await settle()
    assert order == [0] and adm.waiting == 2
    # a newcomer does not overtake the queue even when it arrives right after a release
    adm.release(slots[0])
    late = asyncio.create_task(wait(99))
    await settle()
    assert order == [0, 1]
    for _ in range(2):
        adm.release(slots[-1])
        await settle()
    assert order == [0, 1, 2, 99]
    await asyncio.gather(*waiters, late)
    adm.release(slots[-1])
    assert adm.pool.replicas[0].in_flight == 0 and adm.waiting == 0


async def test_full_queue_refuses_at_once_and_an_expired_wait_is_429() -> None:
    adm = admission([A], queue_size=1)
    _, held = await adm.admit("m", None, soon())
    queued = asyncio.create_task(adm.admit("m", None, soon(0.2)))
    await settle()
    started = time.perf_counter()
    with pytest.raises(QueueFullError) as full:
        await adm.admit("m", None, soon())
    assert time.perf_counter() - started < 0.01 and full.value.retry_after >= 1
    with pytest.raises(OverloadedError) as expired:
        await queued
    assert not isinstance(expired.value, QueueFullError) and expired.value.retry_after >= 1
    assert adm.waiting == 0
    adm.release(held)


async def test_a_cancelled_waiter_leaves_the_queue_and_a_late_grant_goes_back() -> None:
    adm = admission([A])
    _, held = await adm.admit("m", None, soon())
    gone = asyncio.create_task(adm.admit("m", None, soon()))
    await settle()
    gone.cancel()
    await settle()
    assert adm.waiting == 0
    adm.release(held)
    replica = adm.pool.replicas[0]
    assert replica.in_flight == 0
    # granted and cancelled in the same loop turn: the slot must come back
    _, held = await adm.admit("m", None, soon())
    late = asyncio.create_task(adm.admit("m", None, soon()))
    await settle()
    adm.release(held)  # grants the waiter's future ...
    late.cancel()  # ... whose task is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await late
    assert replica.in_flight == 0


async def test_half_open_breaker_makes_requests_wait_for_its_probe_not_fail() -> None:
    adm = admission([A], max_inflight=4, cooldown=0.05)
    pool = adm.pool
    replica = pool.replicas[0]
    pool.record_failure(replica, "HTTP 503", immediate=True)
    assert replica.breaker.state is BreakerState.OPEN
    results: list[tuple[Route, Slot]] = []

    async def ask() -> None:
        results.append(await adm.admit("m", None, soon()))

    tasks = [asyncio.create_task(ask()) for _ in range(5)]
    await asyncio.sleep(0.15)  # past the cooldown: the timer lets exactly one probe through
    assert len(results) == 1 and results[0][1].probe and adm.waiting == 4
    assert replica.breaker.state is BreakerState.HALF_OPEN
    pool.record_success(replica)  # the probe answered: the breaker closes, the rest go
    await settle()
    assert len(results) == 4 and adm.waiting == 1  # the limit (4) holds after closing
    for _, slot in results:
        adm.release(slot)
    await asyncio.gather(*tasks)
    adm.release(results[-1][1])
    assert replica.in_flight == 0


async def test_a_probe_that_ends_without_a_verdict_lets_the_next_request_probe() -> None:
    adm = admission([A], cooldown=0.0)
    replica = adm.pool.replicas[0]
    adm.pool.record_failure(replica, "refused", immediate=True)
    _, probe = await adm.admit("m", None, soon())
    assert probe.probe and replica.breaker.probing
    adm.release(probe)  # cancelled: neither success nor failure
    _, again = await adm.admit("m", None, soon(0.5))
    assert again.probe
    adm.release(again)


async def test_only_a_replica_with_room_is_chosen_and_no_healthy_replica_is_503() -> None:
    adm = admission([A, B])
    _, on_a = await adm.admit("m", None, soon())
    route, on_b = await adm.admit("m", None, soon())
    assert {on_a.replica.url, on_b.replica.url} == {A, B}
    assert [r.url for r in route.order] == [on_b.replica.url]  # full replicas are not offered
    waiting = asyncio.create_task(adm.admit("m", None, soon()))
    await settle()
    for r in adm.pool.replicas:
        r.healthy = False
    adm.pool.changed()  # a health round found both down: the waiter gets its 503 now
    with pytest.raises(NoHealthyReplicaError):
        await waiting
    with pytest.raises(NoHealthyReplicaError):
        await adm.admit("m", None, soon())


async def test_a_full_replica_holding_the_prompt_queues_it_instead_of_a_prefill_elsewhere() -> None:
    from array import array

    from deja.upstream.kv.match import BlockMatch
    from deja.upstream.kv.route import KVRouting, RouteKey

    pool = ReplicaPool([A, B], cooldown=5.0, scrape_interval=5.0, max_inflight=2)
    router = Router(pool, "prefix", 0.25)
    router.kv = KVRouting({}, lambda url: None, min_capacity=4)
    index = router.kv.index.replica(A)
    index.state = "live"
    index.blocks.update({1, 2, 3, 4})
    index.capacity = 8  # A has evicted, and the blocks routed to it fill half its cache:
    router.kv.demand.add(A, [1, 2, 3, 4], time.monotonic())  # under KV pressure
    adm = Admission(router, queue_size=8)
    held = RouteKey("k", BlockMatch(array("Q", [1, 2, 3, 4]), 70, 16), None)
    other = RouteKey("j", BlockMatch(array("Q", [9, 10]), 40, 16), None)
    slots = [(await adm.admit("m", held, soon()))[1] for _ in range(2)]
    assert all(s.replica.url == A for s in slots)  # A at its limit of 2
    # A holds the prompt: it takes it into its own queue (up to 2 x its limit), not B
    route, third = await adm.admit("m", held, soon())
    assert third.replica.url == A and route.reason == "resident"
    # a prompt A does not hold goes to B, which has room, as before
    _, elsewhere = await adm.admit("m", other, soon())
    assert elsewhere.replica.url == B
    _, fourth = await adm.admit("m", held, soon())
    assert fourth.replica.url == A  # 4 in flight: twice its limit
    _, spilled = await adm.admit("m", held, soon())
    assert spilled.replica.url == B  # past that, the ordinary rule: any replica with room
    waiting = asyncio.create_task(adm.admit("m", held, soon()))
    await settle()
    assert adm.waiting == 1  # both full, A past its queue: the gateway's queue
    adm.release(fourth)
    route, granted = await waiting
    assert granted.replica.url == A
