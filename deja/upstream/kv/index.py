"""What each replica really holds: a set of resident block keys per replica, kept from its
vLLM KV-cache events (:mod:`deja.upstream.kv.events` feeds it).

A block key is the 64-bit int form of vLLM's block hash (:func:`deja.kvcache.blockhash.
external_key`). A replica holds a prompt's prefix of ``k`` blocks when it holds the first ``k``
keys of the prompt's chain. vLLM evicts a freed chain from its tail and hits stop at the first
missing block, so residency along a chain is (nearly) a prefix: :meth:`ReplicaIndex.match`
binary-searches it (9 set lookups for a 6k-token prompt instead of 375).

States (``/admin/replicas`` → ``kv_index``, metric ``deja_kv_index_state``):

``live``      every batch since the index started was applied in order;
``partial``   blocks stored before the index (re)started are unknown: it may under-report, never
              over-report what it saw removed;
``stale``     the replica served prompts but published nothing for a scrape interval, or lost
              events that replay could not recover: not used for routing until a fresh batch;
``off``       no events configured for the replica.

Memory: one Python int in one set per resident block, measured at about 60-70 bytes per block
(``bench/kv_routing.py --memory``; see docs/architecture.md). Each index holds at most
``max_blocks`` keys: past that (events lost on a scale vLLM's own cache never reaches) it is
cleared and marked ``partial``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from deja.kvcache.blockhash import external_key
from deja.kvcache.wire import Cleared, DecodedBatch, Removed, Stored

__all__ = ["IndexState", "KVIndex", "ReplicaIndex"]

log = logging.getLogger("deja.kvindex")

IndexState = Literal["live", "partial", "stale", "off"]

DEFAULT_MAX_BLOCKS = 2_000_000


@dataclass(slots=True, eq=False)
class ReplicaIndex:
    """The resident blocks of one replica and how far its event stream got."""

    replica: str
    max_blocks: int = DEFAULT_MAX_BLOCKS
    blocks: set[int] = field(default_factory=set)
    state: IndexState = "partial"
    last_seq: int = -1
    last_batch_at: float = 0.0
    batches: int = 0
    drops: int = 0
    last_drop: str | None = None
    block_size: int | None = None
    #: The most blocks it held when it evicted one (its cache was full then); None until it
    #: has evicted: how many blocks its cache holds, learned from its events.
    capacity: int | None = None
    _before_stale: IndexState = "partial"

    def apply(self, seq: int, batch: DecodedBatch, now: float) -> None:
        """One batch, in sequence order (the subscriber handles gaps first)."""
        blocks = self.blocks
        for event in batch.events:
            if isinstance(event, Stored):
                blocks.update(external_key(h) for h in event.hashes)
                if event.block_size:
                    self.block_size = event.block_size
            elif isinstance(event, Removed):
                if self.capacity is None or len(blocks) > self.capacity:
                    self.capacity = len(blocks)
                blocks.difference_update(external_key(h) for h in event.hashes)
            elif isinstance(event, Cleared):
                blocks.clear()
        self.last_seq = seq
        self.last_batch_at = now
        self.batches += 1
        if self.state == "stale":  # a batch in order again (gaps were checked before it)
            self.state = self._before_stale
        if len(blocks) > self.max_blocks:
            self.drop(f"more than {self.max_blocks} resident blocks")

    def mark_stale(self) -> None:
        """Not to be trusted until its next batch (which comes after a gap check)."""
        if self.state != "stale":
            self._before_stale = self.state
            self.state = "stale"

    def drop(self, reason: str, *, state: IndexState = "partial") -> None:
        """Forget everything (the replica restarted, events were lost): say so once."""
        self.blocks.clear()
        self.drops += 1
        self.last_drop = reason
        self.state = state
        log.warning("KV index of replica %s dropped: %s", self.replica, reason)

    def match(self, keys: Sequence[int]) -> int:
        """How many leading ``keys`` this replica holds (0 when the index is not usable)."""
        if self.state == "stale" or self.state == "off" or not keys:
            return 0
        blocks = self.blocks
        if keys[0] not in blocks:
            return 0
        lo, hi = 1, len(keys)  # keys[:lo] resident; find the largest such lo
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if keys[mid - 1] in blocks:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def describe(self, now: float | None = None) -> dict[str, object]:
        """The ``kv_index`` field of ``/admin/replicas``."""
        now = time.monotonic() if now is None else now
        age = round(now - self.last_batch_at, 3) if self.batches else None
        return {
            "state": self.state,
            "resident_blocks": len(self.blocks),
            "capacity_blocks": self.capacity,
            "last_seq": self.last_seq,
            "batches": self.batches,
            "seconds_since_batch": age,
            "drops": self.drops,
            "last_drop": self.last_drop,
        }


class KVIndex:
    """The replicas' indexes, by replica URL."""

    def __init__(self, max_blocks: int = DEFAULT_MAX_BLOCKS) -> None:
        self.max_blocks = max_blocks
        self._by_url: dict[str, ReplicaIndex] = {}

    def replica(self, url: str) -> ReplicaIndex:
        """The index of ``url`` (created empty, ``partial``, on first use)."""
        index = self._by_url.get(url)
        if index is None:
            index = self._by_url[url] = ReplicaIndex(url, self.max_blocks)
        return index

    def get(self, url: str) -> ReplicaIndex | None:
        return self._by_url.get(url)

    def remove(self, url: str) -> None:
        self._by_url.pop(url, None)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._by_url.values())

    def __len__(self) -> int:
        return len(self._by_url)
