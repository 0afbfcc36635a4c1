"""Test vectors for deja's vLLM block hashes and KV-event encoding, made by vLLM's own code.

vLLM cannot be installed here (no GPU, and it pulls in PyTorch), but its hashing and its event
structs are plain Python. This script reads them from an unpacked vLLM wheel, runs them, and
writes ``tests/unit/data/vllm_kv_vectors.json``, which ``tests/unit/test_blockhash.py`` checks
deja's code against. Nothing of vLLM is copied into the repository: the functions are taken
from the wheel's files at run time (``ast``), with stubs only for the imports they do not call
(config, logger, envs).

    pip download vllm==0.11.0 --no-deps -d /tmp/w
    mkdir /tmp/vllm_src && cd /tmp/vllm_src && unzip -q /tmp/w/vllm-0.11.0-*.whl 'vllm/*'
    PYTHONHASHSEED=0 .venv/bin/python -m tests.tools.vllm_vectors /tmp/vllm_src

Functions run: ``vllm.utils.sha256``, ``vllm.utils.sha256_cbor``,
``vllm.v1.core.kv_cache_utils.init_none_hash``, ``hash_block_tokens``,
``generate_block_hash_extra_keys`` (with ``_gen_mm_extra_hash_keys``,
``_gen_lora_extra_hash_keys``) and ``get_request_block_hasher`` on a request stand-in; the
msgspec structs of ``vllm/distributed/kv_events.py`` encoded with ``msgspec.msgpack.Encoder``,
as its ``ZmqEventPublisher`` does.
"""

from __future__ import annotations

import ast
import hashlib
import json
import logging
import os
import pickle
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, NewType, Optional, Union

import cbor2
import msgspec

OUT = Path(__file__).resolve().parents[1] / "unit" / "data" / "vllm_kv_vectors.json"

HASH_FUNCTIONS = ("sha256", "sha256_cbor")
KV_UTILS = (
    "init_none_hash",
    "hash_block_tokens",
    "generate_block_hash_extra_keys",
    "_gen_mm_extra_hash_keys",
    "_gen_lora_extra_hash_keys",
    "get_request_block_hasher",
)
EVENT_CLASSES = (
    "EventBatch",
    "KVCacheEvent",
    "BlockStored",
    "BlockRemoved",
    "AllBlocksCleared",
    "KVEventBatch",
)


def _take(path: Path, names: tuple[str, ...], namespace: dict[str, Any]) -> None:
    tree = ast.parse(path.read_text())
    wanted = [
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name in names
    ]
    found = {n.name for n in wanted}
    missing = set(names) - found
    if missing:
        raise SystemExit(f"{path}: not found: {sorted(missing)}")
    module = ast.Module(body=wanted, type_ignores=[])
    exec(compile(module, str(path), "exec"), namespace)


def load(src: Path) -> dict[str, Any]:
    """vLLM's functions and structs, run from the files under ``src``."""
    ns: dict[str, Any] = {
        "Any": Any,
        "Callable": Callable,
        "Optional": Optional,
        "Union": Union,
        "Sequence": __import__("collections.abc").abc.Sequence,
        "hashlib": hashlib,
        "pickle": pickle,
        "cbor2": cbor2,
        "msgspec": msgspec,
        "os": os,
        "logger": logging.getLogger("vllm-vectors"),
        "BlockHash": NewType("BlockHash", bytes),
        "Request": object,
        "ExternalBlockHash": Union[bytes, int],  # noqa: UP007 (vLLM 0.11 spells it so)
    }
    _take(src / "vllm/utils/__init__.py", HASH_FUNCTIONS, ns)
    _take(src / "vllm/v1/core/kv_cache_utils.py", KV_UTILS, ns)
    _take(src / "vllm/distributed/kv_events.py", EVENT_CLASSES, ns)
    return ns


def _request(tokens: list[int], salt: str | None, lora: int | None) -> types.SimpleNamespace:
    lora_request = types.SimpleNamespace(lora_int_id=lora, id=lora) if lora is not None else None
    return types.SimpleNamespace(
        block_hashes=[],
        num_tokens=len(tokens),
        all_token_ids=tokens,
        mm_features=None,
        lora_request=lora_request,
        cache_salt=salt,
    )


CASES = [
    {"name": "plain", "tokens": list(range(1, 50)), "salt": None, "lora": None},
    {"name": "salted", "tokens": list(range(1, 50)), "salt": "tenant-a", "lora": None},
    {"name": "salted-other", "tokens": list(range(1, 50)), "salt": "tenant-b", "lora": None},
    {"name": "lora", "tokens": list(range(1, 50)), "salt": "tenant-a", "lora": 7},
    {
        "name": "big-ids",
        "tokens": [151643, 0, 2**31 - 1, 65535, 300] * 7,
        "salt": None,
        "lora": None,
    },
]


def vectors(ns: dict[str, Any], seed: str, block_size: int) -> dict[str, Any]:
    os.environ["PYTHONHASHSEED"] = seed
    out: dict[str, Any] = {"seed": seed, "block_size": block_size, "algos": {}}
    for algo in HASH_FUNCTIONS:
        fn = ns[algo]
        ns["sha256_cbor"] = ns["sha256_cbor"]  # init_none_hash compares with it
        ns["init_none_hash"](fn)
        hasher = ns["get_request_block_hasher"](block_size, fn)
        cases = []
        for case in CASES:
            request = _request(case["tokens"], case["salt"], case["lora"])
            hashes = hasher(request)
            cases.append({**case, "hashes": [h.hex() for h in hashes]})
        out["algos"][algo] = {"none_hash": ns["NONE_HASH"].hex(), "cases": cases}
    return out


def event_payloads(ns: dict[str, Any]) -> list[dict[str, Any]]:
    stored, removed, cleared, batch = (
        ns["BlockStored"], ns["BlockRemoved"], ns["AllBlocksCleared"], ns["KVEventBatch"],
    )  # fmt: skip
    encoder = msgspec.msgpack.Encoder()
    samples = [
        batch(
            ts=1700000000.25,
            events=[
                stored(
                    block_hashes=[bytes(range(32)), bytes(range(1, 33))],
                    parent_block_hash=None,
                    token_ids=list(range(32)),
                    block_size=16,
                    lora_id=None,
                    medium="GPU",
                ),
                removed(block_hashes=[bytes(range(2, 34))], medium="GPU"),
            ],
            data_parallel_rank=0,
        ),
        batch(
            ts=2.0,
            events=[
                stored(
                    block_hashes=[12345678901234567],
                    parent_block_hash=987654321,
                    token_ids=list(range(16)),
                    block_size=16,
                    lora_id=3,
                    medium="GPU",
                ),
                cleared(),
            ],
            data_parallel_rank=0,
        ),
    ]
    return [{"payload": encoder.encode(b).hex()} for b in samples]


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    src = Path(sys.argv[1])
    ns = load(src)
    document = {
        "source": "vLLM 0.11.0 wheel (vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl)",
        "made_by": "tests/tools/vllm_vectors.py",
        "hashes": vectors(ns, "0", 16),
        "events": event_payloads(ns),
    }
    OUT.write_text(json.dumps(document) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
