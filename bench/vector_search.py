"""Qdrant Edge search latency with scope + TTL filters (the semantic layer's hot path).

For each size (default 10k and 100k points, 384-dim random unit vectors spread over
tenants x models x context hashes, a share of them expired), the shard is built through
``VectorStore.upsert`` (on an ``EdgeCollection``) in batches, then searched one query at a time:

* ``async``: ``await VectorStore.search(...)`` on the event loop (uvloop, as the gateway runs)
  -- filter and request building, the hop to the store's thread, the search, the results;
* ``raw``: the synchronous ``EdgeShard.search`` on a prebuilt request, same filter, in this
  thread (the engine alone).

Queries are stored vectors of a random scope, perturbed (near-duplicate questions). A ``large``
row searches one scope holding ``--large-share`` of all points (a dominant tenant/model/context),
the worst case for a filtered scan. The top hit of a sample of queries is checked against an
exact numpy search over the valid points of the scope. Target: p99 <= 5 ms.

    .venv/bin/python bench/vector_search.py [--sizes 10000 100000] [--queries 2000] [--optimize]

Writes bench/results/vector_search.json (``vector_search_optimized.json`` with ``--optimize``).
Figures come from a shared 2-core machine: see the load note printed with them.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import qdrant_edge as qe
from common import RESULTS_DIR, banner, load_note, percentile, table, verdict

from deja.semantic.index import (
    QUESTION_INDEXES,
    Scope,
    VectorPoint,
    VectorStore,
    question_collection,
    search_filter,
)
from deja.vectors.edge import EdgeCollection, edge_filter

DIM = 384
NOW = 1_700_000_000.0
TARGET_P99_MS = 5.0


@dataclass
class Corpus:
    """The generated points, kept as arrays for the exact cross-check."""

    vectors: np.ndarray  # (n, dim) float32, unit rows
    scope_ids: np.ndarray  # (n,) index into scopes
    expires: np.ndarray  # (n,)
    scopes: list[Scope]
    entry_ids: list[str]


def make_corpus(
    n: int, *, tenants: int, models: int, contexts: int, expired: float, large_share: float
) -> Corpus:
    rng = np.random.default_rng(n)
    vectors = rng.standard_normal((n, DIM), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    scopes = [
        Scope(tenant=f"tenant-{t}", model=f"model-{m}", params_hash="p0", context_hash=f"ctx-{c}")
        for t in range(tenants)
        for m in range(models)
        for c in range(contexts)
    ]
    scopes.append(Scope(tenant="tenant-big", model="model-0", params_hash="p0", context_hash="c"))
    large = len(scopes) - 1
    scope_ids = rng.integers(0, large, size=n)
    scope_ids[rng.random(n) < large_share] = large
    expires = np.where(rng.random(n) < expired, NOW - 60.0, NOW + 3600.0)
    entry_ids = [f"{i:032x}" for i in range(n)]
    return Corpus(vectors, scope_ids, expires, scopes, entry_ids)


def make_queries(corpus: Corpus, count: int, *, large: bool, seed: int) -> list[tuple[int, Any]]:
    """(scope index, query vector) pairs: perturbed stored vectors of the chosen scopes."""
    rng = np.random.default_rng(seed)
    large_id = len(corpus.scopes) - 1
    pool = np.flatnonzero(corpus.scope_ids == large_id if large else corpus.scope_ids != large_id)
    picks = rng.choice(pool, size=count)
    noise = rng.standard_normal((count, DIM), dtype=np.float32) * 0.02
    queries = corpus.vectors[picks] + noise
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    return [(int(corpus.scope_ids[i]), q) for i, q in zip(picks, queries, strict=True)]


async def build(store: VectorStore, corpus: Corpus, batch: int) -> float:
    started = time.perf_counter()
    for lo in range(0, len(corpus.entry_ids), batch):
        hi = min(lo + batch, len(corpus.entry_ids))
        rows = corpus.vectors[lo:hi].tolist()
        points = [
            VectorPoint(
                entry_id=corpus.entry_ids[i],
                vector=rows[i - lo],
                scope=corpus.scopes[corpus.scope_ids[i]],
                question=f"question {i}",
                created_at=NOW - 600.0,
                expires_at=float(corpus.expires[i]),
            )
            for i in range(lo, hi)
        ]
        await store.upsert(points)
    return time.perf_counter() - started


@dataclass
class Samples:
    """Per-call wall time and process CPU time (all threads: loop, store thread, engine pool).
    CPU time is what a call costs whatever else runs on the machine; wall time includes waiting
    for a core."""

    wall: list[float]
    cpu: list[float]

    def stats(self) -> dict[str, float]:
        wall = [s * 1e3 for s in self.wall]
        cpu = [s * 1e3 for s in self.cpu]
        return {
            "p50_ms": percentile(wall, 50),
            "p90_ms": percentile(wall, 90),
            "p99_ms": percentile(wall, 99),
            "max_ms": max(wall),
            "mean_ms": sum(wall) / len(wall),
            "cpu_p50_ms": percentile(cpu, 50),
            "cpu_p99_ms": percentile(cpu, 99),
            "cpu_mean_ms": sum(cpu) / len(cpu),
        }


async def time_async(
    store: VectorStore, corpus: Corpus, queries: list[tuple[int, Any]], warmup: int
) -> tuple[Samples, list[str | None]]:
    lists = [(s, q.tolist()) for s, q in queries]
    for s, q in lists[:warmup]:
        await store.search(q, corpus.scopes[s], now=NOW)
    samples = Samples([], [])
    tops: list[str | None] = []
    for s, q in lists:
        cpu, started = time.process_time(), time.perf_counter()
        hits = await store.search(q, corpus.scopes[s], now=NOW)
        samples.wall.append(time.perf_counter() - started)
        samples.cpu.append(time.process_time() - cpu)
        tops.append(hits[0].entry_id if hits else None)
    return samples, tops


def time_raw(
    shard: qe.EdgeShard, corpus: Corpus, queries: list[tuple[int, Any]], warmup: int
) -> Samples:
    requests = [
        qe.SearchRequest(
            query=qe.Query.Nearest(q.tolist()),
            limit=1,
            filter=edge_filter(search_filter(corpus.scopes[s], NOW, None)),
            with_payload=True,
        )
        for s, q in queries
    ]
    for request in requests[:warmup]:
        shard.search(request)
    samples = Samples([], [])
    for request in requests:
        cpu, started = time.process_time(), time.perf_counter()
        shard.search(request)
        samples.wall.append(time.perf_counter() - started)
        samples.cpu.append(time.process_time() - cpu)
    return samples


def exact_top(corpus: Corpus, scope_id: int, query: Any) -> str | None:
    valid = np.flatnonzero((corpus.scope_ids == scope_id) & (corpus.expires > NOW))
    if not len(valid):
        return None
    best = int(valid[int(np.argmax(corpus.vectors[valid] @ query))])
    return corpus.entry_ids[best]


def dir_size(path: Path) -> int:
    """Bytes allocated on disk (the WAL and storage files are sparse: their apparent size is
    ~150 MiB even for an empty shard)."""
    return sum(f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file())


async def run_size(n: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    banner(f"{n:,} points")
    corpus = make_corpus(
        n,
        tenants=args.tenants,
        models=args.models,
        contexts=args.contexts,
        expired=args.expired,
        large_share=args.large_share,
    )
    collection = question_collection("bench-random", DIM)
    data_dir = workdir / f"n{n}"
    edge = EdgeCollection(data_dir, collection=collection, dim=DIM, indexes=QUESTION_INDEXES)
    store = VectorStore(edge)
    await store.open()
    build_s = await build(store, corpus, args.batch)
    print(f"  built in {build_s:.1f}s ({n / build_s:,.0f} points/s)", flush=True)
    optimize_s = None
    if args.optimize:
        started = time.perf_counter()
        await edge.optimize()
        optimize_s = time.perf_counter() - started
        print(f"  optimized (HNSW) in {optimize_s:.1f}s", flush=True)
    close_started = time.perf_counter()
    await store.close()
    close_s = time.perf_counter() - close_started
    shard_dir = edge.path
    disk = dir_size(shard_dir)

    workloads = {
        "uniform": make_queries(corpus, args.queries, large=False, seed=1),
        "large": make_queries(corpus, args.queries, large=True, seed=2),
    }
    large_points = int((corpus.scope_ids == len(corpus.scopes) - 1).sum())
    uniform_points = (n - large_points) / (len(corpus.scopes) - 1)

    rows: dict[str, Any] = {}
    # raw: the engine alone, on a shard loaded directly
    load_started = time.perf_counter()
    shard = qe.EdgeShard.load(str(shard_dir))
    load_s = time.perf_counter() - load_started
    try:
        for name, queries in workloads.items():
            rows[name] = {"raw": time_raw(shard, corpus, queries, args.warmup).stats()}
    finally:
        shard.close()

    # async: through the store, the executor hop included
    store = VectorStore(
        EdgeCollection(data_dir, collection=collection, dim=DIM, indexes=QUESTION_INDEXES)
    )
    await store.open()
    try:
        count = await store.count()
        for name, queries in workloads.items():
            samples, tops = await time_async(store, corpus, queries, args.warmup)
            checked = list(range(0, len(queries), max(1, len(queries) // args.check)))
            agree = sum(tops[i] == exact_top(corpus, *queries[i]) for i in checked)
            rows[name]["async"] = samples.stats()
            rows[name]["top1_agreement"] = agree / len(checked)
    finally:
        await store.close()
    shutil.rmtree(data_dir, ignore_errors=True)
    return {
        "points": n,
        "points_counted": count,
        "scopes": len(corpus.scopes),
        "points_per_uniform_scope": uniform_points,
        "points_in_large_scope": large_points,
        "expired_share": args.expired,
        "build_s": build_s,
        "optimize_s": optimize_s,
        "close_s": close_s,
        "load_s": load_s,
        "disk_bytes": disk,
        "workloads": rows,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--check", type=int, default=200, help="queries cross-checked exactly")
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument("--models", type=int, default=3)
    parser.add_argument("--contexts", type=int, default=4)
    parser.add_argument("--expired", type=float, default=0.2, help="share of expired points")
    parser.add_argument("--large-share", type=float, default=0.1)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--optimize", action="store_true", help="build the HNSW index first")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()

    try:
        import uvloop

        loop_factory: Any = uvloop.new_event_loop
        loop_name = "uvloop"
    except ImportError:  # pragma: no cover
        loop_factory = None
        loop_name = "asyncio"

    print(load_note())
    workdir = Path(tempfile.mkdtemp(prefix="deja-vbench-", dir=args.workdir))
    try:
        results = []
        for n in args.sizes:
            with asyncio.Runner(loop_factory=loop_factory) as runner:
                results.append(runner.run(run_size(n, args, workdir)))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    banner("search latency, limit=1, scope + TTL filter (ms)")
    rows = []
    for res in results:
        for name, wl in res["workloads"].items():
            per_scope = (
                res["points_per_uniform_scope"]
                if name == "uniform"
                else res["points_in_large_scope"]
            )
            for mode in ("raw", "async"):
                s = wl[mode]
                rows.append(
                    [
                        f"{res['points']:,}",
                        name,
                        float(per_scope),
                        mode,
                        s["p50_ms"],
                        s["p90_ms"],
                        s["p99_ms"],
                        s["max_ms"],
                        s["cpu_p50_ms"],
                        s["cpu_p99_ms"],
                        verdict(s["p99_ms"] <= TARGET_P99_MS),
                    ]
                )
    print(
        table(
            [
                "points",
                "scope",
                "pts/scope",
                "call",
                "p50",
                "p90",
                "p99",
                "max",
                "cpu p50",
                "cpu p99",
                "p99<=5ms",
            ],
            rows,
        )
    )
    print()
    print(
        table(
            ["points", "build s", "pts/s", "close s", "load s", "disk MiB", "top1 uniform/large"],
            [
                [
                    f"{r['points']:,}",
                    r["build_s"],
                    r["points"] / r["build_s"],
                    r["close_s"],
                    r["load_s"],
                    r["disk_bytes"] / 2**20,
                    f"{r['workloads']['uniform']['top1_agreement']:.3f}/"
                    f"{r['workloads']['large']['top1_agreement']:.3f}",
                ]
                for r in results
            ],
        )
    )
    note = load_note()
    print(note)

    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / ("vector_search_optimized.json" if args.optimize else "vector_search.json")
    payload = {
        "benchmark": "vector_search",
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "loop": loop_name,
            "load": note,
        },
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "dim": DIM,
        "target_p99_ms": TARGET_P99_MS,
        "results": results,
    }
    out.write_text(json.dumps(payload, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
