"""The simulated replica's KV blocks, managed as vLLM V1's ``BlockPool`` manages them
(``vllm/v1/core/block_pool.py``), so that the prefix cache and the KV-cache events agree.

- Every block has a reference count. A sequence holds its blocks; a prompt's blocks that
  are already cached are *shared* (their count goes up) instead of computed again.
- Blocks no sequence holds wait in the free queue in LRU order, those of a finished sequence
  tail first (vLLM frees a request's blocks in reverse, so its chain is evicted from the end).
  A free block keeps its hash and can still be hit; it is evicted only when the allocator
  takes it for new work (``BlockRemoved``), so the cache spends exactly the memory that
  running sequences do not.
- A full prompt block is cached once its tokens are computed (``BlockStored``, with its
  parent's hash and its token ids). Output tokens are not cached (the simulator samples words,
  not token ids).

Events go to ``events`` and are drained once per engine step into one ``KVEventBatch``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from deja.kvcache.wire import MEDIUM_GPU, AllBlocksCleared, BlockRemoved, BlockStored

__all__ = ["BlockPool"]

KVEvent = BlockStored | BlockRemoved | AllBlocksCleared


class BlockPool:
    """``num_blocks`` KV blocks of ``block_size`` tokens, with a hash → block map."""

    def __init__(self, num_blocks: int, block_size: int, *, publish: bool = False) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.publish = publish
        self._ref = [0] * num_blocks
        self._hash: list[bytes | None] = [None] * num_blocks
        self._cached: dict[bytes, int] = {}
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.events: list[KVEvent] = []
        self.queries = 0
        """Prompt tokens looked up (vLLM's ``prefix_cache_queries``)."""
        self.hits = 0
        """Prompt tokens found cached."""
        self.evictions = 0

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def used(self) -> int:
        """Blocks held by sequences (cached free blocks are free, as in vLLM)."""
        return self.num_blocks - len(self._free)

    def cached_blocks(self) -> int:
        """Blocks that hold a cached prefix block (held or free)."""
        return len(self._cached)

    def __contains__(self, block_hash: object) -> bool:
        return block_hash in self._cached

    def peek(self, hashes: Sequence[bytes]) -> int:
        """Leading blocks of ``hashes`` cached now, without touching them."""
        count = 0
        for h in hashes:
            if h not in self._cached:
                break
            count += 1
        return count

    def take_prefix(self, hashes: Sequence[bytes], limit: int) -> list[int]:
        """The cached blocks of the longest prefix of ``hashes`` (at most ``limit``), now
        held by the caller (``get_computed_blocks`` + ``touch``)."""
        ids: list[int] = []
        for h in hashes[:limit]:
            block = self._cached.get(h)
            if block is None:
                break
            ids.append(block)
        for block in ids:
            if self._ref[block] == 0:
                del self._free[block]
            self._ref[block] += 1
        return ids

    def allocate(self, n: int) -> list[int] | None:
        """``n`` new blocks from the head of the free queue (evicting their cached content),
        or None when fewer are free."""
        if n > len(self._free):
            return None
        out: list[int] = []
        free, ref, hashes = self._free, self._ref, self._hash
        for _ in range(n):
            block, _ = free.popitem(last=False)
            old = hashes[block]
            if old is not None:
                hashes[block] = None
                del self._cached[old]
                self.evictions += 1
                if self.publish:
                    self.events.append(BlockRemoved(block_hashes=[old], medium=MEDIUM_GPU))
            ref[block] = 1
            out.append(block)
        return out

    def release(self, blocks: Sequence[int]) -> None:
        """A sequence lets go of ``blocks`` (in chain order): the tail goes first in the LRU."""
        ref, free = self._ref, self._free
        for block in reversed(blocks):
            ref[block] -= 1
            if ref[block] == 0:
                free[block] = None

    def cache(
        self,
        blocks: Sequence[int],
        hashes: Sequence[bytes],
        tokens: Sequence[int],
        start: int,
        end: int,
    ) -> None:
        """Cache a sequence's full blocks ``start..end-1`` (``cache_full_blocks``): one
        ``BlockStored`` per run of newly cached blocks, with the parent of its first one."""
        run_start = -1
        for i in range(start, end + 1):
            fresh = False
            if i < end:
                block, h = blocks[i], hashes[i]
                # A block computed twice at once (two sequences, same new prefix) is cached
                # once: the second copy stays an uncached block.
                fresh = h not in self._cached and self._hash[block] is None
                if fresh:
                    self._hash[block] = h
                    self._cached[h] = block
            if fresh and run_start < 0:
                run_start = i
            elif not fresh and run_start >= 0:
                self._stored(hashes, tokens, run_start, i)
                run_start = -1

    def _stored(self, hashes: Sequence[bytes], tokens: Sequence[int], start: int, end: int) -> None:
        if not self.publish:
            return
        size = self.block_size
        self.events.append(
            BlockStored(
                block_hashes=list(hashes[start:end]),
                parent_block_hash=hashes[start - 1] if start > 0 else None,
                token_ids=list(tokens[start * size : end * size]),
                block_size=size,
                lora_id=None,
                medium=MEDIUM_GPU,
            )
        )

    def reset(self) -> bool:
        """Drop every cached hash (``reset_prefix_cache``); False while a block is held."""
        if self.used:
            return False
        self._cached.clear()
        self._hash = [None] * self.num_blocks
        if self.publish:
            self.events.append(AllBlocksCleared())
        return True

    def drain(self) -> list[KVEvent]:
        """The events since the last drain."""
        events, self.events = self.events, []
        return events
