"""Fit the serving thresholds on the VALIDATION split (cache mode) and write
``deja/models/verifier/calibration.json``.

Compares decision scores (verifier probability vs a logistic combination of [verifier logit,
cosine]) and cosine floors, checks whether high-cosine hits could skip verification, and
builds the precision-target -> tau table from an isotonic-smoothed precision curve.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from training.verifier.calibration import (
    TARGETS,
    CacheRun,
    Decision,
    Verifier,
    auc,
    build_table,
    cache_run,
    curve_area,
    fit_combined,
    metrics_at,
    serve,
    serve_cosine,
    sigmoid,
    skip_candidates,
    write_calibration,
)
from training.verifier.common import ARTIFACTS, CACHE, RUNS, Progress, read_pairs
from training.verifier.embed import load_embeddings

COMPARE = (0.85, 0.88, 0.90, 0.92, 0.94, 0.95)
SKIPS = (0.97, 0.98, 0.99, 0.995, 0.999)


def cached_embed(split: str) -> Any:
    table = load_embeddings(split)

    def embed(texts: list[str]) -> np.ndarray:
        missing = [t for t in texts if t not in table]
        if missing:
            raise SystemExit(f"{len(missing)} texts lack a cached vector: run the embed step")
        return np.stack([table[t] for t in texts])

    return embed


def run_cache(
    rows: list[Any], split: str, model: Path, k: int, floor: float, threads: int
) -> CacheRun:
    v = Verifier.load(model, model.parent / "tokenizer.json", threads=threads)
    prog = Progress(f"cache {split}", len(rows), every=20.0)
    t = time.monotonic()
    run = cache_run(
        rows, cached_embed(split), v, k=k, floor=floor, progress=lambda i, n: prog.update(i)
    )
    run.meta["seconds"] = time.monotonic() - t
    print(
        f"[{split}] scored {run.scored_pairs} candidate pairs in {run.meta['seconds']:.0f}s",
        flush=True,
    )
    return run


def pairwise(rows: list[Any], split: str, model: Path, threads: int) -> dict[str, float]:
    v = Verifier.load(model, model.parent / "tokenizer.json", threads=threads)
    emb = cached_embed(split)
    y = np.array([r.duplicate for r in rows])
    cos = np.sum(emb([r.a for r in rows]) * emb([r.b for r in rows]), axis=1)
    lg = v.logits([(r.b, r.a) for r in rows], batch=16)
    return {
        "auc_verifier": auc(lg, y),
        "auc_cosine": auc(cos, y),
        "pairs": len(rows),
        "accuracy_verifier_at_0.5": float(np.mean((sigmoid(lg) >= 0.5) == y)),
    }


def run_summary(run: CacheRun) -> dict[str, Any]:
    """What every report says about the cache-mode run it rests on."""
    return {
        "rows": run.n,
        "duplicates": int(run.duplicate.sum()),
        "index_size": len(run.index_texts),
        "scored_pairs": run.scored_pairs,
        "seconds": run.meta["seconds"],
    }


def cosine_curve(run: CacheRun) -> list[dict[str, float]]:
    sv = serve_cosine(run)
    return [metrics_at(run, sv, round(t, 3)) for t in (*(np.arange(85, 100) / 100), 0.995)]


def tau_curve(
    run: CacheRun, dec: Decision, floor: float, skip: float | None
) -> list[dict[str, float]]:
    sv = serve(run, dec, floor, skip)
    return [
        metrics_at(run, sv, t)
        for t in (0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.97, 0.98, 0.99, 0.995, 0.998, 0.999)
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--val", type=Path, default=CACHE / "val.jsonl")
    ap.add_argument("--model", type=Path, default=ARTIFACTS / "verifier-int8.onnx")
    ap.add_argument("--out", type=Path, default=ARTIFACTS / "calibration.json")
    ap.add_argument("--report", type=Path, default=RUNS / "calibration_report.json")
    ap.add_argument(
        "--k",
        type=int,
        default=2,
        help="candidates per query (2: on validation as good as 4, at half the verifier time)",
    )
    ap.add_argument("--floors", type=float, nargs="+", default=[0.60, 0.70])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--min-labelled", type=int, default=50)
    ap.add_argument("--limit", type=int, default=0, help="first N rows only (smoke)")
    ap.add_argument(
        "--skip",
        action="store_true",
        help="build the table with the measured skip-verification cosine (the gateway verifies "
        "everything unless DEJA_SEMANTIC_SKIP_VERIFICATION_ABOVE is set, so off by default)",
    )
    args = ap.parse_args(argv)
    rows = read_pairs(args.val)
    if args.limit:
        rows = rows[: args.limit]
    run = run_cache(rows, "val", args.model, args.k, min(args.floors), args.threads)
    report: dict[str, Any] = run_summary(run)
    options: list[dict[str, Any]] = []
    for floor in args.floors:
        for dec in (Decision("verifier"), fit_combined(run, floor)):
            sv = serve(run, dec, floor)
            table = build_table(run, sv, TARGETS, args.min_labelled)
            area = curve_area(table, COMPARE)
            options.append({"floor": floor, "decision": dec, "table": table, "area": area})
            print(
                f"[calibrate] floor {floor} {dec}: sum hit rate over {COMPARE} = {area:.3f}",
                flush=True,
            )
    best = max(options, key=lambda o: o["area"])
    dec, floor = best["decision"], best["floor"]
    report["options"] = [
        {
            "floor": o["floor"],
            "decision": o["decision"].kind,
            "params": o["decision"].params(),
            "area": o["area"],
            "table": o["table"],
        }
        for o in options
    ]
    # skip verification above a high cosine?
    skips = skip_candidates(run, SKIPS)
    report["skip_check"] = skips
    skip_above: float | None = None
    for s in skips:
        if s["labelled"] > 0 and s["right"] == s["labelled"] and s["precision"] == 1.0:
            skip_above = float(s["cosine"])
            break
    report["skip_measured"] = skip_above
    if not args.skip:
        skip_above = None
    if skip_above is not None:
        with_skip = build_table(run, serve(run, dec, floor, skip_above), TARGETS, args.min_labelled)
        base = curve_area(best["table"], COMPARE)
        if curve_area(with_skip, COMPARE) + 1e-9 < base:
            skip_above = None
        else:
            best["table"] = with_skip
    for s in skips:
        print(
            f"[calibrate] top-1 cosine >= {s['cosine']}: labelled {s['labelled']} right "
            f"{s['right']} unjudged {s['unjudged']} precision {s['precision']:.4f}",
            flush=True,
        )
    print(
        f"[calibrate] chosen: floor {floor}, {dec}, skip_verification_above {skip_above}",
        flush=True,
    )
    fitted_on = (
        f"validation split carved from qqp_train.jsonl.gz ({len(rows)} rows, "
        f"{int(run.duplicate.sum())} duplicates, no question text shared with the "
        f"training rows), cache mode: {len(run.index_texts)} distinct a indexed, every b "
        f"queried, top-{args.k} by cosine >= {floor}, each (query, candidate) pair scored on "
        "its own (batch 1), the same question up to case and punctuation served unverified "
        "as the gateway does; tau = smallest threshold whose monotone labelled precision "
        "(lowest raw precision at any threshold >= tau with >= "
        f"{args.min_labelled} labelled hits) >= target"
    )
    doc = write_calibration(
        args.out, args.model, dec, floor, args.k, skip_above, fitted_on, best["table"]
    )
    report["chosen"] = {
        "floor": floor,
        "decision": dec.kind,
        "params": dec.params(),
        "skip_verification_above": skip_above,
        "table": best["table"],
    }
    report["verifier_curve"] = tau_curve(run, dec, floor, skip_above)
    report["verifier_only_curve"] = tau_curve(run, Decision("verifier"), floor, None)
    report["cosine_curve"] = cosine_curve(run)
    report["pairwise"] = pairwise(rows, "val", args.model, args.threads)
    print(f"[calibrate] val pairwise {report['pairwise']}", flush=True)
    for r in best["table"]:
        print(
            f"  target {r['precision']:.2f}: tau {r['tau']} hit_rate {r['hit_rate']} "
            f"val precision {r.get('measured_precision')}"
        )
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps(report, indent=2, default=str))
    print(
        f"[calibrate] wrote {args.out} (sha {doc['model_sha256'][:12]}) and {args.report}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
