"""Evaluate calibrated verifiers on sets they were not fitted on; nothing is fitted here.

For each system (``new``: the shipped model and table; ``old``: a previous model and table
given by ``--old``) and each set:

- ``dev`` (``qqp_dev.jsonl``), cache mode as in calibration: labelled precision with its
  Wilson 95% interval and duplicate hit rate per precision target, and the curve over τ; the
  cosine-only curve beside it.
- ``val`` (the calibration split): the same curves (the table was fitted here).
- ``mrpc`` (``mrpc_test.jsonl``, MRPC rows held out of training and fitting) and ``gen``
  (``tests/data/generalisation.jsonl``), pairwise: precision / recall over τ and what the
  default target serves, per kind of row.

All curves of one system come from one run per set. Writes ``eval_report.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from deja.semantic.curves import wilson
from training.verifier.calibrate import PairSet, pair_set, run_cache
from training.verifier.calibration import (
    CacheRun,
    Decision,
    Served,
    load_calibration,
    metrics_at,
    serve,
    serve_cosine,
    tau_for_target,
)
from training.verifier.common import ARTIFACTS, CACHE, DATA, REPO, RUNS, read_pairs

TARGETS = (0.85, 0.88, 0.90, 0.92, 0.95)
GEN = REPO / "tests" / "data" / "generalisation.jsonl"
SWEEP = tuple(round(float(t), 3) for t in np.r_[np.arange(0.05, 0.95, 0.05), 0.97, 0.99, 0.995])


def with_interval(m: dict[str, Any]) -> dict[str, Any]:
    lo, hi = wilson(float(m["right"]), float(m["labelled"]), 1.96)
    return {**m, "interval": [round(lo, 4), round(hi, 4)]}


def cache_curves(run: CacheRun, sv: Served, doc: dict[str, Any]) -> dict[str, Any]:
    per_target = []
    for t in TARGETS:
        tau = tau_for_target(doc, t)
        if tau is None:
            per_target.append({"target": t, "tau": None, "hits": 0, "hit_rate": 0.0})
            continue
        per_target.append({"target": t, **with_interval(metrics_at(run, sv, tau))})
    return {
        "per_target": per_target,
        "curve": [with_interval(metrics_at(run, sv, t)) for t in SWEEP],
    }


def cosine_curves(run: CacheRun) -> list[dict[str, Any]]:
    sv = serve_cosine(run)
    thetas = np.round(np.r_[np.arange(0.80, 0.99, 0.01), 0.99, 0.995], 3)
    return [with_interval(metrics_at(run, sv, float(t))) for t in thetas]


def pair_curves(ps: PairSet, dec: Decision, tau_default: float | None) -> dict[str, Any]:
    sc = ps.scores(dec)
    n_pos = max(1, int(ps.y.sum()))

    def at(tau: float) -> dict[str, Any]:
        s = sc >= tau
        right = int((s & ps.y).sum())
        lo, hi = wilson(right, int(s.sum()), 1.96)
        return {
            "tau": tau,
            "served": int(s.sum()),
            "precision": right / int(s.sum()) if s.any() else float("nan"),
            "recall": right / n_pos,
            "interval": [round(lo, 4), round(hi, 4)],
        }

    kinds: dict[str, Any] = {}
    if tau_default is not None:
        for kind in sorted(set(ps.kind)):
            m = np.array([k == kind for k in ps.kind])
            kinds[kind] = {"rows": int(m.sum()), "served": int((sc[m] >= tau_default).sum())}
    return {
        "default": at(tau_default) if tau_default is not None else None,
        "curve": [at(t) for t in SWEEP],
        "by_kind": kinds,
        "cosine_curve": [
            {**at_cos, "theta": th}
            for th in (0.7, 0.8, 0.85, 0.9, 0.92, 0.95, 0.97)
            for at_cos in [cos_at(ps, th)]
        ],
    }


def cos_at(ps: PairSet, theta: float) -> dict[str, Any]:
    s = ps.cos >= theta
    right = int((s & ps.y).sum())
    lo, hi = wilson(right, int(s.sum()), 1.96)
    return {
        "served": int(s.sum()),
        "precision": right / int(s.sum()) if s.any() else float("nan"),
        "recall": right / max(1, int(ps.y.sum())),
        "interval": [round(lo, 4), round(hi, 4)],
    }


def evaluate(calibration: Path, sets: list[str], threads: int, default: float) -> dict[str, Any]:
    dec, doc = load_calibration(calibration)
    model = calibration.parent / doc["model_file"]
    k, floor = int(doc["k"]), float(doc["cosine_floor"])
    tau_default = tau_for_target(doc, default)
    out: dict[str, Any] = {"k": k, "floor": floor, "decision": dec.kind, "vetoes": dec.vetoes}
    for name in sets:
        if name in ("dev", "val"):
            path = DATA / "qqp_dev.jsonl" if name == "dev" else CACHE / "val.jsonl"
            run = run_cache(read_pairs(path), name, model, k, floor, threads)
            sv = serve(run, dec, floor, doc.get("skip_verification_above"))
            out[name] = {
                **cache_curves(run, sv, doc),
                "cosine": cosine_curves(run),
                "rows": run.n,
                "scored_pairs": run.scored_pairs,
            }
        else:
            path = CACHE / "mrpc_test.jsonl" if name == "mrpc" else GEN
            split = "mrpc_test" if name == "mrpc" else "generalisation"
            out[name] = pair_curves(pair_set(path, split, model, threads), dec, tau_default)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--calibration", type=Path, default=ARTIFACTS / "calibration.json")
    ap.add_argument("--old", type=Path, default=CACHE / "old" / "calibration.json")
    ap.add_argument("--sets", nargs="+", default=["dev", "val", "mrpc", "gen"])
    ap.add_argument("--systems", nargs="+", default=["new", "old"])
    ap.add_argument("--report", type=Path, default=RUNS / "eval_report.json")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--default-target", type=float, default=0.92)
    args = ap.parse_args(argv)
    # systems evaluated by an earlier call stay in the report (the old one needs no re-run)
    report: dict[str, Any] = json.loads(args.report.read_text()) if args.report.is_file() else {}
    for system in args.systems:
        cal = args.calibration if system == "new" else args.old
        report[system] = evaluate(cal, args.sets, args.threads, args.default_target)
        for name in args.sets:
            part = report[system][name]
            if "per_target" in part:
                for p in part["per_target"]:
                    print(
                        f"[{system} {name}] target {p['target']:.2f} tau {p.get('tau')} "
                        f"precision {p.get('precision')} {p.get('interval')} "
                        f"hit_rate {p.get('hit_rate')} labelled {p.get('labelled')}",
                        flush=True,
                    )
            else:
                print(
                    f"[{system} {name}] default {part['default']} by kind {part['by_kind']}",
                    flush=True,
                )
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps(report, indent=2, default=str))
    print(f"[evaluate] wrote {args.report}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
