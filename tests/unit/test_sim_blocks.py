"""The simulator's vLLM-style block pool: sharing, LRU over free blocks, events that agree
with residency, and cache_salt isolating tenants."""

from __future__ import annotations

from deja.kvcache.blockhash import BlockHasher
from deja.kvcache.wire import BlockRemoved, BlockStored
from sim.blocks import BlockPool
from sim.scheduler import Scheduler, Seq, SeqState

HASHER = BlockHasher("sha256", "0", 4)


def run(s: Scheduler, *seqs: Seq) -> None:
    for seq in seqs:
        s.add(seq)
    now = 0.0
    while s.has_work:
        s.commit(s.schedule(now), now + 1.0)
        now += 1.0


def seq(tokens: list[int], salt: str | None = None, out: int = 2) -> Seq:
    return Seq(
        prompt_len=len(tokens),
        max_output=out,
        hashes=HASHER.chain(tokens, cache_salt=salt),
        token_ids=tokens,
    )


def scheduler(blocks: int = 64) -> Scheduler:
    return Scheduler(
        max_num_seqs=4,
        max_num_batched_tokens=64,
        block_size=4,
        num_blocks=blocks,
        publish_events=True,
    )


def resident(s: Scheduler) -> set[bytes]:
    """The hashes the events say are resident, replayed in order."""
    held: set[bytes] = set()
    for event in s.pool.drain():
        if isinstance(event, BlockStored):
            held.update(h for h in event.block_hashes if isinstance(h, bytes))
        elif isinstance(event, BlockRemoved):
            held.difference_update(h for h in event.block_hashes if isinstance(h, bytes))
        else:
            held.clear()
    return held


def test_second_request_shares_the_cached_prefix() -> None:
    s = scheduler()
    prompt = list(range(20))
    first, second = seq(prompt), seq(prompt)
    run(s, first)
    run(s, second)
    assert first.cached == 0 and second.cached == 16  # 4 of 5 blocks (the last is recomputed)
    assert s.pool.queries == 40 and s.pool.hits == 16


def test_events_and_residency_agree_under_eviction() -> None:
    s = scheduler(blocks=12)
    held: set[bytes] = set()
    for i in range(8):  # 8 prompts of 5 blocks on 12 blocks: LRU evicts the old ones
        prompt = [1000 * i + t for t in range(20)]
        run(s, seq(prompt))
        events = s.pool.drain()
        for event in events:
            if isinstance(event, BlockStored):
                held.update(h for h in event.block_hashes if isinstance(h, bytes))
            elif isinstance(event, BlockRemoved):
                held.difference_update(h for h in event.block_hashes if isinstance(h, bytes))
        cached = {h for h in held if h in s.pool}
        assert cached == held
        assert len(held) == s.pool.cached_blocks() <= 12
    assert s.pool.evictions > 0


def test_free_blocks_are_evicted_least_recently_used_tail_first() -> None:
    pool = BlockPool(4, 4, publish=True)
    blocks = pool.allocate(3)
    assert blocks is not None
    hashes = [b"a", b"b", b"c"]
    pool.cache(blocks, hashes, list(range(12)), 0, 3)
    pool.release(blocks)
    pool.drain()
    taken = pool.allocate(2)  # the never-used block first, then the chain's tail
    assert taken is not None
    removed = [e.block_hashes for e in pool.drain() if isinstance(e, BlockRemoved)]
    assert removed == [[b"c"]]
    assert pool.peek([b"a", b"b", b"c"]) == 2


def test_two_tenants_with_the_same_system_prompt_never_share_blocks() -> None:
    s = scheduler()
    prompt = list(range(40))
    a1, b1, a2 = seq(prompt, "tenant-a"), seq(prompt, "tenant-b"), seq(prompt, "tenant-a")
    run(s, a1)
    held_a = resident(s)
    run(s, b1)
    held_b = resident(s)
    run(s, a2)
    assert b1.cached == 0, "tenant b reused tenant a's blocks"
    assert held_a and held_b and held_a.isdisjoint(held_b)
    assert a2.cached == 36  # the same tenant does hit


def test_preempted_sequence_finds_its_blocks_again() -> None:
    s = Scheduler(max_num_seqs=2, max_num_batched_tokens=64, block_size=4, num_blocks=8)
    long_a = seq(list(range(16)), out=12)
    long_b = seq(list(range(100, 116)), out=12)
    run(s, long_a, long_b)
    assert s.num_preemptions > 0
    assert long_a.state == SeqState.FINISHED and long_b.state == SeqState.FINISHED
