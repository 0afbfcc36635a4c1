"""Redis memory per cached answer, MEASURED: fill a fresh ``redis-server`` (and a fresh local
Redis Cluster) with ``--answers`` exact-cache entries written by the store itself, read
``INFO memory`` before and after, and extrapolate to one million answers.

The answers are realistic in size and shape: a chat answer of English text (WikiQA's Wikipedia
summaries, ``/work/shared/data/wikiqa_train.jsonl.gz``, cut to a length drawn between
``--min-chars`` and ``--max-chars``), the asked question (a Quora question from
``qqp_dev.jsonl``), usage, model, tenant, TTL; keys ``deja:x:<64-hex entry id>``; with
``--hit-share`` of them carrying a hit counter (``deja:h:<id>``). The figure is
``used_memory`` growth / answers (the values' own bytes, Redis's per-key overhead and the
allocator's rounding), on one node and summed over a cluster's masters; a cluster's replicas
hold as much again.

    .venv/bin/python bench/redis_memory.py [--answers 100000]

Writes ``bench/results/redis_memory.json``. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import hashlib
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deja.cache.entry import CachedAnswer
from deja.cache.exact.redis import RedisExactStore
from deja.redisclient import connect_redis
from tests.rediscluster import LocalRedisCluster
from tests.support import RedisServer

DATA = Path("/work/shared/data")
RESULTS = Path(__file__).resolve().parent / "results"


def texts() -> tuple[list[str], list[str]]:
    with gzip.open(DATA / "wikiqa_train.jsonl.gz", "rt") as handle:
        pages = [" ".join(json.loads(line)["sentences"]) for line in handle]
    with (DATA / "qqp_dev.jsonl").open() as handle:
        questions = [json.loads(line)["a"] for line in handle]
    return pages, questions


def answers(count: int, args: argparse.Namespace) -> list[CachedAnswer]:
    pages, questions = texts()
    rng = random.Random(25)
    now = time.time()
    out = []
    for i in range(count):
        page = pages[i % len(pages)]
        length = rng.randint(args.min_chars, args.max_chars)
        content = (page * (1 + length // max(1, len(page))))[:length]
        question = questions[i % len(questions)]
        entry_id = hashlib.sha256(f"{i}:{question}".encode()).hexdigest()
        out.append(
            CachedAnswer(
                entry_id=entry_id,
                endpoint="chat",
                model="meta-llama/Llama-3.1-8B-Instruct",
                finish_reason="stop",
                created_at=now,
                message={"role": "assistant", "content": content},
                usage={
                    "prompt_tokens": 40,
                    "completion_tokens": length // 4,
                    "total_tokens": 40 + length // 4,
                },
                tenant="acme",
                question=question,
                expires_at=now + 86_400,
            )
        )
    return out


def used_memory(ports: list[int]) -> int:
    import redis

    return sum(int(redis.Redis(port=p).info("memory")["used_memory"]) for p in ports)


async def fill(url: str, entries: list[CachedAnswer], hit_share: float) -> None:
    client = connect_redis(url, timeout=5.0, max_connections=64)
    store = RedisExactStore(client, timeout=5.0, retry_seconds=0.1)
    try:
        for start in range(0, len(entries), 50):
            batch = entries[start : start + 50]
            await asyncio.gather(*(store.set(a.entry_id, a, ttl=86_400) for a in batch))
        hit = entries[: int(len(entries) * hit_share)]
        for answer in hit:
            store.note_hit(answer.entry_id)
        await store.flush_hits()
    finally:
        await store.close()
        await client.aclose()


def measure(
    name: str, url: str, ports: list[int], entries: list[CachedAnswer], hit_share: float
) -> dict[str, Any]:
    before = used_memory(ports)
    started = time.monotonic()
    asyncio.run(fill(url, entries, hit_share))
    after = used_memory(ports)
    per = (after - before) / len(entries)
    took = time.monotonic() - started
    print(f"{name}: {len(entries):,} answers in {took:.1f} s, {per:,.0f} bytes each;")
    print(f"  1M answers ~ {per * 1e6 / 2**30:.2f} GiB (extrapolated)")
    return {
        "backend": name,
        "answers": len(entries),
        "used_memory_before": before,
        "used_memory_after": after,
        "bytes_per_answer": per,
        "gib_per_million": per * 1e6 / 2**30,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--answers", type=int, default=100_000)
    parser.add_argument("--min-chars", type=int, default=300)
    parser.add_argument("--max-chars", type=int, default=2400)
    parser.add_argument("--hit-share", type=float, default=0.5)
    args = parser.parse_args()
    entries = answers(args.answers, args)
    value_bytes = sum(len(a.to_bytes()) for a in entries) / len(entries)
    print(
        f"mean serialized answer: {value_bytes:,.0f} bytes "
        f"(content {args.min_chars}-{args.max_chars} chars)"
    )
    results: dict[str, Any] = {"args": vars(args), "mean_value_bytes": value_bytes, "runs": []}
    node = RedisServer()
    node.start()
    cluster = LocalRedisCluster()
    try:
        cluster.start()
        results["runs"].append(measure("one node", node.url, [node.port], entries, args.hit_share))
        masters = [n.port for n in cluster.masters()]
        results["runs"].append(
            measure("cluster, 3 masters (sum)", cluster.url, masters, entries, args.hit_share)
        )
    finally:
        cluster.stop()
        node.stop()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "redis_memory.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
