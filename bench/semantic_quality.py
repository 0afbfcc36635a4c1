"""Semantic-cache quality of the shipped embedder on labelled Quora question pairs.

For each threshold θ from 0.80 to 0.99 (step 0.01), two views:

* **pairwise**: a row is a predicted duplicate when cos(a, b) >= θ.
  precision = TP / (TP + FP), hit rate = TP / #duplicate rows; plus the ROC AUC of cos(a, b).
* **cache** (as ``shared/data/README.md`` defines it): every distinct ``a`` is inserted once,
  every ``b`` is a query. A hit is the top-1 neighbour (exact numpy search) with score >= θ;
  it is correct when the neighbour's text is the row's own ``a`` and the row is a duplicate,
  or when it is identical to the query. hit rate = correct hits on duplicate rows / #duplicate
  rows; precision@cache = correct hits / all hits.

Recommends the smallest θ whose pairwise precision is at least ``--min-precision`` (0.90) and
prints the precision@cache it gives.

    .venv/bin/python bench/semantic_quality.py [--data PATH] [--variant dynint8|int8]

Writes bench/results/semantic_quality.json (or ``--output``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from common import RESULTS_DIR, banner, table

from deja.embedding.onnx.embedder import Variant, load_onnx_embedder

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared/data/qqp_dev.jsonl"
THRESHOLDS = [round(0.80 + 0.01 * i, 2) for i in range(20)]

Matrix = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Pairs:
    a: list[str]
    b: list[str]
    duplicate: npt.NDArray[np.bool_]


def load_pairs(path: Path) -> Pairs:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return Pairs(
        a=[r["a"] for r in rows],
        b=[r["b"] for r in rows],
        duplicate=np.array([bool(r["duplicate"]) for r in rows]),
    )


def roc_auc(scores: npt.NDArray[np.float64], labels: npt.NDArray[np.bool_]) -> float:
    """Mann-Whitney ROC AUC, ties counted half."""
    order = np.argsort(scores, kind="mergesort")
    ordered = scores[order]
    ranks = np.empty(len(scores), dtype=np.float64)
    start = 0
    while start < len(ordered):
        end = start
        while end + 1 < len(ordered) and ordered[end + 1] == ordered[start]:
            end += 1
        ranks[order[start : end + 1]] = (start + end) / 2 + 1
        start = end + 1
    positives = int(labels.sum())
    negatives = len(labels) - positives
    return float((ranks[labels].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def ratio(num: int, den: int) -> float:
    return num / den if den else math.nan


def pairwise(
    scores: npt.NDArray[np.float64], dup: npt.NDArray[np.bool_], theta: float
) -> dict[str, Any]:
    predicted = scores >= theta
    tp = int((predicted & dup).sum())
    return {
        "hits": int(predicted.sum()),
        "precision": ratio(tp, int(predicted.sum())),
        "hit_rate": ratio(tp, int(dup.sum())),
    }


@dataclass(frozen=True)
class CacheRun:
    """The top-1 cached ``a`` of each query ``b`` and whether serving it would be right."""

    score: npt.NDArray[np.float64]
    correct: npt.NDArray[np.bool_]


def cache_search(pairs: Pairs, vectors: dict[str, Matrix]) -> CacheRun:
    cached = list(dict.fromkeys(pairs.a))  # each distinct a once, in first-seen order
    index = np.stack([vectors[text] for text in cached])
    queries = np.stack([vectors[text] for text in pairs.b])
    sims = queries @ index.T
    top = sims.argmax(axis=1)
    score = sims[np.arange(len(top)), top].astype(np.float64)
    neighbour = [cached[i] for i in top]
    correct = np.array(
        [
            (n == a and bool(d)) or n == b
            for n, a, b, d in zip(neighbour, pairs.a, pairs.b, pairs.duplicate, strict=True)
        ]
    )
    return CacheRun(score=score, correct=correct)


def cache_mode(run: CacheRun, dup: npt.NDArray[np.bool_], theta: float) -> dict[str, Any]:
    hit = run.score >= theta
    correct = hit & run.correct
    return {
        "hits": int(hit.sum()),
        "precision": ratio(int(correct.sum()), int(hit.sum())),
        "hit_rate": ratio(int((correct & dup).sum()), int(dup.sum())),
    }


def embed_all(texts: list[str], variant: Variant, cache_dir: Path) -> tuple[str, dict[str, Matrix]]:
    embedder = load_onnx_embedder(cache_dir, variant=variant, batching=False)
    distinct = list(dict.fromkeys(texts))
    started = time.perf_counter()
    vectors = np.asarray(embedder.embed_batch(distinct), dtype=np.float32)
    seconds = time.perf_counter() - started
    print(f"  {embedder.model_id}: {len(distinct)} distinct texts in {seconds:.1f}s")
    asyncio.run(embedder.close())
    return embedder.model_id, dict(zip(distinct, vectors, strict=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--variant", choices=["dynint8", "int8"], default="dynint8")
    parser.add_argument("--min-precision", type=float, default=0.90)
    parser.add_argument("--cache-dir", type=Path, default=RESULTS_DIR / "models")
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "semantic_quality.json")
    args = parser.parse_args()

    pairs = load_pairs(args.data)
    dup = pairs.duplicate
    print(f"{args.data}: {len(dup)} rows, {int(dup.sum())} duplicates")
    model_id, vectors = embed_all(pairs.a + pairs.b, args.variant, args.cache_dir)
    scores = np.array(
        [float(vectors[a] @ vectors[b]) for a, b in zip(pairs.a, pairs.b, strict=True)]
    )
    auc = roc_auc(scores, dup)
    run = cache_search(pairs, vectors)

    curve: list[dict[str, Any]] = [
        {"theta": t, "pairwise": pairwise(scores, dup, t), "cache": cache_mode(run, dup, t)}
        for t in THRESHOLDS
    ]
    banner(f"{model_id}: precision and hit rate by θ (pairwise ROC AUC {auc:.4f})")
    print(
        table(
            ["θ", "pair prec", "pair hit", "pair hits", "cache prec", "cache hit", "cache hits"],
            [
                [
                    f"{c['theta']:.2f}",
                    c["pairwise"]["precision"],
                    c["pairwise"]["hit_rate"],
                    c["pairwise"]["hits"],
                    c["cache"]["precision"],
                    c["cache"]["hit_rate"],
                    c["cache"]["hits"],
                ]
                for c in curve
            ],
        )
    )
    chosen = next((c for c in curve if c["pairwise"]["precision"] >= args.min_precision), None)
    best_cache = max(
        (c for c in curve if c["cache"]["hits"]),
        key=lambda c: c["cache"]["precision"],
        default=None,
    )
    recommendation: dict[str, Any] | None = None
    if chosen is None:
        print(f"\nno θ up to 0.99 reaches pairwise precision {args.min_precision:.2f}")
    else:
        recommendation = {
            "theta": chosen["theta"],
            "pairwise": chosen["pairwise"],
            "cache": chosen["cache"],
        }
        print(
            f"\nrecommended θ = {chosen['theta']:.2f}: the smallest with pairwise precision >= "
            f"{args.min_precision:.2f} ({chosen['pairwise']['precision']:.3f}, hit rate "
            f"{chosen['pairwise']['hit_rate']:.3f}); in cache mode it gives precision@cache "
            f"{chosen['cache']['precision']:.3f} at hit rate {chosen['cache']['hit_rate']:.3f}"
        )
    if best_cache is not None:
        print(
            f"highest precision@cache on the grid: {best_cache['cache']['precision']:.3f} at "
            f"θ = {best_cache['theta']:.2f} (hit rate {best_cache['cache']['hit_rate']:.3f})"
        )

    args.output.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "data": str(args.data),
        "rows": len(dup),
        "duplicates": int(dup.sum()),
        "model_id": model_id,
        "pairwise_auc": auc,
        "min_precision": args.min_precision,
        "recommended": recommendation,
        "best_cache_precision": best_cache,
        "curve": curve,
    }
    args.output.write_text(json.dumps(payload, indent=2))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
