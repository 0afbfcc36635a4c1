"""The gateway's side of routing by resident prefix, without sockets: prompt block keys as the
replica computes them, the index and its states, the subscriber's sequence handling, the
scoring with the bounded-load cap, and the tenant salts."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from tokenizers import Tokenizer

from deja.kvcache.blockhash import external_key
from deja.kvcache.wire import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
    decode_batch,
    encode_batch,
)
from deja.upstream.kv.events import EventEndpoints, KVEvents, ReplicaSubscriber
from deja.upstream.kv.index import KVIndex, ReplicaIndex
from deja.upstream.kv.match import PromptBlocks
from deja.upstream.kv.route import KVRouting
from deja.upstream.pool import Replica
from deja.upstream.salt import request_salt, tenant_salt, with_cache_salt
from sim.engine import render_chat
from tests.kvsupport import HASHER, TOKENIZER, bare_tokenizer


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return bare_tokenizer()


def long_text(n: int, tag: str) -> str:
    return " ".join(f"{tag} word{i}, and (more) text." for i in range(n))


def test_block_keys_equal_the_simulators_whole_prompt_hashes(tokenizer: Tokenizer) -> None:
    blocks = PromptBlocks(Tokenizer.from_file(TOKENIZER), "sim", HASHER)
    messages = [
        {"role": "system", "content": long_text(60, "sys")},
        {"role": "user", "content": long_text(40, "q")},  # long: hashed too
    ]
    match = blocks.match("chat", {"messages": messages}, "t:a")
    assert match is not None
    ids = tokenizer.encode(render_chat(messages), add_special_tokens=False).ids
    expected = [external_key(h) for h in HASHER.chain(ids, cache_salt="t:a")]
    assert list(match.keys) == expected and match.prompt_tokens == len(ids)
    again = blocks.match("chat", {"messages": orjson.loads(orjson.dumps(messages))}, "t:a")
    assert again is not None and list(again.keys) == expected  # from the memo


def test_a_short_new_turn_is_not_tokenized_and_a_salt_changes_every_key() -> None:
    blocks = PromptBlocks(Tokenizer.from_file(TOKENIZER), "sim", HASHER)
    system = {"role": "system", "content": long_text(60, "sys")}
    one = blocks.match("chat", {"messages": [system, {"role": "user", "content": "hi"}]}, "t:a")
    two = blocks.match("chat", {"messages": [system, {"role": "user", "content": "yo"}]}, "t:a")
    other = blocks.match("chat", {"messages": [system, {"role": "user", "content": "hi"}]}, "t:b")
    assert one is not None and two is not None and other is not None
    assert list(one.keys) == list(two.keys)  # the system prompt's full blocks only
    assert set(one.keys).isdisjoint(other.keys)


def test_memo_signature_collisions_are_caught() -> None:
    blocks = PromptBlocks(Tokenizer.from_file(TOKENIZER), "sim", HASHER)
    head, tail = "a " * 40, " z" * 40
    first = {"role": "system", "content": head + "middle one " * 30 + tail}
    second = {"role": "system", "content": head + "middle two " * 30 + tail}  # same signature
    user = {"role": "user", "content": "q"}
    a = blocks.match("chat", {"messages": [first, user]}, None)
    b = blocks.match("chat", {"messages": [second, user]}, None)
    assert a is not None and b is not None and list(a.keys) != list(b.keys)


def test_chatml_declines_what_it_cannot_render() -> None:
    blocks = PromptBlocks(Tokenizer.from_file(TOKENIZER), "chatml", HASHER)
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "x"}], "tools": [{"t": 1}]}
    assert blocks.match("chat", body, None) is None
    image = [{"type": "image_url", "image_url": {"url": "data:"}}]
    assert blocks.match("chat", {"messages": [{"role": "user", "content": image}]}, None) is None
    assert blocks.match("completion", {"prompt": "a string"}, None) is None
    ids = blocks.match("completion", {"prompt": list(range(40))}, None)
    assert ids is not None and len(ids.keys) == 2


def test_index_match_is_the_resident_prefix() -> None:
    index = ReplicaIndex("r", state="live")
    index.blocks.update([1, 2, 3])
    assert index.match([1, 2, 3, 4, 5]) == 3
    assert index.match([9, 1, 2]) == 0
    assert index.match([1, 2, 3]) == 3
    index.mark_stale()
    assert index.match([1, 2, 3]) == 0  # not trusted
    batch = decode_batch(encode_batch(KVEventBatch(ts=0.0, events=[AllBlocksCleared()])))
    index.apply(index.last_seq + 1, batch, 0.0)
    assert index.state == "live" and not index.blocks


def stored(*hashes: bytes) -> bytes:
    event = BlockStored(
        block_hashes=list(hashes),
        parent_block_hash=None,
        token_ids=[0] * 16 * len(hashes),
        block_size=16,
        lora_id=None,
        medium="GPU",
    )
    return encode_batch(KVEventBatch(ts=0.0, events=[event]))


def removed(*hashes: bytes) -> bytes:
    event = BlockRemoved(block_hashes=list(hashes), medium="GPU")
    return encode_batch(KVEventBatch(ts=0.0, events=[event]))


def subscriber(replay: str | None = None) -> tuple[ReplicaSubscriber, list[tuple[str, str]]]:
    drops: list[tuple[str, str]] = []
    index = ReplicaIndex("http://r")
    sub = ReplicaSubscriber(
        None,  # type: ignore[arg-type]  # no sockets without a replay endpoint
        index,
        EventEndpoints("tcp://unused", replay),
        lambda replica, reason: drops.append((replica, reason)),
    )
    return sub, drops


async def test_in_order_batches_apply_and_an_unreplayable_gap_drops() -> None:
    sub, drops = subscriber()
    key = external_key(b"a" * 32)
    await sub.handle(0, stored(b"a" * 32, b"b" * 32))
    assert sub.index.state == "live" and key in sub.index.blocks
    await sub.handle(1, removed(b"b" * 32))
    assert len(sub.index.blocks) == 1
    await sub.handle(5, stored(b"c" * 32))  # 2..4 lost, no replay endpoint
    assert drops == [("http://r", "events")]
    assert sub.index.state == "partial" and sub.index.blocks == {external_key(b"c" * 32)}
    await sub.handle(0, stored(b"d" * 32))  # the publisher restarted
    assert drops[-1] == ("http://r", "publisher")
    assert sub.index.state == "live" and sub.index.blocks == {external_key(b"d" * 32)}
    await sub.handle(1, b"\xc1garbage")
    assert drops[-1] == ("http://r", "undecodable") and sub.index.last_seq == 1


def test_scrape_check_marks_silence_stale_and_catches_restarts() -> None:
    index = KVIndex()
    drops: list[tuple[str, str]] = []
    events = KVEvents(index, lambda url: None, on_drop=lambda r, why: drops.append((r, why)))
    replica = index.replica("http://r")
    replica.state = "live"
    replica.blocks.add(7)
    events.check("http://r", healthy=True, queries=100, hits=0)
    events.check("http://r", healthy=True, queries=3000, hits=0)  # served, no batch
    assert replica.state == "stale" and drops[-1] == ("http://r", "stale")
    events.check("http://r", healthy=True, queries=10, hits=0)  # counters went back
    assert drops[-1] == ("http://r", "replica") and not replica.blocks
    events.check("http://r", healthy=False, queries=10, hits=0)
    assert drops[-1] == ("http://r", "replica")
    asyncio.run(events.close())


def routing(*resident: set[int]) -> tuple[KVRouting, list[Replica]]:
    kv = KVRouting({}, lambda url: None)
    replicas = [Replica(f"http://r{i}") for i in range(len(resident))]
    for replica, blocks in zip(replicas, resident, strict=True):
        index = kv.index.replica(replica.url)
        index.state = "live"
        index.blocks.update(blocks)
    return kv, replicas


def press(kv: KVRouting, replica: Replica) -> None:
    """Put the pool under KV pressure: ``replica`` evicted with 8 blocks resident, and 4
    distinct blocks were routed to it lately (half its cache)."""
    kv.index.replica(replica.url).capacity = 8
    kv.demand.add(replica.url, [101, 102, 103, 104], 0.0)


def match_of(keys: list[int], tokens: int) -> Any:
    from array import array

    from deja.upstream.kv.match import BlockMatch

    return BlockMatch(array("Q", keys), tokens, 16)


def test_the_replica_holding_the_prefix_wins_until_it_reaches_its_bound() -> None:
    kv, (r0, r1, r2) = routing({1, 2, 3, 4}, {1}, set())
    blocks = match_of([1, 2, 3, 4, 5], 80)
    order, tokens, why = kv.order([r0, r1, r2], blocks, {}, 0.25, 3.0, 0.0)
    assert order[0] is r0 and tokens == 64 and why == "resident"
    # r0 at its bounded-load capacity: ceil(1.25 * (T + 1) / 3) with T = 8 -> 4
    loads = {r0.url: 4, r1.url: 2, r2.url: 2}
    order, tokens, why = kv.order([r0, r1, r2], blocks, loads, 0.25, 3.0, 100.0)
    assert order[0] is r1 and order[-1] is r0 and tokens == 16


def test_a_holder_batches_a_second_request_at_low_load_up_to_the_floor() -> None:
    kv, (r0, r1, r2, r3) = routing({1, 2, 3}, set(), set(), set())
    blocks = match_of([1, 2, 3], 48)
    loads = {r0.url: 1}  # T = 1: ceil(1.25 * 2 / 4) = 1, r0 is at the bare bound
    order, _, why = kv.order([r0, r1, r2, r3], blocks, loads, 0.25, 3.0, 0.0)
    assert order[0] is not r0 and why == "spill"
    kv.min_capacity = 2
    order, _, why = kv.order([r0, r1, r2, r3], blocks, loads, 0.25, 3.0, 1.0)
    # no KV pressure: copies are cheap, so no floor (it follows the first spill's placement)
    assert order[0] is not r0 and why == "home"
    press(kv, r3)
    order, tokens, why = kv.order([r0, r1, r2, r3], blocks, loads, 0.25, 3.0, 1.0)
    assert order[0] is r0 and why == "resident" and tokens == 48
    # a replica holding under half of the prompt (a shared system prompt) gets no floor
    small = match_of([1, 2, 3, 4, 5, 6, 7], 112)
    order, _, _ = kv.order([r0, r1, r2, r3], small, {r0.url: 1}, 0.25, 3.0, 1.5)
    assert order[0] is not r0
    # the floor is a floor: at 2 in flight r0 spills again, and it never lifts a non-holder
    loads = {r0.url: 2, r1.url: 1}
    order, _, why = kv.order([r0, r1, r2, r3], blocks, loads, 0.25, 3.0, 2.0)
    assert order[0] in (r2, r3) and why == "spill"


def test_a_prefix_held_nowhere_goes_to_the_least_loaded_then_stays_there() -> None:
    kv, (r0, r1, r2) = routing(set(), set(), set())
    new = match_of([9, 10, 11], 48)
    ring = (r2.url, r0.url, r1.url)
    order, tokens, why = kv.order([r0, r1, r2], new, {r2.url: 1}, 0.25, 3.0, 0.0, ring)
    assert order[0] is r0 and why == "least_loaded" and tokens == 0  # r2 (home) is busier
    # before r0's events arrive, the same prefix follows its pending placement
    order, _, why = kv.order([r0, r1, r2], new, {r0.url: 1}, 1.0, 3.0, 0.5, ring)
    assert order[0] is r0 and why == "home"
    # much later, nothing pending: ring order breaks the tie among idle replicas
    order, _, _ = kv.order([r0, r1, r2], match_of([7], 16), {}, 0.25, 3.0, 100.0, ring)
    assert order[0] is r2


def test_a_spill_off_a_full_holder_follows_the_ring_not_the_score() -> None:
    kv, (r0, r1, r2) = routing({1, 2, 3}, set(), set())
    ring = (r0.url, r1.url, r2.url)
    # r0 holds it but is at its bound ceil(1.25 * 2 / 3) = 1; r2 would win on score by a hair
    # (r1's KV use), but the ring's successor r1 takes the spill, as the prefix policy would,
    # so repeated spills build one second copy instead of a full prefill on each replica
    r1.metrics.kv_cache_usage = 0.2
    order, tokens, why = kv.order([r0, r1, r2], match_of([1, 2, 3], 48), {r0.url: 1}, 0.25,
                                  3.0, 0.0, ring)  # fmt: skip
    assert order[0] is r1 and why == "spill" and tokens == 0 and order[-1] is r0
    # but a successor clearly busier than another replica with room is passed over
    kv2, (a0, a1, a2) = routing({1, 2, 3}, set(), set())
    loads = {a0.url: 4, a1.url: 2}  # T = 6: cap ceil(1.25 * 7 / 3) = 3
    order, _, why = kv2.order([a0, a1, a2], match_of([1, 2, 3], 48), loads, 0.25, 3.0, 0.0,
                              (a0.url, a1.url, a2.url))  # fmt: skip
    assert order[0] is a2 and why == "spill"


def test_a_hit_avoids_a_replica_that_just_took_a_long_prefill() -> None:
    kv, (r0, r1) = routing({1, 2}, {1, 2})
    long_miss = match_of([5, 6, 7, 8, 9, 10, 11, 12], 128)
    kv.order([r0, r1], long_miss, {}, 0.25, 3.0, 0.0, (r0.url, r1.url))  # r0: 128 uncached
    order, _, why = kv.order([r0, r1], match_of([1, 2], 40), {}, 0.25, 3.0, 0.1)
    assert order[0] is r1 and why == "resident"


def test_load_outweighs_a_small_resident_share() -> None:
    kv, (r0, r1) = routing({1}, set())
    blocks = match_of([1, 2, 3, 4, 5, 6, 7, 8], 128)  # r0 holds 1 of 8 blocks
    loads = {r0.url: 3, r1.url: 0}
    order, _, _ = kv.order([r0, r1], blocks, loads, 1.0, 3.0, 0.0)
    assert order[0] is r1


def test_salts() -> None:
    assert request_salt("a", False, None) == tenant_salt("a") != tenant_salt("b")
    assert request_salt("a", True, None) is None
    assert request_salt("a", True, "mine") == "c:mine"
    assert request_salt("a", False, "mine") == f"{tenant_salt('a')}|c:mine"
    raw = b'{"model":"m","messages":[]}'
    assert orjson.loads(with_cache_salt(raw, "t:x")) == {
        "cache_salt": "t:x",
        "model": "m",
        "messages": [],
    }
    spoofed = b'{"model":"m","cache_salt":"t:other"}'
    assert orjson.loads(with_cache_salt(spoofed, "t:x"))["cache_salt"] == "t:x"
    assert "cache_salt" not in orjson.loads(with_cache_salt(spoofed, None))
    assert orjson.loads(with_cache_salt(b" {}", "s")) == {"cache_salt": "s"}


def test_a_holder_under_pressure_queues_a_batch_past_its_max_num_seqs_then_spills() -> None:
    kv, (r0, r1, r2, r3) = routing({1, 2, 3}, set(), set(), set())
    blocks = match_of([1, 2, 3], 48)
    loads = {r0.url: 3, r1.url: 1}  # T = 4: ceil(1.25 * 5 / 4) = 2, r0 is past the bound
    order, _, why = kv.order([r0, r1, r2, r3], blocks, loads, 0.25, 3.0, 0.0)
    assert order[0] is not r0 and why == "spill"
    r0.max_num_seqs = 2  # its batch, from the scrape: under KV pressure it runs two and
    press(kv, r1)  # queues two more, where its blocks are, before a spill's full prefill
    order, tokens, why = kv.order([r0, r1, r2, r3], blocks, loads, 0.25, 3.0, 1.0)
    assert order[0] is r0 and why == "resident" and tokens == 48
    r0.max_num_seqs = None  # not learned yet: a scrape that found it running 2 is enough
    from deja.upstream.pool import ReplicaMetrics

    r0.learn_capacity(ReplicaMetrics(running=2.0))
    assert r0.running_seen == 2 and r0.max_num_seqs is None
    order, _, why = kv.order([r0, r1, r2, r3], blocks, loads, 0.25, 3.0, 1.5)
    assert order[0] is r0 and why == "resident"
    loads[r0.url] = 4  # a full batch and a full queue: the bounded load holds again
    order, _, why = kv.order([r0, r1, r2, r3], blocks, loads, 0.25, 3.0, 2.0)
    assert order[0] is not r0 and why == "spill"
    # holding under half of the prompt (a shared system prompt), its batch lifts nothing
    small = match_of([1, 2, 3, 4, 5, 6, 7], 112)
    order, _, _ = kv.order([r0, r1, r2, r3], small, {r0.url: 3, r1.url: 1}, 0.25, 3.0, 3.0)
    assert order[0] is not r0


def test_a_prompt_held_nowhere_goes_where_the_kv_demand_is_least_among_the_near_best() -> None:
    kv, (r0, r1, r2) = routing(set(), set(), set())
    ring = (r0.url, r1.url, r2.url)
    # two customers' contexts were placed on r0 and one on r1 (their blocks since evicted)
    kv.demand.add(r0.url, range(100, 300), 0.0)
    kv.demand.add(r1.url, range(300, 400), 0.0)
    order, _, why = kv.order([r0, r1, r2], match_of([1, 2, 3], 48), {}, 0.25, 3.0, 1.0, ring)
    assert order[0] is r2 and why == "least_loaded"  # not the ring's r0: it has the most demand
    # right after, r2's fresh prefill backlog puts it below the margin: r1 (less demand than r0)
    order, _, _ = kv.order([r0, r1, r2], match_of([4, 5], 32), {}, 0.25, 3.0, 1.5, ring)
    assert order[0] is r1
    # once that has drained, demand decides again: r2 (3 blocks) before r1 (100 + 2)
    order, _, _ = kv.order([r0, r1, r2], match_of([6], 16), {}, 0.25, 3.0, 9.0, ring)
    assert order[0] is r2
    # and load comes first: a replica at its bounded load is passed over whatever its demand
    order, _, _ = kv.order([r0, r1, r2], match_of([7], 16), {r2.url: 2}, 0.25, 3.0, 19.0, ring)
    assert order[0] is r1


def test_demand_counts_distinct_blocks_over_two_generations() -> None:
    from deja.upstream.kv.demand import Demand

    demand = Demand(generation_s=10.0, max_keys=1000)
    demand.add("a", range(50), 0.0)
    demand.add("a", range(25, 75), 5.0)  # overlapping keys count once
    assert demand.of("a") == 75 and demand.of("b") == 0
    demand.add("a", range(10), 12.0)  # a new generation: the previous one still counts
    assert demand.of("a") == 75
    demand.add("a", range(5), 23.0)  # two generations on, the old keys are gone
    assert demand.of("a") == 10
    demand.add("a", range(2000), 24.0)  # past max_keys a generation ends early
    assert demand.of("a") == 2000
    demand.add("a", range(3), 24.5)  # the full generation became the previous one
    assert demand.of("a") == 2000
    demand.forget(["b"])
    assert demand.of("a") == 0


def test_a_holder_of_most_of_the_prompt_keeps_it_below_its_bound_whatever_its_backlog() -> None:
    kv, (r0, r1, r2) = routing({1, 2, 3, 4}, set(), set())
    # r0 just took a long prefill (its backlog) and runs a request; r1 and r2 are idle
    kv.order([r0, r1, r2], match_of([20, 21, 22, 23, 24, 25, 26, 27], 128), {}, 0.25, 3.0, 0.0)
    loads = {r0.url: 1}  # T = 1, epsilon 1: capacity ceil(2 * 2 / 3) = 2, room for one more
    order, tokens, why = kv.order([r0, r1, r2], match_of([1, 2, 3, 4], 70), loads, 1.0, 3.0, 0.1)
    assert order[0] is r0 and why == "resident" and tokens == 64  # on score alone, r1 or r2
    # at its bounded load it spills: T = 3, epsilon 0.25: ceil(1.25 * 4 / 3) = 2 < 3 in flight
    loads = {r0.url: 3}
    order, _, why = kv.order([r0, r1, r2], match_of([1, 2, 3, 4], 70), loads, 0.25, 3.0, 0.2)
    assert order[0] is not r0 and why == "spill"


def test_kv_pressure_is_demand_against_a_cache_size_learned_from_evictions() -> None:
    from deja.kvcache.wire import DecodedBatch, Removed, Stored

    kv, (r0, r1) = routing(set(), set())
    index = kv.index.replica(r0.url)
    stored = Stored([bytes(31) + bytes([i]) for i in range(6)], None, 96, 16, None)
    index.apply(0, DecodedBatch(1.0, [stored], None), 1.0)
    assert index.capacity is None and not kv.under_pressure([r0, r1])  # never evicted
    kv.demand.add(r0.url, range(100, 200), 1.0)
    assert not kv.under_pressure([r0, r1])  # a cache that never evicted: no pressure at all
    index.apply(1, DecodedBatch(2.0, [Removed([bytes(32)])], None), 2.0)
    assert index.capacity == 6 and len(index.blocks) == 5
    assert kv.under_pressure([r0, r1])  # 100 blocks asked of a 6-block cache
    assert not kv.under_pressure([r1])
    assert index.describe()["capacity_blocks"] == 6
    # a scraped size (vllm:cache_config_info's num_gpu_blocks) is known before any eviction
    kv.demand.add(r1.url, range(300, 340), 3.0)
    r1.metrics.num_gpu_blocks = 100
    assert not kv.under_pressure([r1])  # 40 of 100
    r1.metrics.num_gpu_blocks = 80
    assert kv.under_pressure([r1])  # 40 of 80: half
