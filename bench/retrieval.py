"""Retrieval quality and latency on real QA data: WikiQA pages as a corpus, its questions asked.

Data: ``../shared/data/wikiqa_train.jsonl.gz`` (WikiQA train, Microsoft Research, research use).
Each question comes with the summary paragraph of one Wikipedia page (its sentences, in order)
and the indices of the sentences that answer it (873 questions have one). Every distinct page
(1,994) is ingested as one document of one corpus through the real ingest path
(``Corpora.ingest``: parse, chunk, embed with the ONNX MiniLM, BM25 sparse vectors, upsert to
Qdrant Edge), together with distractors: the Python 3.11 documentation Debian ships
(``apt-get install python3.11-doc``; ``--sections``), so that a question is matched against
thousands of chunks.

Questions and pages are split in two halves by a fixed hash of the page text: the floor and the
search mode are chosen on the ``tune`` half and reported on the ``test`` half (the project is
judged on held-out WikiQA questions). Both halves' pages are in the corpus.

For each search mode (dense, sparse, hybrid) every answerable question is retrieved once through
``Corpora.retrieve`` with the floor off (the 10 best chunks); each floor is then applied to that
ranking with the same ``Floor.keep`` the gateway runs, so all configurations are compared on the
same retrievals. Reported per configuration: page recall (the question's page among the chunks
put in the prompt), answer-chunk recall@1 (the first chunk holds an answer sentence), MRR of the
answer chunk and of the page (over the 10), chunks and pages per prompt, the share of irrelevant
chunks (not of the question's page) dropped by the floor against top-k without one.

Latency: ``Corpora.retrieve`` per mode on the real corpus, then at 10k and 100k chunks with
SYNTHETIC filler chunks (random unit vectors, text of words drawn from the WikiQA vocabulary, so
the sparse index has a realistic vocabulary) added to the same corpus; the question embedding is
not included (it is the same for every mode: ``bench/embedder.py`` has it).

    .venv/bin/python bench/retrieval.py [--sections tutorial howto faq] [--sizes 10000 100000]

Writes bench/results/retrieval.json. Figures come from a shared 2-core machine.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import hashlib
import json
import random
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from common import RESULTS_DIR, banner, load_note, percentile, table
from corpus import DOCS, MODEL_DIR, source_files

from config.rag import RagSettings
from deja.corpus.base import Chunk, RetrievedChunk
from deja.corpus.index import CHUNK_INDEXES, ChunkPoint, ChunkStore, corpus_collection
from deja.corpus.relevance import Floor
from deja.corpus.reports import SourceFile
from deja.corpus.service import Corpora, CorpusSettings
from deja.embedding.onnx.embedder import load_onnx_embedder
from deja.vectors.edge import EdgeCollection
from deja.vectors.hybrid import SearchMode, SparseEncoder

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "wikiqa_train.jsonl.gz"
TENANT, CORPUS = "bench", "wiki"
MODES: tuple[SearchMode, ...] = ("dense", "sparse", "hybrid")
FETCH = 10
TOP_K = 4
FLOORS = [round(x, 2) for x in np.arange(0.0, 0.65, 0.05)]
MARGINS: list[float | None] = [None, 0.02, 0.05, 0.08, 0.1, 0.12, 0.15, 0.2, 0.3]
#: The tuning goal: the page in the prompt for at least this share of tune questions, with the
#: fewest pages per prompt (the issue's target is 97% held out; tuned with a little room).
RECALL_GOAL = 0.975
#: The gateway's floor as configured by default (``rag_min_score``, ``rag_score_margin``).
_RAG = RagSettings()
DEFAULT_FLOOR = Floor(_RAG.rag_min_score, _RAG.rag_score_margin)


@dataclass
class Question:
    text: str
    page: str  # document id
    answers: list[str]  # answer sentences
    half: str
    ranked: dict[str, list[RetrievedChunk]] = field(default_factory=dict)


def page_id(text: str) -> str:
    return "wiki-" + hashlib.sha256(text.encode()).hexdigest()[:16]


def half_of(page: str) -> str:
    """A fixed 50/50 split by the page's id (itself a hash of the page)."""
    return "tune" if int(page[-2:], 16) % 2 == 0 else "test"


