"""vLLM's KV-cache event wire format (vLLM 0.11, ``vllm/distributed/kv_events.py``).

A replica started with ``--kv-events-config '{"enable_kv_cache_events": true, "publisher":
"zmq", "endpoint": "tcp://*:5557", "replay_endpoint": "tcp://*:5558", "topic": ""}'`` sends,
on a ZMQ PUB socket, one multipart message per engine step that changed its prefix cache:
``[topic, seq (8 bytes, big-endian), msgpack(KVEventBatch)]``. ``seq`` counts from 0 with no
holes. Its ROUTER replay socket answers ``[b"", start_seq (8 bytes)]`` with one
``[b"", seq, payload]`` per batch still in its buffer (``buffer_steps``) from ``start_seq``
on, then ``[b"", -1 (8 bytes, signed), b""]``.

The bodies are msgspec structs with ``array_like=True``, so they travel as positional arrays,
and the events are a tagged union (the class name first)::

    KVEventBatch     = [ts, [event, ...], data_parallel_rank]
    BlockStored      = ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size,
                        lora_id, medium]
    BlockRemoved     = ["BlockRemoved", block_hashes, medium]
    AllBlocksCleared = ["AllBlocksCleared"]

A hash is 32 bytes, or a 64-bit int with ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES``. The
structs below are the encoder (the simulator publishes with them). :func:`decode_batch` reads
this form and also the map form of later vLLM releases (events as maps with a ``"type"`` tag
and extra fields), so a gateway keeps working across that change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

__all__ = [
    "END_SEQ",
    "AllBlocksCleared",
    "BlockRemoved",
    "BlockStored",
    "Cleared",
    "DecodedBatch",
    "KVEventBatch",
    "Removed",
    "Stored",
    "WireError",
    "decode_batch",
    "decode_seq",
    "encode_batch",
    "encode_seq",
]

MEDIUM_GPU = "GPU"
END_SEQ = (-1).to_bytes(8, "big", signed=True)
"""The replay socket's end-of-replay marker."""

ExternalBlockHash = bytes | int


class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class KVCacheEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
    """Base of the tagged union."""


class BlockStored(KVCacheEvent):
    block_hashes: list[ExternalBlockHash]
    parent_block_hash: ExternalBlockHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[ExternalBlockHash]
    medium: str | None


class AllBlocksCleared(KVCacheEvent):
    pass


class KVEventBatch(EventBatch):
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]


_ENCODER = msgspec.msgpack.Encoder()
_RAW = msgspec.msgpack.Decoder()


def encode_batch(batch: KVEventBatch) -> bytes:
    """The msgpack body of one batch, byte for byte as vLLM's publisher encodes it."""
    return _ENCODER.encode(batch)


def encode_seq(seq: int) -> bytes:
    """A sequence number as its 8-byte big-endian frame."""
    return seq.to_bytes(8, "big", signed=True)


def decode_seq(frame: bytes) -> int:
    """A sequence frame's number (-1 is the replay's end marker)."""
    if len(frame) != 8:
        raise WireError(f"a sequence frame has 8 bytes, got {len(frame)}")
    return int.from_bytes(frame, "big", signed=True)


class WireError(ValueError):
    """A message that is not a KV event batch."""


@dataclass(frozen=True, slots=True)
class Stored:
    """Blocks now cached: their hashes in chain order, the parent of the first one."""

    hashes: list[ExternalBlockHash]
    parent: ExternalBlockHash | None
    num_tokens: int
    block_size: int | None
    lora_id: int | None


@dataclass(frozen=True, slots=True)
class Removed:
    """Blocks evicted."""

    hashes: list[ExternalBlockHash]


@dataclass(frozen=True, slots=True)
class Cleared:
    """The whole prefix cache was reset."""


Event = Stored | Removed | Cleared


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    ts: float
    events: list[Event]
    data_parallel_rank: int | None


def _hashes(value: Any) -> list[ExternalBlockHash]:
    if not isinstance(value, list) or not all(isinstance(h, bytes | int) for h in value):
        raise WireError("block_hashes must be a list of bytes or ints")
    return value


def _positional(item: list[Any]) -> Event:
    tag = item[0]
    if tag == "BlockStored" and len(item) >= 5:
        tokens = item[3] if isinstance(item[3], list) else []
        size = item[4] if isinstance(item[4], int) else None
        lora = item[5] if len(item) > 5 and isinstance(item[5], int) else None
        return Stored(_hashes(item[1]), item[2], len(tokens), size, lora)
    if tag == "BlockRemoved" and len(item) >= 2:
        return Removed(_hashes(item[1]))
    if tag == "AllBlocksCleared":
        return Cleared()
    raise WireError(f"unknown KV event {tag!r}")


def _mapped(item: dict[str, Any]) -> Event:
    tag = item.get("type")
    if tag == "BlockStored":
        tokens = item.get("token_ids")
        size, lora = item.get("block_size"), item.get("lora_id")
        return Stored(
            _hashes(item.get("block_hashes")),
            item.get("parent_block_hash"),
            len(tokens) if isinstance(tokens, list) else 0,
            size if isinstance(size, int) else None,
            lora if isinstance(lora, int) else None,
        )
    if tag == "BlockRemoved":
        return Removed(_hashes(item.get("block_hashes")))
    if tag == "AllBlocksCleared":
        return Cleared()
    raise WireError(f"unknown KV event {tag!r}")


def decode_batch(payload: bytes) -> DecodedBatch:
    """A batch's events; :class:`WireError` when ``payload`` is not one."""
    try:
        raw = _RAW.decode(payload)
    except msgspec.DecodeError as exc:
        raise WireError(f"not msgpack: {exc}") from exc
    if isinstance(raw, dict):  # a map-encoded envelope
        raw = [raw.get("ts"), raw.get("events"), raw.get("data_parallel_rank")]
    if not isinstance(raw, list) or len(raw) < 2 or not isinstance(raw[1], list):
        raise WireError("a batch is [ts, events, data_parallel_rank]")
    events: list[Event] = []
    for item in raw[1]:
        if isinstance(item, list) and item:
            events.append(_positional(item))
        elif isinstance(item, dict):
            events.append(_mapped(item))
        else:
            raise WireError("an event is a tagged array or map")
    ts = raw[0] if isinstance(raw[0], int | float) else 0.0
    rank = raw[2] if len(raw) > 2 and isinstance(raw[2], int) else None
    return DecodedBatch(float(ts), events, rank)
