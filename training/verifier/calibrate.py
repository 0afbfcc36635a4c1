"""Fit the serving decision on data the model was not trained on and write
``deja/models/verifier/calibration.json``.

1. Cache mode on the Quora VALIDATION split (``val.jsonl``): top-4 candidates above cosine
   0.50 scored once; smaller k and higher floors are views of that run.
2. Pairwise on ``val_extra.jsonl`` (MRPC and STS validation rows, rule-made rows from the
   validation questions): verifier logit, cosine and mismatch signals per pair.
3. Vetoes: a hard mismatch kind (:mod:`deja.semantic.mismatch`) vetoes unless the natural
   validation candidates that show it are right at least as often as the lowest target, by a
   one-sided Wilson lower bound (as for τ): a kind with little evidence is vetoed.
4. For each (cosine floor, k): the verifier alone, and the logistic combiner of [logit,
   cosine, negation, extra entity] fitted on both validation sets with the non-Quora rows
   weighted 1, 0.3, 0.1 or 0 against a Quora candidate; the τ table with a one-sided Wilson
   bound; the verifier calls per lookup. Each is judged by its cross-fitted area (the sum of
   hit rates over the compared targets, each half of the Quora rows scored by a decision and
   table fitted on the other half). The chosen option has the fewest calls among those within
   2% of the best area, and on a tie (1%) the most weight on the non-Quora rows; its decision
   and table are then fitted on every row.

With ``--keep-decision FILE`` step 4 is skipped: that table's k, floor and weights are kept and
only the vetoes (step 3) and τ are derived again. For a change of the mismatch lists
(``deja/semantic/antonyms.py``): refitting the weights on the few candidates whose veto changed
moves them a little and can move a τ by a step of the curve, which is noise, not the change.

Precision in the τ table is read at ``--duplicate-share`` (0.369, the share of duplicates in
Quora's released pairs; ``qqp_dev.jsonl`` has 0.372): the validation split has 0.331 because
of how the training file was cut, and at a lower share the same cut-off serves a larger share
of non-duplicates, so its precision reads about a point low. The validation rows are weighted
to that share (:func:`deja.semantic.calibration.at_duplicate_share`); the Wilson bound uses
the weighted rows' effective number.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from deja.semantic.curves import measured_interval, wilson
from deja.semantic.mismatch import HARD_KINDS, compare, kinds_mask
from training.verifier.calibration import (
    TARGETS,
    CacheRun,
    Decision,
    Served,
    Verifier,
    at_duplicate_share,
    auc,
    build_table,
    cache_run,
    curve_area,
    fit_combined,
    load_calibration,
    metrics_at,
    serve,
    serve_cosine,
    sigmoid,
    tau_for_target,
    write_calibration,
)
from training.verifier.common import ARTIFACTS, CACHE, RUNS, Progress, read_pairs
from training.verifier.embed import load_embeddings

COMPARE = (0.85, 0.88, 0.90, 0.92, 0.94, 0.95)
EVAL_TARGETS = (0.85, 0.88, 0.90, 0.92, 0.95)
SWEEP = tuple(round(float(t), 3) for t in np.r_[np.arange(0.05, 0.95, 0.05), 0.97, 0.99, 0.995])
Z_ONE_SIDED = 1.645  # 95% one-sided lower bound


def cached_embed(*splits: str) -> Any:
    table: dict[str, np.ndarray] = {}
    for split in splits:
        table.update(load_embeddings(split))

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
    prog = Progress(f"cache {split}", len(rows), every=30.0)
    t = time.monotonic()
    run = cache_run(
        rows, cached_embed(split), v, k=k, floor=floor, progress=lambda i, n: prog.update(i)
    )
    run.meta["seconds"] = time.monotonic() - t
    print(f"[{split}] scored {run.scored_pairs} pairs in {run.meta['seconds']:.0f}s", flush=True)
    return run


def first_k(run: CacheRun, k: int) -> CacheRun:
    """The run as if only the top-``k`` candidates had been retrieved."""
    cut = {
        f.name: getattr(run, f.name)[:, :k]
        for f in dataclasses.fields(run)
        if f.name in ("cand", "cos", "logit", "kind", "right", "same", "hard", "feats")
        and getattr(run, f.name) is not None
    }
    return dataclasses.replace(run, k=k, **cut)


@dataclasses.dataclass
class PairSet:
    """A pairwise set: label, verifier logit, cosine, soft features [n, 2], hard mask, kind and
    language ("" where a row names none)."""

    y: np.ndarray
    logit: np.ndarray
    cos: np.ndarray
    feats: np.ndarray
    hard: np.ndarray
    kind: list[str]
    lang: list[str]

    def scores(self, dec: Decision) -> np.ndarray:
        return dec.score(self.logit, self.cos, self.feats, self.hard)


def pair_set(path: Path, split: str, model: Path, threads: int, limit: int = 0) -> PairSet:
    """Score every row (or a seeded sample of ``limit`` rows) of a pairwise JSONL set (``b``
    asks, ``a`` is cached)."""
    docs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if limit and limit < len(docs):
        pick = np.random.default_rng(1234).choice(len(docs), size=limit, replace=False)
        docs = [docs[i] for i in sorted(pick)]
    emb = cached_embed(split)
    v = Verifier.load(model, model.parent / "tokenizer.json", threads=threads)
    sig = [compare(d["b"], d["a"]) for d in docs]
    return PairSet(
        y=np.array([bool(d["duplicate"]) for d in docs]),
        logit=v.logits([(d["b"], d["a"]) for d in docs], batch=1),
        cos=np.sum(emb([d["a"] for d in docs]) * emb([d["b"] for d in docs]), axis=1),
        feats=np.array([s.features() for s in sig], dtype=np.float64).reshape(-1, 2),
        hard=np.array([s.mask for s in sig], dtype=np.int64),
        kind=[str(d.get("kind", "")) for d in docs],
        lang=[str(d.get("lang", "")) for d in docs],
    )


def choose_vetoes(run: CacheRun, extra: PairSet, bound: float) -> tuple[list[str], list[Any]]:
    """Kinds to veto: every kind unless the natural pairs it flags show, with the same
    one-sided Wilson bound as τ, that they are right at least ``bound`` of the time. Measured on
    natural pairs only: the labelled Quora validation candidates and the MRPC/STS validation
    rows (the rule-made rows are flagged by construction, so they would only confirm the rule).

    A point rate let a kind that is rare in natural text through on no evidence: the reorder
    kind flagged 2 natural pairs, both right, so role and direction swaps ("from X to Y" / "from
    Y to X") were left to the model, which approved Spanish ones; 2 of 2 has a lower bound of
    0.43. No evidence means the conservative choice: a flagged candidate is not served."""
    assert run.hard is not None
    lab = run.kind > 0
    natural = np.array([k in ("mrpc", "sts") for k in extra.kind], dtype=bool)
    out, report = [], []
    for kind in HARD_KINDS:
        bit = kinds_mask((kind,))
        m = lab & ((run.hard & bit) != 0)
        e = natural & ((extra.hard & bit) != 0)
        n = int(m.sum()) + int(e.sum())
        right = int(run.right[m].sum()) + int(extra.y[e].sum())
        rate = right / n if n else 0.0
        lower = wilson(right, n, Z_ONE_SIDED)[0]
        report.append(
            {
                "kind": kind,
                "flagged": n,
                "right": right,
                "right_rate": round(rate, 4),
                "right_lower_bound": round(lower, 4),
            }
        )
        if lower < bound:
            out.append(kind)
    return out, report


def calls_per_lookup(run: CacheRun, floor: float) -> float:
    """Mean verifier calls per lookup: candidates at or above the floor, unless the same
    question is among them (served unverified)."""
    usable = (run.cos >= floor) & (run.cand >= 0)
    same = run.same if run.same is not None else np.zeros_like(usable)
    n = np.where((same & usable).any(axis=1), 0, usable.sum(axis=1))
    return float(n.mean())


#: How much one non-Quora row (MRPC, STS, rule-made) counts against one Quora candidate in the
#: combiner's fit. Equal weight pulls the weights toward the verifier's logit, which those sets
#: favour, at some cost on Quora; the cross-fitted area decides.
EXTRA_WEIGHTS = (1.0, 0.3, 0.1, 0.0)
_ROW_FIELDS = ("cand", "cos", "logit", "kind", "right", "duplicate", "same", "hard", "feats")


def rows_of(run: CacheRun, keep: np.ndarray) -> CacheRun:
    """The run restricted to the query rows in ``keep`` (a boolean mask)."""
    cut = {
        name: getattr(run, name)[keep]
        for name in (*_ROW_FIELDS, "weight")
        if getattr(run, name) is not None
    }
    return dataclasses.replace(run, **cut)


def cross_fitted_area(
    run: CacheRun, floor: float, fit: Callable[[CacheRun], Decision], halves: np.ndarray
) -> float:
    """Mean area over the two halves of the rows, each scored by a decision fitted on the other
    (``fit(run) -> Decision``) and its τ table built there: the area a new split would see,
    without the optimism of fitting and judging on the same rows."""
    areas = []
    for part in (halves, ~halves):
        dec = fit(rows_of(run, part))
        held = rows_of(run, ~part)
        table = build_table(held, serve(held, dec, floor), COMPARE, 50, z=Z_ONE_SIDED)
        areas.append(curve_area(table, COMPARE))
    return float(np.mean(areas))


def options(
    run4: CacheRun, extra: PairSet, vetoes: tuple[str, ...], floors: list[float], ks: list[int]
) -> list[dict[str, Any]]:
    """Every (k, floor, decision): the verifier alone, and the combiner for each weight of the
    non-Quora rows. ``area`` is cross-fitted (two seeded halves of the validation rows); the
    shipped decision and table are then fitted on all of them."""
    out = []
    halves = np.random.default_rng(7).random(run4.n) < 0.5
    for k in ks:
        run = first_k(run4, k)
        for floor in floors:
            m = (extra.cos >= floor) & ((extra.hard & kinds_mask(vetoes)) == 0)
            X = np.column_stack([extra.logit, extra.cos, extra.feats])[m]
            y = extra.y[m].astype(np.float64)
            fits: list[tuple[str, float, Callable[[CacheRun], Decision]]] = [
                ("verifier", -1.0, lambda _r: Decision("verifier", vetoes=vetoes))
            ]
            fits += [
                (
                    f"combined, extra rows x{lam:g}",
                    lam,
                    partial(
                        fit_combined, floor=floor, vetoes=vetoes, extra=(X, y), extra_weight=lam
                    ),
                )
                for lam in EXTRA_WEIGHTS
            ]
            for label, weight, fit in fits:
                dec = fit(run)
                table = build_table(run, serve(run, dec, floor), TARGETS, 50, z=Z_ONE_SIDED)
                area = cross_fitted_area(run, floor, fit, halves)
                calls = calls_per_lookup(run, floor)
                out.append(
                    {
                        "k": k,
                        "floor": floor,
                        "decision": dec,
                        "label": label,
                        "extra_weight": weight,
                        "table": table,
                        "area": area,
                        "area_in_sample": curve_area(table, COMPARE),
                        "calls": calls,
                    }
                )
                print(
                    f"[calibrate] k {k} floor {floor:.2f} {label:28s} area {area:.3f} "
                    f"(in-sample {out[-1]['area_in_sample']:.3f}) calls/lookup {calls:.2f}",
                    flush=True,
                )
    return out


def pick(opts: list[dict[str, Any]]) -> dict[str, Any]:
    """The fewest verifier calls among the options within 2% of the best area; among those
    at that cost within 1% of each other (a tie on Quora), the one whose fit counts the
    non-Quora rows the most, as they are the only evidence of traffic unlike Quora."""
    best = max(o["area"] for o in opts)
    near = [o for o in opts if o["area"] >= 0.98 * best]
    calls = min(o["calls"] for o in near)
    cheapest = [o for o in near if o["calls"] == calls]
    top = max(o["area"] for o in cheapest)
    tied = [o for o in cheapest if o["area"] >= 0.99 * top]
    return max(tied, key=lambda o: (o["extra_weight"], o["area"]))


def kept(path: Path, run4: CacheRun, vetoes: tuple[str, ...]) -> dict[str, Any]:
    """The option of an earlier calibration file (its k, floor, weights and label) with
    ``vetoes`` and its τ table derived again on ``run4``."""
    dec, doc = load_calibration(path)
    dec = dataclasses.replace(dec, vetoes=vetoes)
    k, floor = int(doc["k"]), float(doc["cosine_floor"])
    run = first_k(run4, k)
    return {
        "k": k,
        "floor": floor,
        "decision": dec,
        "label": f"kept from {path.name}",
        "fitted_on": str(doc.get("fitted_on", "")),
        "table": build_table(run, serve(run, dec, floor), TARGETS, 50, z=Z_ONE_SIDED),
    }


def earlier_options(report: Path, model_sha256: str) -> list[Any]:
    """The options an earlier run on the same model wrote to ``report`` (with
    ``--keep-decision`` none are fitted: the kept decision was chosen among these)."""
    if not report.is_file():
        return []
    doc = json.loads(report.read_text())
    return list(doc.get("options", [])) if doc.get("model_sha256") == model_sha256 else []


def describe_fit(
    best: dict[str, Any], rows: int, duplicates: int, extra_rows: int, args: argparse.Namespace
) -> str:
    """The table's ``fitted_on``: the data, the chosen option and the rule for τ."""
    if "fitted_on" in best:  # --keep-decision: the earlier fit, and what was derived again
        kept_note = (
            "; weights kept from that fit (calibrate --keep-decision), "
            "vetoes and tau derived again with this checkout's mismatch lists"
        )
        return str(best["fitted_on"]).removesuffix(kept_note) + kept_note
    weight = best["extra_weight"]
    beside = (
        f"fitted there and on {extra_rows} held-out MRPC/STS/rule-made pairs weighted {weight:g}"
        if weight > 0
        else "fitted there alone (the held-out MRPC and STS pairs count in the vetoes only)"
    )
    if best["decision"].kind == "verifier":
        beside = "the verifier's probability, nothing fitted"
    return (
        f"Quora validation split carved from qqp_train.jsonl.gz ({rows} rows, "
        f"{duplicates} duplicates, no question text shared with training) in "
        f"cache mode, rows weighted to a duplicate share of {args.duplicate_share or 'its own'}, "
        f"top-{best['k']} by cosine >= {best['floor']}, pairs scored one by one as the gateway "
        f"does; {best['label']}: {beside}; tau = least cut-off whose one-sided {Z_ONE_SIDED} "
        "Wilson lower bound of labelled precision (>= 50 labelled hits) reaches the target"
    )


def pairwise_report(ps: PairSet, dec: Decision, tau: float) -> dict[str, Any]:
    sc = ps.scores(dec)
    served = sc >= tau
    n_pos = int(ps.y.sum())
    return {
        "pairs": len(ps.y),
        "auc_verifier": auc(ps.logit, ps.y),
        "auc_cosine": auc(ps.cos, ps.y),
        "auc_decision": auc(sc, ps.y),
        "served": int(served.sum()),
        "precision_at_default": float(ps.y[served].mean()) if served.any() else float("nan"),
        "recall_at_default": float((served & ps.y).sum() / max(1, n_pos)),
    }


def with_interval(m: dict[str, Any]) -> dict[str, Any]:
    lo, hi = measured_interval(m)
    return {**m, "interval": [round(lo, 4), round(hi, 4)]}


def cache_curves(run: CacheRun, sv: Served, doc: dict[str, Any]) -> dict[str, Any]:
    per_target = []
    for t in EVAL_TARGETS:
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--val", type=Path, default=CACHE / "val.jsonl")
    ap.add_argument("--val-extra", type=Path, default=CACHE / "val_extra.jsonl")
    ap.add_argument("--model", type=Path, default=ARTIFACTS / "verifier-int8.onnx")
    ap.add_argument("--out", type=Path, default=ARTIFACTS / "calibration.json")
    ap.add_argument("--report", type=Path, default=RUNS / "calibration_report.json")
    ap.add_argument("--floors", type=float, nargs="+", default=[0.50, 0.60, 0.70])
    ap.add_argument("--ks", type=int, nargs="+", default=[1, 2, 3, 4])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--default-target", type=float, default=0.92)
    ap.add_argument(
        "--duplicate-share",
        type=float,
        default=0.369,
        help="read validation precision as if this share of its rows were duplicates "
        "(0 keeps the split's own share)",
    )
    ap.add_argument(
        "--keep-decision",
        type=Path,
        default=None,
        help="keep this calibration file's k, floor and weights; derive vetoes and tau again",
    )
    ap.add_argument("--limit", type=int, default=0, help="first N validation rows (smoke)")
    ap.add_argument(
        "--extra-limit", type=int, default=0, help="a seeded sample of N val_extra rows"
    )
    args = ap.parse_args(argv)
    rows = read_pairs(args.val)
    if args.limit:
        rows = rows[: args.limit]
    run4 = run_cache(rows, "val", args.model, max(args.ks), min(args.floors), args.threads)
    if args.duplicate_share:
        run4 = at_duplicate_share(run4, args.duplicate_share)
    extra = pair_set(args.val_extra, "val_extra", args.model, args.threads, args.extra_limit)
    vetoes, veto_report = choose_vetoes(run4, extra, min(TARGETS))
    print(f"[calibrate] vetoes {vetoes}: {veto_report}", flush=True)
    if args.keep_decision is None:
        opts = options(run4, extra, tuple(vetoes), args.floors, args.ks)
        best = pick(opts)
    else:
        opts, best = [], kept(args.keep_decision, run4, tuple(vetoes))
    dec, floor, k = best["decision"], best["floor"], best["k"]
    print(f"[calibrate] chosen k {k} floor {floor} {dec}", flush=True)
    fitted_on = describe_fit(best, len(rows), int(run4.duplicate.sum()), len(extra.y), args)
    run = first_k(run4, k)
    sv = serve(run, dec, floor)
    extra_doc = {
        "bound": {"method": "wilson", "z_one_sided": Z_ONE_SIDED},
        "duplicate_share": args.duplicate_share or float(run4.duplicate.mean()),
    }
    doc = write_calibration(
        args.out, args.model, dec, floor, k, None, fitted_on, best["table"], extra=extra_doc
    )
    tau_default = next(
        (r["tau"] for r in best["table"] if r["precision"] >= args.default_target - 1e-9), None
    )
    report: dict[str, Any] = {
        "model_sha256": doc["model_sha256"],
        "val_eval": {
            **cache_curves(run, sv, doc),
            "cosine": cosine_curves(run),
            "rows": run.n,
            "scored_pairs": run.scored_pairs,
        },
        "rows": run.n,
        "scored_pairs": run4.scored_pairs,
        "vetoes": vetoes,
        "veto_check": veto_report,
        "options": [
            {
                "k": o["k"],
                "floor": o["floor"],
                "decision": o["decision"].kind,
                "label": o["label"],
                "params": o["decision"].params(),
                "area": o["area"],
                "area_in_sample": o["area_in_sample"],
                "calls": o["calls"],
                "table": o["table"],
            }
            for o in opts
        ]
        or earlier_options(args.report, doc["model_sha256"]),
        "chosen": {
            "k": k,
            "floor": floor,
            "decision": dec.kind,
            "label": best["label"],
            "params": dec.params(),
            "table": best["table"],
        },
        "val_extra": pairwise_report(extra, dec, tau_default or 1.0),
        "val_extra_by_kind": by_kind(extra, dec, tau_default or 1.0),
        "cosine_curve": [
            metrics_at(run, serve_cosine(run), t) for t in np.round(np.arange(0.80, 1.0, 0.01), 2)
        ],
        "decision_curve": [metrics_at(run, sv, t) for t in np.round(np.arange(0.05, 1.0, 0.05), 2)],
    }
    for r in best["table"]:
        print(
            f"  target {r['precision']:.2f}: tau {r['tau']} hit_rate {r['hit_rate']} "
            f"val precision {r.get('measured_precision')} interval {r.get('interval')}"
        )
    print(f"[calibrate] val_extra {report['val_extra']}", flush=True)
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps(report, indent=2, default=str))
    print(f"[calibrate] wrote {args.out} (sha {doc['model_sha256'][:12]})", flush=True)
    return 0


def by_kind(ps: PairSet, dec: Decision, tau: float) -> dict[str, Any]:
    """Served share per kind of row at the default cut-off."""
    sc = ps.scores(dec)
    out: dict[str, Any] = {}
    for kind in sorted(set(ps.kind)):
        m = np.array([k == kind for k in ps.kind])
        out[kind] = {
            "rows": int(m.sum()),
            "duplicates": int(ps.y[m].sum()),
            "served": int((sc[m] >= tau).sum()),
            "served_right": int(((sc[m] >= tau) & ps.y[m]).sum()),
            "mean_prob": float(sigmoid(ps.logit[m]).mean()),
        }
    return out


if __name__ == "__main__":
    raise SystemExit(main())