def load_wikiqa() -> tuple[list[SourceFile], list[Question]]:
    pages: dict[str, str] = {}
    questions: list[Question] = []
    with gzip.open(DATA, "rt") as fh:
        for line in fh:
            row = json.loads(line)
            text = " ".join(row["sentences"])
            pid = page_id(text)
            pages[pid] = text
            if row["answers"]:
                answers = [row["sentences"][i] for i in row["answers"]]
                questions.append(Question(row["question"], pid, answers, half_of(pid)))
    files = [SourceFile(f"{pid}.txt", text.encode(), "text/plain") for pid, text in pages.items()]
    return files, questions


def _norm(text: str) -> str:
    return " ".join(text.split()).lower()


def holds_answer(chunk: Chunk, question: Question) -> bool:
    """The chunk holds an answer sentence (its first 60 characters: a sentence cut by the
    chunk boundary still counts for the chunk it starts in)."""
    body = _norm(chunk.text)
    return any(_norm(a)[:60] in body for a in question.answers)


def is_page(chunk: Chunk, question: Question) -> bool:
    return chunk.document == f"{question.page}.txt"


def evaluate(questions: list[Question], mode: str, floor: Floor | None) -> dict[str, Any]:
    found = answer_at1 = 0
    chunks = pages = irrelevant = 0
    rr_answer = rr_page = 0.0
    for q in questions:
        ranked = q.ranked[mode]
        kept = floor.keep(ranked, TOP_K) if floor is not None else ranked[:TOP_K]
        found += any(is_page(r.chunk, q) for r in kept)
        answer_at1 += bool(kept) and holds_answer(kept[0].chunk, q)
        chunks += len(kept)
        pages += len({r.chunk.document for r in kept})
        irrelevant += sum(not is_page(r.chunk, q) for r in kept)
        rr_answer += next((1 / i for i, r in enumerate(ranked, 1) if holds_answer(r.chunk, q)), 0)
        rr_page += next((1 / i for i, r in enumerate(ranked, 1) if is_page(r.chunk, q)), 0)
    n = len(questions) or 1
    return {
        "questions": len(questions),
        "page_recall": found / n,
        "answer_recall_at1": answer_at1 / n,
        "mrr_answer": rr_answer / n,
        "mrr_page": rr_page / n,
        "chunks_per_prompt": chunks / n,
        "pages_per_prompt": pages / n,
        "irrelevant_per_prompt": irrelevant / n,
    }


def tune(questions: list[Question], mode: str) -> tuple[Floor, dict[str, Any]]:
    """The floor with the fewest pages per prompt that keeps the page for RECALL_GOAL of the
    questions (ties: the higher recall)."""
    best: tuple[float, float, Floor, dict[str, Any]] | None = None
    for f in FLOORS:
        for m in MARGINS:
            floor = Floor(float(f), m)
            fig = evaluate(questions, mode, floor)
            if fig["page_recall"] < RECALL_GOAL:
                continue
            key = (fig["pages_per_prompt"], -fig["page_recall"])
            if best is None or key < best[:2]:
                best = (*key, floor, fig)
    if best is None:
        floor = Floor(-1.0, None)
        return floor, evaluate(questions, mode, floor)
    return best[2], best[3]


async def ingest(corpora: Corpora, files: list[SourceFile]) -> dict[str, Any]:
    started, cpu = time.perf_counter(), time.process_time()
    report = await corpora.ingest(TENANT, CORPUS, files)
    wall = time.perf_counter() - started
    chunks = sum(f.chunks for f in report.files)
    failed = [(f.document, f.reason) for f in report.failed]
    return {
        "files": len(files),
        "chunks": chunks,
        "failed": failed,
        "seconds": wall,
        "cpu_seconds": time.process_time() - cpu,
        "chunks_per_s": chunks / wall,
    }


