"""deja's vLLM block hashes and KV-event encoding against vectors made by vLLM 0.11's own code
(``tests/tools/vllm_vectors.py`` runs the functions from the vLLM wheel)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from deja.kvcache.blockhash import BlockHasher, external_key
from deja.kvcache.wire import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    Cleared,
    KVEventBatch,
    Removed,
    Stored,
    WireError,
    decode_batch,
    encode_batch,
)

VECTORS: dict[str, Any] = json.loads(
    (Path(__file__).parent / "data" / "vllm_kv_vectors.json").read_text()
)


@pytest.mark.parametrize("algo", ["sha256", "sha256_cbor"])
def test_block_hashes_match_vllm(algo: str) -> None:
    spec = VECTORS["hashes"]
    expected = spec["algos"][algo]
    hasher = BlockHasher(algo, spec["seed"], spec["block_size"])  # type: ignore[arg-type]
    assert hasher.none_hash.hex() == expected["none_hash"]
    for case in expected["cases"]:
        got = hasher.chain(case["tokens"], cache_salt=case["salt"], lora_id=case["lora"])
        assert [h.hex() for h in got] == case["hashes"], case["name"]


def test_salt_changes_every_block_through_the_chain() -> None:
    cases = {c["name"]: c["hashes"] for c in VECTORS["hashes"]["algos"]["sha256"]["cases"]}
    assert set(cases["plain"]).isdisjoint(cases["salted"])
    assert set(cases["salted"]).isdisjoint(cases["salted-other"])


def test_chain_continues_from_a_parent() -> None:
    hasher = BlockHasher("sha256", "0", 4)
    tokens = list(range(20))
    whole = hasher.chain(tokens, cache_salt="s")
    tail = hasher.chain(tokens, cache_salt="s", parent=whole[1], start=8)
    assert whole[2:] == tail


def test_external_key_is_vllms_int_form() -> None:
    digest = bytes(range(32))
    assert external_key(digest) == int.from_bytes(digest, "big") & ((1 << 64) - 1)
    assert external_key(5) == 5


def test_event_encoding_is_byte_identical_to_vllms() -> None:
    ours = [
        KVEventBatch(
            ts=1700000000.25,
            events=[
                BlockStored(
                    block_hashes=[bytes(range(32)), bytes(range(1, 33))],
                    parent_block_hash=None,
                    token_ids=list(range(32)),
                    block_size=16,
                    lora_id=None,
                    medium="GPU",
                ),
                BlockRemoved(block_hashes=[bytes(range(2, 34))], medium="GPU"),
            ],
            data_parallel_rank=0,
        ),
        KVEventBatch(
            ts=2.0,
            events=[
                BlockStored(
                    block_hashes=[12345678901234567],
                    parent_block_hash=987654321,
                    token_ids=list(range(16)),
                    block_size=16,
                    lora_id=3,
                    medium="GPU",
                ),
                AllBlocksCleared(),
            ],
            data_parallel_rank=0,
        ),
    ]
    for batch, sample in zip(ours, VECTORS["events"], strict=True):
        assert encode_batch(batch).hex() == sample["payload"]


def test_decoding_vllms_payloads() -> None:
    first = decode_batch(bytes.fromhex(VECTORS["events"][0]["payload"]))
    assert first.ts == 1700000000.25 and first.data_parallel_rank == 0
    stored, removed = first.events
    assert isinstance(stored, Stored) and stored.parent is None and stored.num_tokens == 32
    assert stored.hashes == [bytes(range(32)), bytes(range(1, 33))]
    assert isinstance(removed, Removed) and removed.hashes == [bytes(range(2, 34))]
    second = decode_batch(bytes.fromhex(VECTORS["events"][1]["payload"]))
    assert isinstance(second.events[0], Stored) and second.events[0].lora_id == 3
    assert isinstance(second.events[1], Cleared)


def test_decoding_the_map_form_of_later_releases() -> None:
    import msgspec

    payload = msgspec.msgpack.encode(
        {
            "ts": 3.0,
            "events": [
                {"type": "BlockStored", "block_hashes": [1, 2], "parent_block_hash": 9,
                 "token_ids": [0] * 32, "block_size": 16, "lora_id": None, "medium": "GPU",
                 "lora_name": None, "extra_keys": None},
                {"type": "BlockRemoved", "block_hashes": [1], "medium": "GPU"},
            ],
        }
    )  # fmt: skip
    batch = decode_batch(payload)
    assert batch.events == [Stored([1, 2], 9, 32, 16, None), Removed([1])]


@pytest.mark.parametrize(
    "payload", [b"\xc1", b"\x93\x01\x02\x03", b"\x92\x01\x91\x93\xa3Bad\x01\x02"]
)
def test_garbage_is_a_wire_error(payload: bytes) -> None:
    with pytest.raises(WireError):
        decode_batch(payload)
