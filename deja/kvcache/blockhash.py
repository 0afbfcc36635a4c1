"""vLLM's prefix-cache block hashes, computed as vLLM 0.11 computes them.

vLLM (``vllm/v1/core/kv_cache_utils.py``, ``hash_block_tokens`` and
``generate_block_hash_extra_keys``) hashes every *full* block of ``block_size`` prompt tokens
as ``hash_fn((parent_hash, tuple(block_token_ids), extra_keys))`` where

- ``parent_hash`` is the previous block's hash (32 bytes), or ``NONE_HASH`` for the first
  block: ``hash_fn(os.environ["PYTHONHASHSEED"])`` (a random value when the variable is unset:
  then no one outside the process can reproduce its hashes, so routing by resident prefix
  needs ``PYTHONHASHSEED`` set on the replicas, as llm-d asks too);
- ``extra_keys`` is ``None`` or a tuple: the LoRA adapter's int id (every block), multimodal
  hashes (not produced by deja: a request with non-text parts is not matched), then the
  request's ``cache_salt`` (first block only);
- ``hash_fn`` is ``--prefix-caching-hash-algo``: ``sha256`` (the default: sha256 of
  ``pickle.dumps(x, protocol=HIGHEST_PROTOCOL)``) or ``sha256_cbor`` (sha256 of canonical CBOR,
  ``cbor2.dumps(x, canonical=True)``).

KV events carry a hash as the 32 bytes, or, with ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES``, as
the int of its last 8 bytes (``int.from_bytes(h, "big") & (2**64 - 1)``). The index keys every
block by that 64-bit int (:func:`external_key`) whatever the wire form, which keeps a resident
block at one small int. Checked against vLLM's own functions: ``tests/unit/test_blockhash.py``
and ``tests/tools/vllm_vectors.py``.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Callable, Sequence
from typing import Any, Literal

import cbor2

__all__ = [
    "BlockHasher",
    "HashAlgo",
    "external_key",
    "hash_function",
]

HashAlgo = Literal["sha256", "sha256_cbor"]

_MASK64 = (1 << 64) - 1


def _sha256_pickle(value: Any) -> bytes:
    return hashlib.sha256(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def _sha256_cbor(value: Any) -> bytes:
    return hashlib.sha256(cbor2.dumps(value, canonical=True)).digest()


def hash_function(algo: HashAlgo) -> Callable[[Any], bytes]:
    """vLLM's hash function of ``--prefix-caching-hash-algo`` ``algo``."""
    if algo == "sha256":
        return _sha256_pickle
    if algo == "sha256_cbor":
        return _sha256_cbor
    raise ValueError(f"unknown prefix-caching hash algorithm {algo!r}")


def external_key(block_hash: bytes | int) -> int:
    """A block hash as the index keys it: vLLM's int form (the last 8 bytes, big-endian)."""
    if isinstance(block_hash, int):
        return block_hash & _MASK64
    return int.from_bytes(block_hash[-8:], "big")


class BlockHasher:
    """Hashes full blocks of token ids as one vLLM replica does.

    ``seed`` is the replica's ``PYTHONHASHSEED`` (a string, as vLLM reads it); ``block_size``
    its ``--block-size``. Immutable; one per model.
    """

    __slots__ = ("_fn", "algo", "block_size", "none_hash")

    def __init__(self, algo: HashAlgo, seed: str, block_size: int) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.algo = algo
        self.block_size = block_size
        self._fn = hash_function(algo)
        self.none_hash: bytes = self._fn(seed)

    def block(
        self, parent: bytes | None, tokens: Sequence[int], extra: tuple[Any, ...] | None
    ) -> bytes:
        """One block's hash (``hash_block_tokens``): ``parent`` None for the first block."""
        return self._fn((parent or self.none_hash, tuple(tokens), extra))

    def chain(
        self,
        tokens: Sequence[int],
        *,
        cache_salt: str | None = None,
        lora_id: int | None = None,
        parent: bytes | None = None,
        start: int = 0,
    ) -> list[bytes]:
        """The hashes of the full blocks of ``tokens`` from token ``start`` (a block boundary),
        ``parent`` being the hash of the block before it. A trailing partial block has none."""
        size = self.block_size
        out: list[bytes] = []
        fn, none_hash = self._fn, self.none_hash
        lora = [lora_id] if lora_id is not None else []
        for begin in range(start, len(tokens) - size + 1, size):
            keys = [*lora, cache_salt] if (begin == 0 and cache_salt) else lora
            extra = tuple(keys) if keys else None
            parent = fn((parent or none_hash, tuple(tokens[begin : begin + size]), extra))
            out.append(parent)
        return out
