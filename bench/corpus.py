"""Corpora: ingest throughput on a real corpus, and retrieval latency with tenant filters.

The real corpus is the Python 3.11 documentation as Debian ships it (``apt-get install
python3.11-doc``: Sphinx HTML under /usr/share/doc/python3.11/html). By default its tutorial
(17 pages, 0.9 MB, about 500 chunks: about a minute of embedding on one busy core);
``--sections tutorial howto reference`` ingests more. ``--paragraphs N`` ingests instead the
first N one-paragraph pages of WikiQA (``../shared/data/wikiqa_train.jsonl.gz``: a Wikipedia
summary paragraph each, about two 200-token chunks), the case of issue 21's 2,328-page folder.

A. Ingest, side by side in one run, on Qdrant Edge with the real ONNX embedder:
   * ``Corpora.ingest`` of every page (parse, chunk, embed, upsert): chunks/s;
   * the same pages parsed and chunked only, and the embedder alone (``embed_batch``) on a
     sample of the same chunk texts: their rates beside the ingest rate say where the time goes;
   * a second ``Corpora.ingest`` of the same pages (all unchanged): files/s.
B. Retrieval latency through ``Corpora.retrieve`` (k=5, filtered by tenant and corpus, the
   over-fetch and version filter included) at 10k chunks (``--sizes 10000 100000`` adds 100k:
   minutes more). The chunks are NOT all
   embedded (100k would take hours here): each is one of A's embedded sample chunks (its real
   vector and text) plus Gaussian noise on the vector (sigma 0.03 per dimension, cosine ~0.86 to
   its source), spread over 20 tenants x 2 corpora, plus one large corpus holding
   ``--large-share`` of all chunks (the worst case: Edge scans the filtered corpus exactly).
   Queries are real questions about Python, embedded by the same embedder. Every query's top
   hit is checked against an exact numpy search over its corpus.

    .venv/bin/python bench/corpus.py [--sections tutorial] [--sizes 10000 100000]
    .venv/bin/python bench/corpus.py --paragraphs 100 --sample 60   # issue 21's one-paragraph case

Each runs in under three minutes on the 2-core machine (the embedder is most of it).

Writes bench/results/corpus.json. Figures come from a shared 2-core machine: see the load note.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import random
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from common import RESULTS_DIR, banner, load_note, percentile, table

from deja.corpus.base import Chunk
from deja.corpus.chunking import chunk_document
from deja.corpus.files import collect, content_type_for
from deja.corpus.index import CHUNK_INDEXES, ChunkPoint, ChunkStore, corpus_collection
from deja.corpus.ingest import embed_texts
from deja.corpus.parsing import parse_document
from deja.corpus.reports import SourceFile
from deja.corpus.service import Corpora, CorpusSettings, token_counter
from deja.embedding.onnx.embedder import OnnxEmbedder, load_onnx_embedder
from deja.vectors.edge import EdgeCollection

DOCS = Path("/usr/share/doc/python3.11/html")
MODEL_DIR = RESULTS_DIR / ".cache" / "models"
DIM = 384
K = 5
NOISE = 0.03
QUESTIONS = [
    "How do I define a function with default argument values?",
    "What is the difference between a list and a tuple?",
    "How can I read a file line by line?",
    "How do I handle an exception and still run cleanup code?",
    "What does the range function return?",
    "How do list comprehensions work?",
    "How do I create a virtual environment?",
    "What is a dictionary and how do I loop over its keys and values?",
    "How do I format a string with variables in it?",
    "How do classes inherit from other classes?",
    "What does the break statement do inside a loop?",
    "How do I import a module from a package?",
    "How do I write lambda expressions?",
    "What are generators and the yield statement?",
    "How do floating point numbers lose precision?",
    "How do I use keyword-only arguments?",
    "What is the with statement for?",
    "How do I sort a list of records by a key?",
    "How are modules found on the search path?",
    "How do I unpack argument lists with star syntax?",
]


@dataclass
class Seeds:
    """Real chunks (text and vector) that part B's synthetic chunks are derived from."""

    texts: list[str]
    vectors: np.ndarray


