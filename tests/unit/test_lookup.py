"""Steps 2-3 (middleware/lookup.py) on a real in-process exact store: the ``Lookup`` record,
and ``Lookup.miss``, the one place that decides whether a miss's answer may be stored."""

from __future__ import annotations

import time

import orjson

from deja.cache.entry import CachedAnswer
from deja.cache.exact.aliases import AliasedStore
from deja.cache.exact.memory import MemoryExactStore
from deja.errors import CacheUnavailableError
from deja.observability.metrics import Metrics
from deja.observability.tracing import Tracing
from deja.request import CachePolicy, GatewayRequest, Outcome
from middleware.lookup import Lookup, LookupStep
from middleware.validate import validate


def request(*, read: bool = True, write: bool = True, n: int = 1) -> GatewayRequest:
    body = {"model": "m", "messages": [{"role": "user", "content": "hello"}], "n": n}
    policy = CachePolicy(read=read, write=write)
    return validate("chat", orjson.dumps(body), tenant="t", policy=policy)


def answer(entry_id: str) -> CachedAnswer:
    return CachedAnswer(
        entry_id=entry_id,
        endpoint="chat",
        model="m",
        finish_reason="stop",
        created_at=time.time(),
        message={"role": "assistant", "content": "hi"},
    )


class BrokenStore(MemoryExactStore):
    async def get(self, key: str) -> CachedAnswer | None:
        raise CacheUnavailableError("down")


def step(store: MemoryExactStore | None) -> LookupStep:
    aliased = AliasedStore(store) if store is not None else None
    return LookupStep(aliased, Metrics(), Tracing(None, batch=False))


def test_a_miss_is_storable_only_with_an_entry_id_and_a_writing_policy() -> None:
    assert Lookup.miss(Outcome.MISS, "e", request()).storable
    assert not Lookup.miss(Outcome.MISS, "e", request(write=False)).storable
    assert not Lookup.miss(Outcome.MISS, None, request()).storable
    assert not Lookup(Outcome.BYPASS, None, bypass="temporal").storable  # default: never


async def test_the_exact_step_hits_or_hands_a_storable_miss_on() -> None:
    store = MemoryExactStore(max_entries=16, max_bytes=1 << 20)
    lookups = step(store)
    req = request()
    prepared = lookups.prepare(req)
    assert prepared.entry_id is not None and prepared.bypass is None
    miss = await lookups.lookup(req, prepared)
    assert miss.outcome is Outcome.MISS and miss.storable and miss.answer is None
    await store.set(prepared.entry_id, answer(prepared.entry_id), 60)
    hit = await lookups.lookup(req, prepared)
    assert hit.outcome is Outcome.EXACT and hit.answer is not None and not hit.storable
    unread = await lookups.lookup(request(read=False), prepared)  # no-cache: skip, still store
    assert unread.outcome is Outcome.MISS and unread.answer is None and unread.storable


async def test_what_may_not_be_stored_says_so() -> None:
    lookups = step(MemoryExactStore(max_entries=16, max_bytes=1 << 20))
    two = request(n=2)  # n > 1: never cacheable, so no entry id
    assert lookups.prepare(two).entry_id is None
    assert not (await lookups.lookup(two, lookups.prepare(two))).storable
    off = step(None)  # no exact store at all
    assert (await off.lookup(request(), off.prepare(request()))).outcome is Outcome.OFF


async def test_a_failing_exact_store_is_off_but_still_stores() -> None:
    lookups = step(BrokenStore(max_entries=16, max_bytes=1 << 20))
    req = request()
    found = await lookups.lookup(req, lookups.prepare(req))
    assert found.outcome is Outcome.OFF and found.storable and found.entry_id is not None
