"""The calibration math shared by ``deja calibrate`` and ``training/verifier``: AUC, isotonic
smoothing, the logistic fit, cache-mode labels, and a monotone, conservative table (synthetic
data), plus the schema of the shipped table."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest

from deja.semantic.auc import auc
from deja.semantic.calibration import (
    CacheRun,
    Decision,
    cache_run,
    fit_logistic,
    metrics_at,
    serve,
    serve_cosine,
)
from deja.semantic.crossencoder import SHIPPED_DIR
from deja.semantic.curves import build_table, conservative_precision, curve, pav


@dataclass
class Row:
    a: str
    b: str
    duplicate: bool


def test_auc_matches_pairwise_count() -> None:
    s = np.array([0.1, 0.4, 0.35, 0.8])
    y = np.array([0, 0, 1, 1])
    assert auc(s, y) == pytest.approx(0.75)
    assert auc(np.array([1.0, 1.0]), np.array([0, 1])) == pytest.approx(0.5)


def test_auc_is_the_pairwise_count_with_ties_halved() -> None:
    rng = np.random.default_rng(7)
    for n in (3, 17, 200):
        s = rng.integers(0, 4, n).astype(float)  # many ties
        y = rng.integers(0, 2, n).astype(bool)
        y[:2] = True, False  # both labels
        pos, neg = s[y][:, None], s[~y][None, :]
        brute = ((pos > neg).sum() + 0.5 * (pos == neg).sum()) / (pos.size * neg.size)
        assert auc(s, y) == pytest.approx(float(brute))
    assert np.isnan(auc(np.array([0.1, 0.2]), np.array([1, 1])))


def test_pav_is_monotone_and_preserves_mean() -> None:
    y = np.array([1, 0, 0, 1, 0, 1, 1, 1], dtype=float)
    fit = pav(y)
    assert np.all(np.diff(fit) >= -1e-12)
    assert fit.mean() == pytest.approx(y.mean())


def test_fit_logistic_recovers_direction() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, 2))
    p = 1 / (1 + np.exp(-(2 * x[:, 0] - x[:, 1] + 0.5)))
    y = (rng.random(2000) < p).astype(float)
    w = fit_logistic(x, y)
    assert w[0] > 1.2 and w[1] < -0.5 and w[2] > 0
    # a row weighted 2 counts as the row twice; weight 0 drops it
    twice = fit_logistic(np.vstack([x, x[:500]]), np.concatenate([y, y[:500]]))
    sw = np.r_[np.full(500, 2.0), np.ones(1500)]
    assert fit_logistic(x, y, sample_weight=sw) == pytest.approx(twice, abs=1e-6)
    dropped = fit_logistic(x[500:], y[500:])
    sw0 = np.r_[np.zeros(500), np.ones(1500)]
    assert fit_logistic(x, y, sample_weight=sw0) == pytest.approx(dropped, abs=1e-6)


def _toy_run() -> CacheRun:
    rows = [
        Row("q1", "q1 again", True),
        Row("q2", "q2 other", False),
        Row("q3", "q3 same", True),
        Row("q4", "q4", True),
    ]
    vecs = {
        "q1": [1, 0, 0, 0],
        "q1 again": [0.99, 0.141, 0, 0],
        "q2": [0, 1, 0, 0],
        "q2 other": [0, 0.95, 0.312, 0],
        "q3": [0, 0, 1, 0],
        "q3 same": [0, 0, 0.9, 0.436],
        "q4": [0, 0, 0, 1],
    }

    def embed(texts: list[str]) -> np.ndarray:
        m = np.array([vecs[t] for t in texts], dtype=np.float32)
        out: np.ndarray = m / np.linalg.norm(m, axis=1, keepdims=True)
        return out

    return cache_run(rows, embed, None, k=2, floor=0.5)


def test_cache_run_labels() -> None:
    run = _toy_run()
    assert run.kind[0, 0] == 1 and run.right[0, 0]  # own a, duplicate
    assert run.kind[1, 0] == 1 and not run.right[1, 0]  # own a, not duplicate
    assert run.kind[3, 0] == 2 and run.right[3, 0]  # identical text
    sv = serve_cosine(run)
    m = metrics_at(run, sv, 0.0)
    assert m["labelled"] == 4 and m["right"] == 3 and m["hit_rate"] == pytest.approx(1.0)


def test_table_is_monotone_and_conservative() -> None:
    run = _toy_run()
    run.logit[:, 0] = np.array([3.0, -1.0, 1.0, 5.0])
    sv = serve(run, Decision("verifier"), 0.5)
    cv = curve(run, sv)
    cons = conservative_precision(cv, min_labelled=1)
    ok = ~np.isnan(cons)
    assert np.all(np.diff(cons[ok]) >= 0) and np.all(cons[ok] <= cv.precision[ok] + 1e-12)
    table = build_table(run, sv, (0.75, 1.0), min_labelled=1)
    assert table[1]["tau"] is not None and table[1]["tau"] > table[0]["tau"] - 1e-12
    assert metrics_at(run, sv, table[1]["tau"])["precision"] == 1.0


def test_shipped_calibration_schema() -> None:
    doc = json.loads((SHIPPED_DIR / "calibration.json").read_text())
    assert doc["model_file"] == "verifier-int8.onnx" and doc["max_tokens"] == 64
    assert doc["decision"] in ("verifier", "combined")
    taus = [r["tau"] for r in doc["table"] if r["tau"] is not None]
    assert taus == sorted(taus)
    assert [r["precision"] for r in doc["table"]] == [round(0.80 + 0.01 * i, 2) for i in range(18)]


def _one_candidate_run(lg: np.ndarray, right: np.ndarray) -> CacheRun:
    """One own-``a`` candidate per query with these logits; right iff a duplicate."""
    n = len(lg)
    return CacheRun(
        index_texts=[f"q{i}" for i in range(n)],
        cand=np.arange(n).reshape(n, 1),
        cos=np.full((n, 1), 0.9),
        logit=lg.reshape(n, 1),
        kind=np.ones((n, 1), dtype=np.int8),
        right=right.reshape(n, 1),
        duplicate=right.copy(),
        k=1,
        floor=0.5,
    )


def _synthetic_run(n: int, seed: int) -> CacheRun:
    """P(right) rises with the logit."""
    rng = np.random.default_rng(seed)
    lg = rng.normal(0.0, 2.0, n)
    return _one_candidate_run(lg, rng.random(n) < 1 / (1 + np.exp(-1.5 * lg)))


def test_wilson_bound_table_is_stricter_and_keeps_its_promise_on_new_samples() -> None:
    from deja.semantic.curves import wilson

    lo, hi = wilson(90, 100, 1.96)
    assert lo < 0.9 < hi and wilson(0, 0, 1.96) == (0.0, 1.0)
    fit = _synthetic_run(3000, seed=1)
    sv = serve(fit, Decision("verifier"), 0.5)
    point = build_table(fit, sv, (0.85, 0.9), min_labelled=30)
    bound = build_table(fit, sv, (0.85, 0.9), min_labelled=30, z=1.645)
    for p, b in zip(point, bound, strict=True):
        assert b["tau"] >= p["tau"]  # the bound asks for more evidence
        assert b["interval"][0] <= b["measured_precision"] <= b["interval"][1]
    # τ from one sample holds its target on fresh samples of the same traffic
    misses = 0
    for seed in range(2, 22):
        fresh = _synthetic_run(3000, seed=seed)
        m = metrics_at(fresh, serve(fresh, Decision("verifier"), 0.5), bound[1]["tau"])
        misses += m["precision"] < 0.9
    assert misses <= 3


def test_vetoed_candidates_are_never_served() -> None:
    from deja.semantic.mismatch import kinds_mask

    run = _synthetic_run(200, seed=3)
    run.logit[:] = 5.0
    run.hard = np.zeros((200, 1), dtype=np.int64)
    run.hard[:50, 0] = kinds_mask(("number",))
    sv = serve(run, Decision("verifier", vetoes=("number",)), 0.5)
    assert np.all(sv.score[:50] == 0.0) and np.all(sv.score[50:] > 0.99)


def _run_with_share(n: int, share: float, seed: int) -> CacheRun:
    """Duplicates score higher; ``share`` of the rows are duplicates."""
    rng = np.random.default_rng(seed)
    dup = rng.random(n) < share
    return _one_candidate_run(np.where(dup, rng.normal(2.0, 1.5, n), rng.normal(-1.0, 1.5, n)), dup)


def test_a_split_read_at_another_duplicate_share_measures_like_traffic_with_that_share() -> None:
    from deja.semantic.calibration import at_duplicate_share

    fit = _run_with_share(20000, 0.30, seed=5)
    other = _run_with_share(20000, 0.40, seed=6)
    dec = Decision("verifier")
    shifted = at_duplicate_share(fit, 0.40)
    for tau in (0.5, 0.8, 0.9):
        raw = metrics_at(fit, serve(fit, dec, 0.5), tau)
        moved = metrics_at(shifted, serve(shifted, dec, 0.5), tau)
        truth = metrics_at(other, serve(other, dec, 0.5), tau)
        assert moved["precision"] > raw["precision"]  # more duplicates: fewer wrong hits
        assert moved["precision"] == pytest.approx(truth["precision"], abs=0.01)
        assert moved["hit_rate"] == raw["hit_rate"]  # a share of the duplicate rows
        assert 0 < moved["effective_labelled"] < moved["labelled"]
        assert raw["effective_labelled"] == raw["labelled"]
    # the table built at the higher share cuts lower, and its interval is a weighted one
    sv_raw, sv_moved = serve(fit, dec, 0.5), serve(shifted, dec, 0.5)
    t_raw = build_table(fit, sv_raw, (0.9,), min_labelled=30, z=1.645)[0]
    t_moved = build_table(shifted, sv_moved, (0.9,), min_labelled=30, z=1.645)[0]
    assert t_moved["tau"] < t_raw["tau"]
    lo, hi = t_moved["interval"]
    assert lo <= t_moved["measured_precision"] <= hi
    with pytest.raises(ValueError, match="duplicate share"):
        at_duplicate_share(fit, 1.0)


def test_weighted_pav_pools_by_weight() -> None:
    out = pav(np.array([1.0, 0.0]), np.array([1.0, 3.0]))
    assert out == pytest.approx([0.25, 0.25])