async def retrieve_all(
    corpora: Corpora, questions: list[Question], vectors: np.ndarray
) -> dict[str, dict[str, float]]:
    latency: dict[str, dict[str, float]] = {}
    for mode in MODES:
        corpora.settings = CorpusSettings(
            search=mode, floor=Floor(-1.0, None), retrieval_timeout=60.0
        )
        times = []
        for q, v in zip(questions, vectors, strict=True):
            started = time.perf_counter()
            q.ranked[mode] = await corpora.retrieve(
                TENANT, CORPUS, v.tolist(), limit=FETCH, query=q.text
            )
            times.append((time.perf_counter() - started) * 1000)
        latency[mode] = {"p50_ms": percentile(times, 50), "p99_ms": percentile(times, 99)}
    return latency


async def add_filler(
    store: ChunkStore, encoder: SparseEncoder, n: int, vocabulary: list[str], seed: int
) -> None:
    """``n`` synthetic chunks (random unit vectors, random WikiQA words) in the same corpus."""
    rng = np.random.default_rng(seed)
    words = random.Random(seed)
    done = 0
    while done < n:
        size = min(2000, n - done)
        vecs = rng.standard_normal((size, 384)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        points = []
        for i in range(size):
            text = " ".join(words.choices(vocabulary, k=120))
            doc = f"filler-{seed}-{done + i}"
            chunk = Chunk(TENANT, CORPUS, doc, 1, 0, text)
            points.append(ChunkPoint(chunk, vecs[i].tolist(), "filler"))
        await store.upsert(points)
        done += size


async def time_modes(
    corpora: Corpora, questions: list[Question], vectors: np.ndarray, limit: int
) -> dict[str, dict[str, float]]:
    figures: dict[str, dict[str, float]] = {}
    for mode in MODES:
        corpora.settings = CorpusSettings(
            search=mode, floor=Floor(-1.0, None), retrieval_timeout=60.0
        )
        times = []
        for q, v in list(zip(questions, vectors, strict=True))[:limit]:
            started = time.perf_counter()
            await corpora.retrieve(TENANT, CORPUS, v.tolist(), limit=TOP_K, query=q.text)
            times.append((time.perf_counter() - started) * 1000)
        figures[mode] = {"p50_ms": percentile(times, 50), "p99_ms": percentile(times, 99)}
    return figures


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    wiki, questions = load_wikiqa()
    if args.pages:  # a smoke run: the first pages and their questions only
        wiki = wiki[: args.pages]
        kept = {f.document[:-4] for f in wiki}
        questions = [q for q in questions if q.page in kept]
    docs = source_files(args.sections) if args.sections else []
    embedder = load_onnx_embedder(MODEL_DIR)
    encoder = SparseEncoder(avg_len=0.75 * CorpusSettings().chunk_tokens)  # as the gateway's
    # The corpus shard is kept between runs (re-ingesting it finds every page unchanged), so a
    # rerun does not embed the pages again: delete the folder to measure a first ingest.
    store = chunk_store(args.shard, embedder.model_id, embedder.dim, encoder)
    await store.open()
    try:
        corpora = Corpora(store, embedder)
        print(f"ingesting {len(wiki)} WikiQA pages + {len(docs)} doc pages ...", flush=True)
        ingested = {"wikiqa": await ingest(corpora, wiki), "pydocs": await ingest(corpora, docs)}
        print(json.dumps(ingested), flush=True)
        vectors = np.asarray(embedder.embed_batch([q.text for q in questions]), dtype=np.float32)
        latency = {"corpus": await retrieve_all(corpora, questions, vectors)}
        latency["corpus"]["chunks"] = float(await store.count(TENANT, CORPUS))
    finally:
        await store.close()
    results = quality(questions)
    partial = {"ingest": ingested, "quality": results, "latency": latency}
    args.output.with_suffix(".partial.json").write_text(json.dumps(partial, indent=2))
    report(partial)  # the quality tables now: the latency sizes below take a while
    vocabulary = sorted({w for f in wiki for w in f.data.decode().split() if w.isalpha()})
    filler = chunk_store(workdir, embedder.model_id, embedder.dim, encoder)
    await filler.open()
    try:
        corpora = Corpora(filler, embedder)
        total = 0
        for size in args.sizes:
            await add_filler(filler, encoder, size - total, vocabulary, size)
            total = size
            latency[str(size)] = await time_modes(corpora, questions, vectors, args.queries)
            print(f"latency at {size}: {latency[str(size)]}", flush=True)
    finally:
        await filler.close()
        await embedder.close()
    return {"ingest": ingested, "quality": results, "latency": latency}


def chunk_store(path: Path, model_id: str, dim: int, encoder: SparseEncoder) -> ChunkStore:
    collection = EdgeCollection(
        path,
        collection=corpus_collection(model_id, dim),
        dim=dim,
        indexes=CHUNK_INDEXES,
        sparse=True,
    )
    return ChunkStore(collection, encoder)


def quality(questions: list[Question]) -> dict[str, Any]:
    tune_q = [q for q in questions if q.half == "tune"]
    test_q = [q for q in questions if q.half == "test"]
    results: dict[str, Any] = {"tune_questions": len(tune_q), "test_questions": len(test_q)}
    for mode in MODES:
        floor, tuned = tune(tune_q, mode)
        results[mode] = {
            "floor": {"min_score": floor.floor, "margin": floor.margin},
            "tune": tuned,
            "test_top_k": evaluate(test_q, mode, None),
            "test_floor": evaluate(test_q, mode, floor),
            "test_default": evaluate(test_q, mode, DEFAULT_FLOOR),
        }
    return results


def report(record: dict[str, Any]) -> None:
    banner("retrieval quality on the held-out half of WikiQA (test), top-k 4")
    rows = []
    q = record["quality"]
    for mode in MODES:
        for key in ("test_top_k", "test_floor", "test_default"):
            fig = q[mode][key]
            f = q[mode]["floor"]
            label = {
                "test_top_k": "top-k",
                "test_floor": f"tuned {f['min_score']}/{f['margin']}",
                "test_default": f"default {DEFAULT_FLOOR.floor}/{DEFAULT_FLOOR.margin}",
            }[key]
            rows.append(
                [
                    mode,
                    label,
                    fig["page_recall"],
                    fig["answer_recall_at1"],
                    fig["mrr_answer"],
                    fig["mrr_page"],
                    fig["chunks_per_prompt"],
                    fig["pages_per_prompt"],
                    fig["irrelevant_per_prompt"],
                ]
            )
    headers = ["mode", "floor", "page", "answer@1", "MRR ans", "MRR page", "chunks", "pages"]
    print(table([*headers, "irrelevant"], rows))
    banner("retrieval latency (Corpora.retrieve, ms; question embedding not included)")
    lat = record["latency"]
    rows = [
        [size, m, lat[size][m]["p50_ms"], lat[size][m]["p99_ms"]] for size in lat for m in MODES
    ]
    print(table(["chunks", "mode", "p50 ms", "p99 ms"], rows, digits=2))
    banner("ingest")
    for name, fig in record["ingest"].items():
        print(f"{name}: {fig['files']} files, {fig['chunks']} chunks, {fig['chunks_per_s']:.1f}/s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sections", nargs="*", default=["tutorial"])
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200, help="questions timed per size")
    parser.add_argument(
        "--shard",
        type=Path,
        default=RESULTS_DIR / ".cache" / "retrieval-shard",
        help="where the WikiQA + docs corpus is kept between runs",
    )
    parser.add_argument("--pages", type=int, default=0, help="only this many pages (smoke)")
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "retrieval.json")
    args = parser.parse_args()
    if args.sections and not DOCS.is_dir():
        print(f"{DOCS} is missing: apt-get install python3.11-doc", file=sys.stderr)
        return 2
    print(load_note())
    workdir = Path(tempfile.mkdtemp(prefix="deja-retrieval-bench-"))
    try:
        record = asyncio.run(run(args, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report(record)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        json.dumps(
            {"args": vars(args) | {"output": str(args.output)}, **record}, indent=2, default=str
        )
    )
    print(f"\nwritten: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
