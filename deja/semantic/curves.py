"""Precision / hit-rate curves of a calibration run and the precision-target → τ table.

Two rules for τ. With ``z`` (the shipped table: z = 1.645), τ for a target is the least
threshold whose one-sided Wilson lower confidence bound on the labelled precision of
everything served at or above it reaches the target, so that a new sample of traffic like the
calibration split measures the target or more with that confidence (the point estimate alone
missed held-out targets by 1.5–4 points). Without it, the least threshold whose *conservative*
precision (the lowest labelled precision over all stricter thresholds with enough labelled
hits) reaches the target. Each row carries the two-sided 95% interval measured at its τ.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from deja.files import file_sha256
from deja.semantic.calibration import (
    Array,
    CacheRun,
    Decision,
    Served,
    metrics_at,
    outcomes,
    serve_cosine,
)

MAX_TOKENS = 64


def pav(y: Array, weights: Array | None = None) -> Array:
    """Isotonic (non-decreasing) weighted least-squares fit of ``y``
    (pool-adjacent-violators); every weight 1 without ``weights``."""
    ws = np.ones(len(y)) if weights is None else np.asarray(weights, dtype=np.float64)
    vals: list[float] = []
    wts: list[float] = []
    sizes: list[int] = []
    for v, wt in zip(y.astype(np.float64), ws, strict=True):
        vals.append(float(v))
        wts.append(float(wt))
        sizes.append(1)
        while len(vals) > 1 and vals[-2] > vals[-1]:
            w = wts[-2] + wts[-1]
            vals[-2] = (vals[-2] * wts[-2] + vals[-1] * wts[-1]) / w
            wts[-2] = w
            sizes[-2] += sizes[-1]
            vals.pop()
            wts.pop()
            sizes.pop()
    return np.repeat(np.array(vals), np.array(sizes, dtype=np.int64))


@dataclass
class Curve:
    """Precision/hit-rate as a function of tau over the served scores (ascending tau).
    ``smooth_precision``: mean of the isotonic fit of correctness-vs-score over labelled hits
    with score >= tau, non-decreasing in tau by construction."""

    tau: Array
    precision: Array
    smooth_precision: Array
    hit_rate: Array
    labelled: Array
    unjudged: Array
    #: Kish's effective number of labelled hits, (Σw)² / Σw², under the run's row weights
    #: (equal to ``labelled`` without weights): the n of the precision's interval.
    effective: Array


def curve(run: CacheRun, sv: Served) -> Curve:
    labelled, right, has = outcomes(run, sv)
    weight = run.row_weights()
    m = has & np.isfinite(sv.score)
    sc = sv.score[m]
    lab, ok, dup, w = labelled[m], right[m], (right & run.duplicate & labelled)[m], weight[m]
    order = np.argsort(-sc, kind="stable")
    sc, lab, ok, dup, w = sc[order], lab[order], ok[order], dup[order], w[order]
    # always-served (score +inf) hits count at every tau
    inf = ~np.isfinite(sv.score) & has & (sv.score > 0)
    base_lab = float(weight[labelled & inf].sum())
    base_ok = float(weight[right & inf].sum())
    base_sq = float((weight[labelled & inf] ** 2).sum())
    base_n = int(labelled[inf].sum())
    base_dup = int((right & run.duplicate & labelled)[inf].sum())
    iso = np.zeros(len(sc))
    lab_idx = np.flatnonzero(lab)
    if len(lab_idx):
        # isotonic in ascending score -> reverse order
        rev = lab_idx[::-1]
        iso[lab_idx] = pav(ok[rev].astype(np.float64), w[rev])[::-1]
    w_lab = np.where(lab, w, 0.0)
    c_lab = np.cumsum(w_lab) + base_lab
    c_sq = np.cumsum(w_lab**2) + base_sq
    c_n = np.cumsum(lab) + base_n
    c_ok = np.cumsum(np.where(ok, w, 0.0)) + base_ok
    c_iso = np.cumsum(iso * w_lab) + base_ok
    c_dup = np.cumsum(dup) + base_dup
    c_unj = np.cumsum(~lab) + int((inf & ~labelled).sum())
    # keep the last index of each distinct score (serving is score >= tau)
    sel = np.r_[sc[1:] != sc[:-1], True] if len(sc) else np.zeros(0, dtype=bool)
    with np.errstate(invalid="ignore", divide="ignore"):
        prec = np.where(c_n > 0, c_ok / np.maximum(c_lab, 1e-300), np.nan)
        sm = np.where(c_n > 0, c_iso / np.maximum(c_lab, 1e-300), np.nan)
        eff = np.where(c_n > 0, c_lab**2 / np.maximum(c_sq, 1e-300), 0.0)
    nd = max(1, int(run.duplicate.sum()))
    return Curve(
        sc[sel][::-1],
        prec[sel][::-1],
        sm[sel][::-1],
        (c_dup[sel] / nd)[::-1],
        c_n[sel][::-1],
        c_unj[sel][::-1],
        eff[sel][::-1],
    )


def conservative_precision(cv: Curve, min_labelled: int = 30) -> Array:
    """Monotone precision curve for choosing tau: at each tau, the LOWEST raw labelled
    precision over all thresholds >= tau that still have >= ``min_labelled`` labelled hits
    (nan beyond). Non-decreasing in tau, never above the raw curve, so a table row's tau
    meets its target at every higher threshold with enough support."""
    out = np.full(len(cv.tau), np.nan)
    valid = np.flatnonzero(cv.labelled >= min_labelled)
    if len(valid):
        last = int(valid[-1])
        out[: last + 1] = np.minimum.accumulate(cv.precision[: last + 1][::-1])[::-1]
    return out


def tau_for(cv: Curve, target: float, min_labelled: int = 30) -> float | None:
    """Smallest tau whose conservative (monotone) precision is >= target; None when
    unreachable."""
    cons = conservative_precision(cv, min_labelled)
    ok = np.nan_to_num(cons, nan=-1.0) >= target - 1e-12
    if not ok.any():
        return None
    return float(cv.tau[np.flatnonzero(ok)[0]])


def wilson(right: float, n: float, z: float) -> tuple[float, float]:
    """Wilson score interval of a proportion ``right / n`` at normal quantile ``z``."""
    if n <= 0:
        return (0.0, 1.0)
    p = right / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * float(np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / den
    return (max(0.0, mid - half), min(1.0, mid + half))


def measured_interval(m: dict[str, float], z: float = 1.96) -> tuple[float, float]:
    """The Wilson interval of :func:`metrics_at`'s labelled precision, over its effective
    number of labelled hits."""
    n = float(m["effective_labelled"])
    return wilson(float(m["precision"]) * n, n, z)


def tau_for_bound(cv: Curve, target: float, z: float, min_labelled: int = 30) -> float | None:
    """Smallest tau at which the one-sided Wilson lower bound (quantile ``z``) of the labelled
    precision of all hits served at or above tau reaches ``target``; None when none does."""
    for i in range(len(cv.tau)):  # ascending tau: the first that passes serves the most
        n = float(cv.effective[i])
        if cv.labelled[i] < min_labelled or not np.isfinite(cv.precision[i]):
            continue
        if wilson(float(cv.precision[i]) * n, n, z)[0] >= target - 1e-12:
            return float(cv.tau[i])
    return None


TARGETS = tuple(round(0.80 + 0.01 * i, 2) for i in range(18))


def build_table(
    run: CacheRun,
    sv: Served,
    targets: Sequence[float] = TARGETS,
    min_labelled: int = 30,
    z: float | None = None,
) -> list[dict[str, Any]]:
    """One row per target: τ (see the module docstring for the rule ``z`` selects), the
    duplicate hit rate, and the measured precision with its two-sided 95% interval."""
    cv = curve(run, sv)
    table: list[dict[str, Any]] = []
    floor_tau = -np.inf
    for t in targets:
        tau = tau_for(cv, t, min_labelled) if z is None else tau_for_bound(cv, t, z, min_labelled)
        if tau is None:
            table.append({"precision": t, "tau": None, "hit_rate": 0.0, "interval": None})
            floor_tau = np.inf
            continue
        tau = max(tau, floor_tau)  # a stricter target never gets a looser cut-off
        floor_tau = tau
        if not np.isfinite(tau):
            table.append({"precision": t, "tau": None, "hit_rate": 0.0, "interval": None})
            continue
        m = metrics_at(run, sv, tau)
        lo, hi = measured_interval(m)
        table.append(
            {
                "precision": t,
                "tau": round(tau, 6),
                "hit_rate": round(m["hit_rate"], 4),
                "measured_precision": round(float(m["precision"]), 4),
                "labelled": int(m["labelled"]),
                "interval": [round(lo, 4), round(hi, 4)],
            }
        )
    return table


def curve_area(table: Sequence[dict[str, Any]], targets: Sequence[float]) -> float:
    """Sum of validation hit rates over the given targets (to compare decision scores)."""
    return float(sum(r["hit_rate"] for r in table if r["precision"] in targets))


def skip_candidates(run: CacheRun, thresholds: Sequence[float]) -> list[dict[str, Any]]:
    """For each cosine threshold: labelled precision and counts of the top-1 cosine hits at
    or above it (what serving them unverified would add)."""
    sv = serve_cosine(run)
    return [dict(metrics_at(run, sv, t), cosine=t) for t in thresholds]


def write_calibration(
    path: Path,
    model_file: Path,
    decision: Decision,
    floor: float,
    k: int,
    skip_above: float | None,
    fitted_on: str,
    table: list[dict[str, Any]],
    max_tokens: int = MAX_TOKENS,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "model_file": model_file.name,
        "model_sha256": file_sha256(model_file),
        "max_tokens": max_tokens,
        "k": k,
        "cosine_floor": floor,
        "decision": decision.kind,
        "combined": decision.params(),
        "vetoes": list(decision.vetoes),
        "skip_verification_above": skip_above,
        "fitted_on": fitted_on,
        **(extra or {}),
        "table": [
            {
                "precision": r["precision"],
                "tau": r["tau"],
                "hit_rate": r["hit_rate"],
                "interval": r.get("interval"),
            }
            for r in table
        ],
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return doc
