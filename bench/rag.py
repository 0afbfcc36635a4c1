"""RAG through the gateway, side by side in ONE run.

Part 1 — the prefix cache. Two simulated vLLM replicas (``deja sim``, prefill time per uncached
token, a bounded KV budget) behind one gateway with the caches off (every request retrieves and
goes to a replica) and a real corpus: this project's own docs (``docs/*.md``, ``README.md``),
ingested through the admin API. The workload asks distinct questions about the docs'
sections: ``--topics`` headings with Zipf popularity, each in ``--variants`` wordings with a
qualifier and a number, so no two questions are equal but many retrieve overlapping chunk
sets. The same seeded sequence is sent twice:

1. ``rag_context_order=document`` (deja's default): chunks by document id and chunk index;
2. ``rag_context_order=score``: best first, as most RAG apps build the prompt.

Figures: the replicas' prefix-cache token hit rate (Δ ``vllm:prefix_cache_hits_total`` / Δ
``..._queries_total``), client TTFT p50/p90 (send → first content chunk, streamed), and the
ratio document/score. Replicas and gateway are restarted between the two (empty KV caches).

Part 2 — a RAG request answered from the cache against one that misses (caches on, replicas at
``--speed 0`` so a miss costs the gateway's own work: retrieval, prompt, relay): latency p50/p90
of misses (distinct questions), exact hits (the same again) and semantic hits (a paraphrase).

    .venv/bin/python bench/rag.py [--requests 240] [--concurrency 4]

The replicas are SIMULATED: the prefix-cache figures and TTFTs are the simulator's model of a
vLLM replica, not measurements of one; nothing here says anything about answer quality. Writes
``bench/results/rag.json``. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    HOST,
    REPO_ROOT,
    RESULTS_DIR,
    SERVER_CPU,
    banner,
    percentile,
    run_guarded,
    run_meta,
    start_gateway,
    start_sim,
    stop_process,
    table,
)

MODEL = "deja-sim-1"
ADMIN = "bench-admin"
CORPUS = "deja-docs"
TEMPLATES = (
    "What does the documentation say about {}?",
    "Explain {} in deja.",
    "How does {} work?",
    "Tell me about {}.",
)
QUALIFIERS = (
    "",
    "for a new user",
    "in production",
    "step by step",
    "briefly",
    "with an example",
    "and why",
    "on one machine",
    "for ops",
    "in detail",
)
DOC_FILES = ("README.md", "docs/architecture.md", "docs/verifier-model-card.md")


def headings() -> list[str]:
    """Section titles of the corpus (the workload's topics)."""
    found: list[str] = []
    for name in DOC_FILES:
        path = REPO_ROOT / name
        if not path.exists():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            match = re.match(r"#{2,3} (.+)", line)
            if match:
                title = re.sub(r"[`*_()]", "", match.group(1)).strip()
                if 3 <= len(title) <= 60:
                    found.append(title)
    return sorted(set(found))


def workload(args: argparse.Namespace) -> list[str]:
    rng = random.Random(args.seed)
    topics = headings()
    rng.shuffle(topics)
    topics = topics[: args.topics]
    weights = [1 / (i + 1) ** args.zipf for i in range(len(topics))]
    questions = []
    for number in range(args.requests + args.warmup):
        topic = rng.choices(topics, weights)[0]
        question = rng.choice(TEMPLATES[: args.variants]).format(topic)
        # every question is distinct (a new user's wording), its topic shared with others
        questions.append(f"{question} {rng.choice(QUALIFIERS)} (question {number})")
    return questions


async def ingest(base: str) -> int:
    """The docs into the corpus through the admin API; returns chunks written."""
    written = 0
    async with httpx.AsyncClient(base_url=base, timeout=300) as http:
        for name in DOC_FILES:
            path = REPO_ROOT / name
            reply = await http.put(
                f"/admin/corpora/{CORPUS}/documents/{name}",
                content=path.read_bytes(),
                headers={"authorization": f"Bearer {ADMIN}", "content-type": "text/markdown"},
            )
            reply.raise_for_status()
            written += int(reply.json().get("chunks", 0))
    return written


def first_token(payload: str) -> bool:
    """True for an event carrying generated text (the role-only first event does not)."""
    try:
        chunk = json.loads(payload)
    except ValueError:
        return False
    return any((c.get("delta") or {}).get("content") for c in chunk.get("choices") or [])


async def ask_stream(http: httpx.AsyncClient, question: str) -> float:
    """Send one streamed RAG question; seconds to its first content chunk."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": question}],
        "stream": True,
        "max_tokens": 16,
    }
    started = time.perf_counter()
    first = None
    async with http.stream(
        "POST", "/v1/chat/completions", json=body, headers={"x-deja-corpus": CORPUS}
    ) as reply:
        reply.raise_for_status()
        async for line in reply.aiter_lines():
            if first is None and line.startswith("data: {") and first_token(line[6:]):
                first = time.perf_counter()
    return (first or time.perf_counter()) - started


async def send_all(base: str, questions: list[str], concurrency: int) -> list[float]:
    ttfts: list[float] = []
    queue = list(enumerate(questions))
    async with httpx.AsyncClient(base_url=base, timeout=120) as http:

        async def worker() -> None:
            while queue:
                _, question = queue.pop(0)
                ttfts.append(await ask_stream(http, question))

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return ttfts


def prefix_counters(urls: list[str]) -> tuple[float, float]:
    hits = queries = 0.0
    for url in urls:
        text = httpx.get(url + "/metrics", timeout=10).text
        for line in text.splitlines():
            if line.startswith("vllm:prefix_cache_hits_total"):
                hits += float(line.rsplit(" ", 1)[1])
            elif line.startswith("vllm:prefix_cache_queries_total"):
                queries += float(line.rsplit(" ", 1)[1])
    return hits, queries


def sim_args(args: argparse.Namespace, speed: float) -> list[str]:
    return [
        "--speed",
        str(speed),
        "--kv-blocks",
        str(args.kv_blocks),
        "--prefill-ms-per-token",
        str(args.prefill_ms),
        "--decode-ms-per-token",
        "2",
    ]


def gateway_env(order: str, *, cache: bool, top_k: int = 4) -> dict[str, str]:
    return {
        "DEJA_ADMIN_KEY": ADMIN,
        "DEJA_CORPORA_ENABLED": "true",
        "DEJA_CACHE_ENABLED": "true" if cache else "false",
        "DEJA_SEMANTIC_ENABLED": "true" if cache else "false",
        "DEJA_RAG_CONTEXT_ORDER": order,
        "DEJA_RAG_TOP_K": str(top_k),
    }


def prefix_run(
    args: argparse.Namespace, order: str, top_k: int, questions: list[str]
) -> dict[str, Any]:
    sims = [start_sim(f"sim-{order}-{i}", cpu=None, args=sim_args(args, 1.0)) for i in range(2)]
    urls = [f"http://{HOST}:{s.port}" for s in sims]
    env = gateway_env(order, cache=False, top_k=top_k)
    gateway = start_gateway(f"gw-{order}-{top_k}", urls, cpu=SERVER_CPU, env=env)
    base = f"http://{HOST}:{gateway.port}"
    try:
        chunks = asyncio.run(ingest(base))
        warm = questions[: args.warmup]  # fills the KV caches; not measured
        asyncio.run(send_all(base, warm, args.concurrency))
        hits0, queries0 = prefix_counters(urls)
        ttfts = asyncio.run(send_all(base, questions[args.warmup :], args.concurrency))
        hits1, queries1 = prefix_counters(urls)
    finally:
        stop_process(gateway)
        for sim in sims:
            stop_process(sim)
    queries = queries1 - queries0
    return {
        "order": order,
        "top_k": top_k,
        "chunks_ingested": chunks,
        "requests": len(ttfts),
        "prefix_hit_rate": (hits1 - hits0) / queries if queries else 0.0,
        "ttft_p50_ms": percentile(ttfts, 50) * 1000,
        "ttft_p90_ms": percentile(ttfts, 90) * 1000,
    }


async def timed(http: httpx.AsyncClient, question: str) -> tuple[float, str]:
    body = {"model": MODEL, "messages": [{"role": "user", "content": question}], "max_tokens": 16}
    started = time.perf_counter()
    reply = await http.post("/v1/chat/completions", json=body, headers={"x-deja-corpus": CORPUS})
    reply.raise_for_status()
    return time.perf_counter() - started, reply.headers["x-deja-cache"]


async def hit_vs_miss(base: str, topics: list[str]) -> dict[str, Any]:
    seen: dict[str, list[float]] = {"miss": [], "exact": [], "semantic": []}
    async with httpx.AsyncClient(base_url=base, timeout=120) as http:
        for topic in topics:
            for question in (
                f"How do I use {topic}?",  # miss: retrieve + replica
                f"How do I use {topic}?",  # exact hit
                f"How can I use {topic}?",  # a paraphrase: semantic hit if verified
            ):
                seconds, outcome = await timed(http, question)
                if outcome in seen:
                    seen[outcome].append(seconds)
                await asyncio.sleep(0.05)  # the store runs after the response
    return {
        kind: {
            "count": len(values),
            "p50_ms": percentile(values, 50) * 1000,
            "p90_ms": percentile(values, 90) * 1000,
        }
        for kind, values in seen.items()
    }


def latency_run(args: argparse.Namespace) -> dict[str, Any]:
    sims = [start_sim(f"sim-fast-{i}", cpu=None, args=sim_args(args, 0.0)) for i in range(2)]
    urls = [f"http://{HOST}:{s.port}" for s in sims]
    gateway = start_gateway(
        "gw-cache", urls, cpu=SERVER_CPU, env=gateway_env("document", cache=True)
    )
    base = f"http://{HOST}:{gateway.port}"
    try:
        asyncio.run(ingest(base))
        return asyncio.run(hit_vs_miss(base, headings()[: args.latency_topics]))
    finally:
        stop_process(gateway)
        for sim in sims:
            stop_process(sim)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=240)
    parser.add_argument("--warmup", type=int, default=40)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--topics", type=int, default=30)
    parser.add_argument("--variants", type=int, default=4)
    parser.add_argument("--zipf", type=float, default=1.0)
    parser.add_argument("--kv-blocks", type=int, default=2048)
    parser.add_argument("--prefill-ms", type=float, default=0.25)
    parser.add_argument("--latency-topics", type=int, default=30)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--top-k",
        type=int,
        nargs="+",
        default=[4, 8],
        help="Chunks per prompt (each a pair of runs).",
    )
    parser.add_argument("--skip-latency", action="store_true", help="Part 1 only.")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    results: dict[str, Any] = {"meta": run_meta(args, "deja sim (SIMULATED)")}

    def body() -> None:
        questions = workload(args)
        banner("Part 1: prefix cache, document order vs score order (SIMULATED replicas)")
        runs = [
            prefix_run(args, order, top_k, questions)
            for top_k in args.top_k
            for order in ("document", "score")
        ]
        results["prefix"] = runs
        columns = ("top_k", "order", "requests", "prefix_hit_rate", "ttft_p50_ms", "ttft_p90_ms")
        print(
            table(
                ["top k", "order", "requests", "prefix hit rate", "TTFT p50 ms", "TTFT p90 ms"],
                [[r[c] for c in columns] for r in runs],
            )
        )
        for doc, score in zip(runs[::2], runs[1::2], strict=True):
            rate = score["prefix_hit_rate"]
            ratio = doc["prefix_hit_rate"] / rate if rate else 0.0
            doc["prefix_ratio"] = ratio
            print(
                f"top {doc['top_k']}: prefix-cache hit rate document/score {ratio:.2f}x; TTFT "
                f"p50 score/document {score['ttft_p50_ms'] / doc['ttft_p50_ms']:.2f}x, "
                f"p90 {score['ttft_p90_ms'] / doc['ttft_p90_ms']:.2f}x"
            )
        if args.skip_latency:
            RESULTS_DIR.mkdir(exist_ok=True)
            (RESULTS_DIR / "rag.json").write_text(json.dumps(results, indent=2))
            return
        banner("Part 2: a RAG request from the cache vs a miss (replicas at speed 0)")
        latency = latency_run(args)
        results["hit_vs_miss"] = latency
        print(
            table(
                ["outcome", "count", "p50 ms", "p90 ms"],
                [[k, v["count"], v["p50_ms"], v["p90_ms"]] for k, v in latency.items()],
            )
        )
        miss = latency["miss"]["p50_ms"]
        for kind in ("exact", "semantic"):
            if latency[kind]["count"]:
                print(f"{kind} hit p50 / miss p50: {latency[kind]['p50_ms'] / miss:.3f}")
        RESULTS_DIR.mkdir(exist_ok=True)
        (RESULTS_DIR / "rag.json").write_text(json.dumps(results, indent=2))

    return run_guarded(body) or 0


if __name__ == "__main__":
    raise SystemExit(main())
