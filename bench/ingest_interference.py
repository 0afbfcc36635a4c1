"""What an ingest costs the request path: question-embedding latency (``OnnxEmbedder.embed``,
the semantic cache's and retrieval's first step) while ``Corpora.ingest`` embeds with 1 or 2
threads, against the same questions with no ingest, in one process, interleaved rounds.

The pages are the first ``--pages`` WikiQA pages (``../shared/data``); the questions are
bench/corpus.py's, one every 20 ms (an open loop: a question does not wait for the previous).

    .venv/bin/python bench/ingest_interference.py [--pages 200] [--rounds 2]

About a minute. Writes bench/results/ingest_interference.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import RESULTS_DIR, banner, percentile, run_meta, table, write_record
from corpus import DIM, MODEL_DIR, QUESTIONS, edge_chunks, paragraph_files

from deja.corpus.index import corpus_collection
from deja.corpus.service import Corpora, CorpusSettings
from deja.embedding.onnx.embedder import OnnxEmbedder, load_onnx_embedder


async def ask(embedder: OnnxEmbedder, seconds: float, out: list[float]) -> None:
    async def one(text: str) -> None:
        started = time.perf_counter()
        await embedder.embed(text)
        out.append((time.perf_counter() - started) * 1e3)

    tasks = []
    end = time.perf_counter() + seconds
    i = 0
    while time.perf_counter() < end:
        tasks.append(asyncio.create_task(one(QUESTIONS[i % len(QUESTIONS)])))
        i += 1
        await asyncio.sleep(0.02)
    await asyncio.gather(*tasks)


async def measure(embedder: OnnxEmbedder, threads: int, pages: int, work: Path) -> dict[str, Any]:
    latencies: list[float] = []
    if threads == 0:
        await ask(embedder, 5.0, latencies)
        return {
            "ingest_s": 0.0,
            "p50_ms": percentile(latencies, 50),
            "p99_ms": percentile(latencies, 99),
        }
    store = edge_chunks(work / f"t{threads}-{time.monotonic_ns()}", corpus_collection("b", DIM))
    await store.open()
    try:
        corpora = Corpora(store, embedder, settings=CorpusSettings(embed_threads=threads))
        started = time.perf_counter()
        ingest = asyncio.create_task(corpora.ingest("b", "wiki", paragraph_files(pages)))
        while not ingest.done():
            await ask(embedder, 1.0, latencies)
        report = await ingest
        wall = time.perf_counter() - started
    finally:
        await store.close()
    chunks = sum(f.chunks for f in report.files)
    return {
        "ingest_s": wall,
        "chunks_per_s": chunks / wall,
        "p50_ms": percentile(latencies, 50),
        "p99_ms": percentile(latencies, 99),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "ingest_interference.json")
    args = parser.parse_args()
    meta = run_meta(args, "none (in-process embedder and store)")
    print(meta["load_at_start"])

    async def run() -> dict[str, list[dict[str, Any]]]:
        embedder = load_onnx_embedder(MODEL_DIR)
        runs: dict[str, list[dict[str, Any]]] = {"no ingest": [], "1 thread": [], "2 threads": []}
        try:
            for r in range(args.rounds):
                order = [0, 1, 2] if r % 2 == 0 else [2, 1, 0]
                for threads in order:
                    name = list(runs)[threads]
                    runs[name].append(await measure(embedder, threads, args.pages, work))
                    print(f"  round {r} {name}: {json.dumps(runs[name][-1])}", flush=True)
        finally:
            await embedder.close()
        return runs

    with tempfile.TemporaryDirectory(prefix="deja-interference-") as tmp:
        work = Path(tmp)
        runs = asyncio.run(run())
    banner("question embedding latency during an ingest (ms; median over rounds)")
    rows = []
    for name, figs in runs.items():
        med = sorted(figs, key=lambda f: f["p99_ms"])[len(figs) // 2]
        rows.append([name, med.get("chunks_per_s", 0.0), med["p50_ms"], med["p99_ms"]])
    print(table(["ingest", "chunks/s", "embed p50", "embed p99"], rows, digits=2))
    write_record(args.output, meta, {"runs": runs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