def timed(fn: Any, *args: Any) -> tuple[Any, float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - wall, time.process_time() - cpu


async def atimed(coro: Any) -> tuple[Any, float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    result = await coro
    return result, time.perf_counter() - wall, time.process_time() - cpu


def source_files(sections: list[str]) -> list[SourceFile]:
    files = []
    for section in sections:
        for document, path in collect([DOCS / section], DOCS).files:
            files.append(SourceFile(document, path.read_bytes(), content_type_for(path)))
    return files


def paragraph_files(n: int) -> list[SourceFile]:
    """The first ``n`` distinct WikiQA pages, one plain-text document each."""
    data = Path(__file__).resolve().parents[2] / "shared" / "data" / "wikiqa_train.jsonl.gz"
    pages: dict[str, None] = {}
    with gzip.open(data, "rt") as fh:
        for line in fh:
            pages.setdefault(" ".join(json.loads(line)["sentences"]))
            if len(pages) == n:
                break
    return [SourceFile(f"page-{i}.txt", p.encode(), "text/plain") for i, p in enumerate(pages)]


def parse_and_chunk(files: list[SourceFile], model_id: str) -> list[str]:
    settings = CorpusSettings()
    _, count = token_counter(model_id)
    texts = []
    for f in files:
        doc = parse_document(f.document, f.data, content_type=f.content_type, max_bytes=10**9)
        texts += [
            c.text
            for c in chunk_document(
                doc, max_tokens=settings.chunk_tokens, overlap=settings.chunk_overlap, count=count
            )
        ]
    return texts


async def ingest_once(
    embedder: OnnxEmbedder, files: list[SourceFile], data_dir: Path, threads: int
) -> tuple[int, float, float, float, float]:
    """One ``Corpora.ingest`` of ``files`` into a fresh store with ``threads`` embedding
    threads, then a second (all unchanged): chunks, wall and CPU seconds of each."""
    store = edge_chunks(data_dir, corpus_collection("bench", DIM))
    await store.open()
    try:
        corpora = Corpora(store, embedder, settings=CorpusSettings(embed_threads=threads))
        report, ingest_s, ingest_cpu = await atimed(corpora.ingest("bench", "py", files))
        assert not report.failed, [(f.document, f.reason) for f in report.failed]
        again, again_s, again_cpu = await atimed(corpora.ingest("bench", "py", files))
        assert all(f.status == "unchanged" for f in again.files), again.counts()
    finally:
        await store.close()
    shutil.rmtree(data_dir, ignore_errors=True)
    return sum(f.chunks for f in report.files), ingest_s, ingest_cpu, again_s, again_cpu


async def bench_ingest(
    embedder: OnnxEmbedder, files: list[SourceFile], workdir: Path, args: argparse.Namespace
) -> tuple[dict[str, Any], Seeds]:
    """Ingest with each of ``args.threads`` embedding threads, ``args.rounds`` interleaved rounds
    (A B, B A, ...): the best round of each; then parse+chunk alone and embed_batch alone."""
    runs: dict[int, list[tuple[int, float, float, float, float]]] = {t: [] for t in args.threads}
    for round_ in range(args.rounds):
        order = args.threads if round_ % 2 == 0 else list(reversed(args.threads))
        for threads in order:
            data_dir = workdir / f"ingest-{round_}-{threads}"
            runs[threads].append(await ingest_once(embedder, files, data_dir, threads))
    best = {t: min(r, key=lambda run: run[1]) for t, r in runs.items()}
    texts, parse_s, parse_cpu = timed(parse_and_chunk, files, embedder.model_id)
    picked = random.Random(0).sample(texts, min(args.sample, len(texts)))
    vectors, embed_s, embed_cpu = timed(embedder.embed_batch, picked)
    split_vectors = await embed_texts(embedder, picked, 32, max(args.threads))
    differ = float(np.abs(np.asarray(split_vectors) - np.asarray(vectors)).max())
    figures = {
        "files": len(files),
        "bytes": sum(len(f.data) for f in files),
        "chunks": next(iter(best.values()))[0],
        "ingest": {
            t: {
                "ingest_s": s,
                "ingest_cpu_s": c,
                "ingest_chunks_per_s": n / s,
                "rounds_chunks_per_s": [run[0] / run[1] for run in runs[t]],
                "reingest_unchanged_s": again_s,
                "reingest_files_per_s": len(files) / again_s,
            }
            for t, (n, s, c, again_s, _) in best.items()
        },
        "parse_chunk_s": parse_s,
        "parse_chunk_cpu_s": parse_cpu,
        "parse_chunk_chunks_per_s": len(texts) / parse_s,
        "embed_only_sample": len(picked),
        "embed_only_s": embed_s,
        "embed_only_chunks_per_s": len(picked) / embed_s,
        "embed_only_cpu_s": embed_cpu,
        "split_vs_one_thread_max_abs_diff": differ,
    }
    return figures, Seeds(picked, np.asarray(vectors, dtype=np.float32))


@dataclass
class Layout:
    """Part B's synthetic chunks: which seed, which corpus, and the vectors (for the check)."""

    seed_of: np.ndarray
    corpus_of: np.ndarray
    vectors: np.ndarray
    corpora: list[tuple[str, str]]  # index -> (tenant, corpus); the last one is the large corpus


def make_layout(n: int, seeds: Seeds, tenants: int, large_share: float) -> Layout:
    rng = np.random.default_rng(n)
    corpora = [(f"tenant-{t}", f"docs-{c}") for t in range(tenants) for c in range(2)]
    corpora.append(("tenant-big", "docs"))
    large = len(corpora) - 1
    corpus_of = rng.integers(0, large, size=n)
    corpus_of[rng.random(n) < large_share] = large
    seed_of = rng.integers(0, len(seeds.texts), size=n)
    vectors = seeds.vectors[seed_of] + rng.standard_normal((n, DIM), dtype=np.float32) * NOISE
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return Layout(seed_of, corpus_of, vectors, corpora)


def edge_chunks(data_dir: Path, collection: str) -> ChunkStore:
    """The chunk store on an embedded Edge shard, as the gateway builds it."""
    return ChunkStore(
        EdgeCollection(data_dir, collection=collection, dim=DIM, indexes=CHUNK_INDEXES)
    )


async def build(store: ChunkStore, layout: Layout, seeds: Seeds, batch: int) -> float:
    started = time.perf_counter()
    for lo in range(0, len(layout.seed_of), batch):
        hi = min(lo + batch, len(layout.seed_of))
        rows = layout.vectors[lo:hi].tolist()
        points = []
        for i in range(lo, hi):
            tenant, corpus = layout.corpora[layout.corpus_of[i]]
            text = seeds.texts[layout.seed_of[i]]
            chunk = Chunk(tenant, corpus, f"doc-{i // 20}", 1, i % 20, text, text.split("\n")[0])
            points.append(ChunkPoint(chunk, rows[i - lo], "hash"))
        await store.upsert(points)
    return time.perf_counter() - started


async def time_queries(
    corpora: Corpora, layout: Layout, queries: np.ndarray, large: bool, count: int, warmup: int
) -> dict[str, Any]:
    rng = random.Random(7 if large else 8)
    big = len(layout.corpora) - 1
    wall: list[float] = []
    cpu: list[float] = []
    agree = checked = 0
    for i in range(warmup + count):
        target = big if large else rng.randrange(big)
        q = rng.randrange(len(queries))
        tenant, corpus = layout.corpora[target]
        vector = queries[q].tolist()
        hits, w, c = await atimed(corpora.retrieve(tenant, corpus, vector, limit=K))
        if i < warmup:
            continue
        wall.append(w * 1e3)
        cpu.append(c * 1e3)
        members = np.flatnonzero(layout.corpus_of == target)
        best = int(members[int(np.argmax(layout.vectors[members] @ queries[q]))])
        checked += 1
        top = hits[0].chunk if hits else None
        agree += top is not None and (top.document, top.index) == (f"doc-{best // 20}", best % 20)
        assert all((h.chunk.tenant, h.chunk.corpus) == (tenant, corpus) for h in hits)
    members = int((layout.corpus_of == (big if large else 0)).sum())
    return {
        "chunks_in_corpus": members,
        "p50_ms": percentile(wall, 50),
        "p99_ms": percentile(wall, 99),
        "cpu_p50_ms": percentile(cpu, 50),
        "cpu_p99_ms": percentile(cpu, 99),
        "top1_agreement": agree / checked,
    }


async def bench_retrieval(
    embedder: OnnxEmbedder, seeds: Seeds, workdir: Path, args: argparse.Namespace
) -> list[dict[str, Any]]:
    queries = np.asarray(embedder.embed_batch(QUESTIONS), dtype=np.float32)
    results = []
    for n in args.sizes:
        layout = make_layout(n, seeds, args.tenants, args.large_share)
        store = edge_chunks(workdir / f"n{n}", corpus_collection("b", DIM))
        await store.open()
        try:
            build_s = await build(store, layout, seeds, args.batch)
            corpora = Corpora(store, embedder)
            await corpora.refresh()
            row: dict[str, Any] = {"chunks": n, "build_s": build_s}
            for name, large in (("uniform", False), ("large", True)):
                row[name] = await time_queries(
                    corpora, layout, queries, large, args.queries, args.warmup
                )
        finally:
            await store.close()
        shutil.rmtree(workdir / f"n{n}", ignore_errors=True)
        print(f"  {n:,} chunks: built in {build_s:.1f}s", flush=True)
        results.append(row)
    return results


def report(ingest: dict[str, Any], retrieval: list[dict[str, Any]], source: str) -> None:
    banner(f"A. ingest: {source}, Qdrant Edge, ONNX MiniLM")
    print(
        f"{ingest['files']} files, {ingest['bytes'] / 1e6:.2f} MB -> {ingest['chunks']} chunks "
        "(0 failed)"
    )
    n_texts = ingest["parse_chunk_chunks_per_s"] * ingest["parse_chunk_s"]
    one = ingest["ingest"][min(ingest["ingest"])]
    rate = one["ingest_chunks_per_s"]
    rows = [
        [
            f"Corpora.ingest, {t} embedding thread{'s' * (t > 1)} (parse+chunk+embed+store)",
            r["ingest_chunks_per_s"],
            r["ingest_chunks_per_s"] / rate,
            1e3 * r["ingest_cpu_s"] / ingest["chunks"],
        ]
        for t, r in ingest["ingest"].items()
    ]
    rows += [
        [
            "parse + chunk only",
            ingest["parse_chunk_chunks_per_s"],
            ingest["parse_chunk_chunks_per_s"] / rate,
            1e3 * ingest["parse_chunk_cpu_s"] / n_texts,
        ],
        [
            f"embed_batch only, 1 thread ({ingest['embed_only_sample']} chunks)",
            ingest["embed_only_chunks_per_s"],
            ingest["embed_only_chunks_per_s"] / rate,
            1e3 * ingest["embed_only_cpu_s"] / ingest["embed_only_sample"],
        ],
    ]
    print(table(["path", "chunks/s", "x 1 thread", "CPU ms/chunk"], rows, digits=2))
    for t, r in ingest["ingest"].items():
        rounds = ", ".join(f"{x:.1f}" for x in r["rounds_chunks_per_s"])
        print(
            f"{t} thread(s): rounds {rounds} chunks/s; re-ingest unchanged "
            f"{r['reingest_unchanged_s'] * 1e3:.0f} ms ({r['reingest_files_per_s']:,.0f} files/s)"
        )
    print(
        "vectors split over threads vs one thread: max |diff| "
        f"{ingest['split_vs_one_thread_max_abs_diff']:.1e}"
    )
    banner(f"B. retrieval through Corpora.retrieve, k={K}, tenant+corpus filter (ms)")
    rows = []
    for res in retrieval:
        for name in ("uniform", "large"):
            r = res[name]
            rows.append(
                [
                    f"{res['chunks']:,}",
                    name,
                    r["chunks_in_corpus"],
                    r["p50_ms"],
                    r["p99_ms"],
                    r["cpu_p50_ms"],
                    r["cpu_p99_ms"],
                    r["top1_agreement"],
                ]
            )
    headers = ["chunks", "corpus", "in corpus", "p50", "p99", "cpu p50", "cpu p99", "top-1 exact"]
    print(table(headers, rows, digits=2))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sections", nargs="+", default=["tutorial"])
    parser.add_argument("--paragraphs", type=int, default=0, help="WikiQA pages instead")
    parser.add_argument("--sample", type=int, default=150, help="chunks embedded alone (A)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="embedding threads")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved ingest rounds (A)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000])
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument("--large-share", type=float, default=0.3)
    parser.add_argument("--queries", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=40)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "corpus.json")
    args = parser.parse_args()
    if not args.paragraphs and not DOCS.is_dir():
        print(f"{DOCS} is missing: apt-get install python3.11-doc", file=sys.stderr)
        return 2
    print(load_note())
    files = paragraph_files(args.paragraphs) if args.paragraphs else source_files(args.sections)
    workdir = Path(tempfile.mkdtemp(prefix="deja-corpus-bench-"))

    async def run() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        embedder = load_onnx_embedder(MODEL_DIR)
        try:
            print(f"embedder {embedder.model_id}; ingesting {len(files)} files ...", flush=True)
            ingest, seeds = await bench_ingest(embedder, files, workdir, args)
            return ingest, await bench_retrieval(embedder, seeds, workdir, args)
        finally:
            await embedder.close()

    try:
        ingest, retrieval = asyncio.run(run())
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    source = "WikiQA one-paragraph pages" if args.paragraphs else "Python 3.11 docs"
    report(ingest, retrieval, source)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    record = {"args": {k: str(v) for k, v in vars(args).items()}, "ingest": ingest}
    args.output.write_text(json.dumps({**record, "retrieval": retrieval}, indent=2))
    print(f"\nwritten: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
