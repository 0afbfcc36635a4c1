"""Calibrating the verifier in cache mode: every distinct cached question ``a`` is indexed, every
``b`` queries it, the top-``k`` neighbours above a cosine floor are scored by the verifier in one
batch, and the candidate with the best decision score is served when that score reaches τ.

This is the computation behind ``calibration.json`` (``training/verifier``) and ``deja calibrate
--pairs FILE``. A served hit is *labelled* when its text is the row's own ``a`` (right iff
``duplicate``) or identical to the query (right); other hits are *unjudged*. Labelled precision
= right / labelled; duplicate hit rate = duplicate rows served their own ``a`` / duplicate rows
(``../shared/data/README.md``). numpy only; the curves and tables are in
:mod:`deja.semantic.curves`, the pair files in :mod:`deja.semantic.pairs`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from deja.semantic.mismatch import compare, kinds_mask
from deja.semantic.pairs import PairRow
from deja.semantic.verifier import same_words

Array = npt.NDArray[Any]
#: Scores (query, cached questions) → one logit per cached question.
Scorer = Callable[[str, list[str]], Array]


def sigmoid(x: Array) -> npt.NDArray[np.float64]:
    return np.asarray(1.0 / (1.0 + np.exp(-np.clip(x, -60.0, 60.0))), dtype=np.float64)


# --- the verifier ----------------------------------------------------------------------------


UNJUDGED, OWN, IDENTICAL = 0, 1, 2


@dataclass
class CacheRun:
    """Top-k cosine candidates of every query, their verifier logits and labels.

    Arrays are [n_queries, k]; missing candidates have ``cand = -1``, ``cos = -inf``,
    ``logit = nan``. ``kind``: 0 unjudged, 1 the row's own ``a``, 2 identical to the query.
    ``right``: the candidate would be a correct hit (own ``a`` and duplicate, or identical).
    ``same``: the candidate is the query up to case and punctuation, which the gateway serves
    without the verifier (:func:`deja.semantic.verifier.same_words`).
    """

    index_texts: list[str]
    cand: Array
    cos: Array
    logit: Array
    kind: Array
    right: Array
    duplicate: Array
    k: int
    floor: float
    scored_pairs: int = 0
    meta: dict[str, Any] = field(default_factory=dict)
    same: Array | None = None
    #: Per candidate: the hard mismatch kinds as bits (``Signals.mask``) and the soft
    #: mismatch features [n, k, 2] (``Signals.features``).
    hard: Array | None = None
    feats: Array | None = None
    #: Per query row: its weight in labelled precision (None: every row 1). Set by
    #: :func:`at_duplicate_share` to read a split as if its duplicate share were another.
    weight: Array | None = None

    @property
    def n(self) -> int:
        return int(self.cand.shape[0])

    def row_weights(self) -> npt.NDArray[np.float64]:
        if self.weight is None:
            return np.ones(self.n, dtype=np.float64)
        return np.asarray(self.weight, dtype=np.float64)


def at_duplicate_share(run: CacheRun, share: float) -> CacheRun:
    """``run`` with its rows weighted so that duplicate rows make up ``share`` of the total
    weight (a prior-shift correction): labelled precision then reads as on traffic with that
    share of duplicates. The hit rate, a share of the duplicate rows, is unchanged."""
    if not 0.0 < share < 1.0:
        raise ValueError(f"duplicate share must be in (0, 1), got {share}")
    base = float(run.duplicate.mean())
    if not 0.0 < base < 1.0:
        raise ValueError("a run needs duplicate and non-duplicate rows to be reweighted")
    w = np.where(run.duplicate, share / base, (1.0 - share) / (1.0 - base))
    return replace(run, weight=w)


def _label(row: PairRow, text: str, own: bool) -> tuple[int, bool]:
    """A candidate's kind and whether serving it is right: the query's own text (right), the
    row's own ``a`` (right iff a duplicate), or another row's question (unjudged)."""
    if text == row.b:
        return IDENTICAL, True
    if own:
        return OWN, row.duplicate
    return UNJUDGED, False


def cache_run(
    rows: Sequence[PairRow],
    embed: Callable[[list[str]], Array],
    scorer: Scorer | None,
    k: int = 4,
    floor: float = 0.6,
    progress: Callable[[int, int], None] | None = None,
) -> CacheRun:
    """Index every distinct ``a``, query with every ``b``, keep the top-``k`` neighbours with
    cosine >= ``floor`` and score them with ``scorer`` (one batch per query). ``embed``
    returns unit vectors [n, dim]. ``scorer=None`` leaves logits nan (cosine only)."""
    index_texts = list(dict.fromkeys(r.a for r in rows))
    pos = {t: i for i, t in enumerate(index_texts)}
    A = np.asarray(embed(index_texts), dtype=np.float32)
    B = np.asarray(embed([r.b for r in rows]), dtype=np.float32)
    n = len(rows)
    cand = np.full((n, k), -1, dtype=np.int64)
    cos = np.full((n, k), -np.inf, dtype=np.float64)
    lg = np.full((n, k), np.nan, dtype=np.float64)
    kind = np.zeros((n, k), dtype=np.int8)
    right = np.zeros((n, k), dtype=bool)
    same = np.zeros((n, k), dtype=bool)
    hard = np.zeros((n, k), dtype=np.int64)
    feats = np.zeros((n, k, 2), dtype=np.float64)
    dup = np.array([r.duplicate for r in rows], dtype=bool)
    scored = 0
    step = 1024
    for s in range(0, n, step):
        sims = B[s : s + step] @ A.T
        top = np.argsort(-sims, axis=1, kind="stable")[:, :k]
        for j in range(top.shape[0]):
            i = s + j
            row = rows[i]
            keep = [int(c) for c in top[j] if sims[j, c] >= floor]
            for slot, c in enumerate(keep):
                cand[i, slot] = c
                cos[i, slot] = float(sims[j, c])
                text = index_texts[c]
                same[i, slot] = same_words(row.b, text)
                signals = compare(row.b, text)
                hard[i, slot], feats[i, slot] = signals.mask, signals.features()
                kind[i, slot], right[i, slot] = _label(row, text, c == pos[row.a])
            if scorer is not None and keep:
                lg[i, : len(keep)] = scorer(row.b, [index_texts[c] for c in keep])
                scored += len(keep)
            if progress is not None:
                progress(i + 1, n)
    arrays = (cand, cos, lg, kind, right, dup)
    return CacheRun(index_texts, *arrays, k, floor, scored, same=same, hard=hard, feats=feats)


@dataclass(frozen=True)
class Decision:
    """``verifier``: sigmoid(logit). ``combined``: sigmoid(w_logit*logit + w_cosine*cos +
    w_negation*negation + w_extra_entity*extra_entity + bias). Either way a candidate with a
    mismatch kind in ``vetoes`` scores 0 (the arrays twin of ``CalibrationTable.score``)."""

    kind: Literal["verifier", "combined"] = "verifier"
    w_logit: float = 1.0
    w_cosine: float = 0.0
    bias: float = 0.0
    w_negation: float = 0.0
    w_extra_entity: float = 0.0
    vetoes: tuple[str, ...] = ()

    def score(
        self, lg: Array, cos: Array, feats: Array | None = None, hard: Array | None = None
    ) -> Array:
        if self.kind == "verifier":
            out = sigmoid(lg)
        else:
            z = self.w_logit * lg + self.w_cosine * cos + self.bias
            if feats is not None:
                z = z + self.w_negation * feats[..., 0] + self.w_extra_entity * feats[..., 1]
            out = sigmoid(z)
        if hard is not None and self.vetoes:
            out = np.where((hard & kinds_mask(self.vetoes)) != 0, 0.0, out)
        return out

    def params(self) -> dict[str, float] | None:
        if self.kind == "verifier":
            return None
        return {
            "w_logit": self.w_logit,
            "w_cosine": self.w_cosine,
            "bias": self.bias,
            "w_negation": self.w_negation,
            "w_extra_entity": self.w_extra_entity,
        }


def fit_logistic(
    X: Array, y: Array, l2: float = 1e-3, iters: int = 50, sample_weight: Array | None = None
) -> Array:
    """L2-regularised logistic regression by Newton's method; X gets a bias column appended,
    each row counts ``sample_weight`` (1 by default). Returns weights [d + 1] (last = bias)."""
    Xb = np.hstack([X, np.ones((X.shape[0], 1))])
    sw = np.ones(len(y)) if sample_weight is None else np.asarray(sample_weight, np.float64)
    w = np.zeros(Xb.shape[1])
    reg = l2 * np.eye(Xb.shape[1])
    reg[-1, -1] = 0.0
    for _ in range(iters):
        p = sigmoid(Xb @ w)
        g = Xb.T @ (sw * (p - y)) + reg @ w
        H = (Xb * (sw * p * (1 - p))[:, None]).T @ Xb + reg
        delta = np.linalg.solve(H, g)
        w -= delta
        if np.abs(delta).max() < 1e-8:
            break
    return w


def fit_combined(
    run: CacheRun,
    floor: float,
    vetoes: tuple[str, ...] = (),
    extra: tuple[Array, Array] | None = None,
    extra_weight: float = 1.0,
) -> Decision:
    """Logistic fit of P(right | verifier logit, cosine, negation, extra entity) on the
    labelled candidates (own ``a`` or identical) with cosine >= ``floor`` that no veto
    removes, plus ``extra`` rows (X [m, 4] in that column order, y [m]) from other sets, each
    of which counts ``extra_weight`` of a candidate row."""
    m = (run.kind > 0) & (run.cos >= floor) & np.isfinite(run.logit)
    if run.hard is not None and vetoes:
        m &= (run.hard & kinds_mask(vetoes)) == 0
    feats = run.feats if run.feats is not None else np.zeros((*run.cos.shape, 2))
    X = np.column_stack([run.logit[m], run.cos[m], feats[m][:, 0], feats[m][:, 1]])
    y = run.right[m].astype(np.float64)
    sw = np.ones(len(y))
    if extra is not None:
        X, y = np.vstack([X, extra[0]]), np.concatenate([y, extra[1]])
        sw = np.concatenate([sw, np.full(len(extra[1]), extra_weight)])
    w = fit_logistic(X, y, sample_weight=sw)
    return Decision(
        "combined", float(w[0]), float(w[1]), float(w[4]), float(w[2]), float(w[3]), vetoes
    )


@dataclass
class Served:
    """Per query: the chosen candidate slot (-1: none) and its decision score (-inf: none)."""

    slot: Array
    score: Array


def serve(
    run: CacheRun, decision: Decision, floor: float, skip_above: float | None = None
) -> Served:
    """What the gateway serves: the candidate with the highest decision score among those with
    cosine >= floor — or, when one of them is the query up to case and punctuation, that one
    with score 1.0, unverified. With ``skip_above``, a top-1 cosine >= it is served unverified
    (score +inf)."""
    sc = decision.score(run.logit, run.cos, run.feats, run.hard)
    usable = (run.cos >= floor) & (run.cand >= 0)
    sc = np.where(usable & np.isfinite(run.logit), sc, -np.inf)
    slot = np.argmax(sc, axis=1)
    best = sc[np.arange(run.n), slot]
    slot = np.where(np.isfinite(best), slot, -1)
    if run.same is not None:
        same = run.same & usable
        has = same.any(axis=1)
        slot = np.where(has, np.argmax(same, axis=1), slot)
        best = np.where(has, 1.0, best)
    if skip_above is not None:
        top = run.cos[:, 0] >= skip_above
        slot = np.where(top, 0, slot)
        best = np.where(top, np.inf, best)
    return Served(slot, best)


def serve_cosine(run: CacheRun) -> Served:
    """Cosine-only baseline: the top-1 neighbour, scored by its cosine."""
    has = run.cand[:, 0] >= 0
    return Served(np.where(has, 0, -1), np.where(has, run.cos[:, 0], -np.inf))


def outcomes(run: CacheRun, sv: Served) -> tuple[Array, Array, Array]:
    idx = np.arange(run.n)
    s = np.maximum(sv.slot, 0)
    has = sv.slot >= 0
    kind = np.where(has, run.kind[idx, s], 0)
    right = has & run.right[idx, s]
    labelled = has & (kind > 0)
    return labelled, right, has


def metrics_at(run: CacheRun, sv: Served, tau: float) -> dict[str, float]:
    """Labelled precision (weighted by the run's row weights, if any), duplicate hit rate and
    counts when serving scores >= ``tau``."""
    labelled, right, has = outcomes(run, sv)
    hit = has & (sv.score >= tau)
    lab = hit & labelled
    ok = hit & right
    n_lab = int(lab.sum())
    w = run.row_weights()
    w_lab = float(w[lab].sum())
    dup_hits = int((ok & run.duplicate & labelled).sum())
    return {
        "tau": float(tau),
        "hits": int(hit.sum()),
        "labelled": n_lab,
        # Kish's effective number under the row weights (``labelled`` without them)
        "effective_labelled": w_lab**2 / float((w[lab] ** 2).sum()) if n_lab else 0.0,
        "right": int(ok.sum()),
        "unjudged": int((hit & ~labelled).sum()),
        "precision": float(w[ok & lab].sum()) / w_lab if n_lab else float("nan"),
        "hit_rate": dup_hits / max(1, int(run.duplicate.sum())),
    }
