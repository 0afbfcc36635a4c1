"""Apply ``calibration.json`` to ``qqp_dev.jsonl`` (cache mode, same procedure as calibration;
nothing is fitted here) and report labelled precision, duplicate hit rate and unjudged hits
per precision target, the cosine-only curve and pairwise AUCs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from training.verifier.calibrate import cosine_curve, pairwise, run_cache, run_summary, tau_curve
from training.verifier.calibration import (
    Decision,
    load_calibration,
    metrics_at,
    serve,
    tau_for_target,
)
from training.verifier.common import ARTIFACTS, DATA, RUNS, read_pairs

REPORT_TARGETS = (0.85, 0.90, 0.92, 0.95)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dev", type=Path, default=DATA / "qqp_dev.jsonl")
    ap.add_argument("--calibration", type=Path, default=ARTIFACTS / "calibration.json")
    ap.add_argument("--report", type=Path, default=RUNS / "eval_report.json")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    dec, doc = load_calibration(args.calibration)
    model = args.calibration.parent / doc["model_file"]
    rows = read_pairs(args.dev)
    run = run_cache(rows, "dev", model, int(doc["k"]), float(doc["cosine_floor"]), args.threads)
    sv = serve(run, dec, float(doc["cosine_floor"]), doc["skip_verification_above"])
    per_target: list[dict[str, Any]] = []
    for r in doc["table"]:
        t = float(r["precision"])
        tau = tau_for_target(doc, t)
        m = metrics_at(run, sv, tau) if tau is not None else {"tau": None}
        per_target.append({"target": t, "val_hit_rate": r["hit_rate"], **m})
    report: dict[str, Any] = {
        **run_summary(run),
        "per_target": per_target,
        "verifier_curve": tau_curve(
            run, dec, float(doc["cosine_floor"]), doc["skip_verification_above"]
        ),
        "verifier_only_curve": tau_curve(
            run, Decision("verifier"), float(doc["cosine_floor"]), None
        ),
        "cosine_curve": cosine_curve(run),
        "pairwise": pairwise(rows, "dev", model, args.threads),
    }
    print("target  tau       precision  hit_rate  labelled  unjudged")
    for p in per_target:
        if p["target"] in REPORT_TARGETS or True:
            print(
                f"{p['target']:.2f}    {p['tau']!s:9.9} {p.get('precision', float('nan')):.4f}"
                f"     {p.get('hit_rate', 0):.4f}    {p.get('labelled', 0):5d}     "
                f"{p.get('unjudged', 0):4d}"
            )
    print(f"[evaluate] dev pairwise {report['pairwise']}")
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps(report, indent=2, default=str))
    print(f"[evaluate] wrote {args.report}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
