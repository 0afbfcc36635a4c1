"""Verifier scoring and threshold calibration for the semantic cache (numpy + onnxruntime +
tokenizers only; no torch), meant to move into the gateway's domain package and back a
``deja calibrate --pairs FILE`` command.

Cache mode (the project's metric): every distinct ``a`` is inserted into an index; each ``b``
queries it. The top-``k`` neighbours by cosine with cosine >= ``floor`` are scored by the
verifier (each pair on its own by default); the candidate with the highest decision score
is served when that score is >= tau. A served hit is *labelled* when its text is the row's
own ``a`` (right iff ``duplicate``) or identical to the query (right); other hits are
*unjudged*.
Labelled precision = right / labelled; duplicate hit rate = duplicate rows served their own
``a`` (or identical text) / duplicate rows.

Typical use::

    v = Verifier.load(model_path, tokenizer_path)
    run = cache_run(rows, embed, v, k=4, floor=0.6)
    dec = Decision("verifier")                      # or fit_combined(run, floor)
    table = build_table(run, dec, floor, targets)
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

MAX_TOKENS = 64
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class PairRow(Protocol):
    a: str
    b: str
    duplicate: bool


def sigmoid(x: np.ndarray) -> np.ndarray:
    return np.asarray(1.0 / (1.0 + np.exp(-np.clip(x, -60.0, 60.0))), dtype=np.float64)


def logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=np.float64), 1e-12, 1 - 1e-12)
    return np.asarray(np.log(p / (1 - p)), dtype=np.float64)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """ROC AUC (rank statistic, ties averaged)."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s), dtype=np.float64)
    sorted_s = s[order]
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and sorted_s[j + 1] == sorted_s[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    npos, nneg = int(y.sum()), int((~y).sum())
    if npos == 0 or nneg == 0:
        return float("nan")
    return float((ranks[y].sum() - npos * (npos + 1) / 2) / (npos * nneg))


# --- the verifier ----------------------------------------------------------------------------


@dataclass
class Verifier:
    """The int8 ONNX cross-encoder. ``logits(pairs)`` -> float64 [n] (prob = sigmoid)."""

    session: ort.InferenceSession
    tokenizer: Tokenizer
    max_tokens: int = MAX_TOKENS

    @classmethod
    def load(
        cls, model: Path, tokenizer: Path, threads: int = 1, max_tokens: int = MAX_TOKENS
    ) -> Verifier:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        sess = ort.InferenceSession(
            str(model), sess_options=opts, providers=["CPUExecutionProvider"]
        )
        tok = Tokenizer.from_file(str(tokenizer))
        tok.no_padding()
        tok.enable_truncation(max_tokens)
        return cls(sess, tok, max_tokens)

    def features(self, pairs: Sequence[tuple[str, str]]) -> dict[str, np.ndarray]:
        """``tokenizer.encode(a, b)`` per pair -> [CLS] a [SEP] b [SEP], right-padded with 0."""
        encs = self.tokenizer.encode_batch(list(pairs))
        n = max(len(e.ids) for e in encs)
        ids = np.zeros((len(encs), n), dtype=np.int64)
        am = np.zeros_like(ids)
        tt = np.zeros_like(ids)
        for i, e in enumerate(encs):
            m = len(e.ids)
            ids[i, :m] = e.ids
            tt[i, :m] = e.type_ids
            am[i, :m] = 1
        return {"input_ids": ids, "attention_mask": am, "token_type_ids": tt}

    def logits(self, pairs: Sequence[tuple[str, str]], batch: int = 4) -> np.ndarray:
        out = np.empty(len(pairs), dtype=np.float64)
        for s in range(0, len(pairs), batch):
            chunk = pairs[s : s + batch]
            res = self.session.run(["logits"], self.features(chunk))[0]
            out[s : s + len(chunk)] = np.asarray(res, dtype=np.float64).reshape(-1)
        return out


# --- cache-mode candidates -------------------------------------------------------------------


UNJUDGED, OWN, IDENTICAL = 0, 1, 2


@dataclass
class CacheRun:
    """Top-k cosine candidates of every query, their verifier logits and labels.

    Arrays are [n_queries, k]; missing candidates have ``cand = -1``, ``cos = -inf``,
    ``logit = nan``. ``kind``: 0 unjudged, 1 the row's own ``a``, 2 identical to the query.
    ``right``: the candidate would be a correct hit (own ``a`` and duplicate, or identical).
    """

    index_texts: list[str]
    cand: np.ndarray
    cos: np.ndarray
    logit: np.ndarray
    kind: np.ndarray
    right: np.ndarray
    duplicate: np.ndarray
    k: int
    floor: float
    scored_pairs: int = 0
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return int(self.cand.shape[0])


def cache_run(
    rows: Sequence[PairRow],
    embed: Callable[[list[str]], np.ndarray],
    verifier: Verifier | None,
    k: int = 4,
    floor: float = 0.6,
    progress: Callable[[int, int], None] | None = None,
    batch: int = 1,
) -> CacheRun:
    """Index every distinct ``a``, query with every ``b``, keep the top-``k`` neighbours with
    cosine >= ``floor`` and score them with ``verifier``, ``batch`` pairs per run (default 1:
    dynamic int8 quantisation scales activations over the whole padded batch, so a batched
    pair's score depends on its batch-mates; one at a time costs about the same). ``embed``
    returns unit vectors [n, dim]. ``verifier=None`` leaves logits nan (cosine only)."""
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
                if text == row.b:
                    kind[i, slot], right[i, slot] = IDENTICAL, True
                elif c == pos[row.a]:
                    kind[i, slot], right[i, slot] = OWN, row.duplicate
            if verifier is not None and keep:
                lg[i, : len(keep)] = verifier.logits(
                    [(row.b, index_texts[c]) for c in keep], batch=batch
                )
                scored += len(keep)
            if progress is not None:
                progress(i + 1, n)
    return CacheRun(index_texts, cand, cos, lg, kind, right, dup, k, floor, scored)


# --- decision scores -------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """``verifier``: sigmoid(logit). ``combined``: sigmoid(w_logit*logit + w_cosine*cos + bias)."""

    kind: Literal["verifier", "combined"] = "verifier"
    w_logit: float = 1.0
    w_cosine: float = 0.0
    bias: float = 0.0

    def score(self, lg: np.ndarray, cos: np.ndarray) -> np.ndarray:
        if self.kind == "verifier":
            return sigmoid(lg)
        return sigmoid(self.w_logit * lg + self.w_cosine * cos + self.bias)

    def params(self) -> dict[str, float] | None:
        if self.kind == "verifier":
            return None
        return {"w_logit": self.w_logit, "w_cosine": self.w_cosine, "bias": self.bias}


def fit_logistic(X: np.ndarray, y: np.ndarray, l2: float = 1e-3, iters: int = 50) -> np.ndarray:
    """L2-regularised logistic regression by Newton's method; X gets a bias column appended.
    Returns weights [d + 1] (last = bias)."""
    Xb = np.hstack([X, np.ones((X.shape[0], 1))])
    w = np.zeros(Xb.shape[1])
    reg = l2 * np.eye(Xb.shape[1])
    reg[-1, -1] = 0.0
    for _ in range(iters):
        p = sigmoid(Xb @ w)
        g = Xb.T @ (p - y) + reg @ w
        H = (Xb * (p * (1 - p))[:, None]).T @ Xb + reg
        delta = np.linalg.solve(H, g)
        w -= delta
        if np.abs(delta).max() < 1e-8:
            break
    return w


def fit_combined(run: CacheRun, floor: float) -> Decision:
    """Platt-style fit of P(right | verifier logit, cosine) on the labelled candidates
    (own ``a`` or identical) with cosine >= ``floor``."""
    m = (run.kind > 0) & (run.cos >= floor) & np.isfinite(run.logit)
    X = np.stack([run.logit[m], run.cos[m]], axis=1)
    w = fit_logistic(X, run.right[m].astype(np.float64))
    return Decision("combined", float(w[0]), float(w[1]), float(w[2]))


# --- serving and curves ----------------------------------------------------------------------


@dataclass
class Served:
    """Per query: the chosen candidate slot (-1: none) and its decision score (-inf: none)."""

    slot: np.ndarray
    score: np.ndarray


def serve(
    run: CacheRun, decision: Decision, floor: float, skip_above: float | None = None
) -> Served:
    """The candidate with the highest decision score among those with cosine >= floor. With
    ``skip_above``, a top-1 cosine >= it is served unverified (score +inf)."""
    sc = decision.score(run.logit, run.cos)
    sc = np.where((run.cos >= floor) & (run.cand >= 0) & np.isfinite(run.logit), sc, -np.inf)
    slot = np.argmax(sc, axis=1)
    best = sc[np.arange(run.n), slot]
    slot = np.where(np.isfinite(best), slot, -1)
    if skip_above is not None:
        top = run.cos[:, 0] >= skip_above
        slot = np.where(top, 0, slot)
        best = np.where(top, np.inf, best)
    return Served(slot, best)


def serve_cosine(run: CacheRun) -> Served:
    """Cosine-only baseline: the top-1 neighbour, scored by its cosine."""
    has = run.cand[:, 0] >= 0
    return Served(np.where(has, 0, -1), np.where(has, run.cos[:, 0], -np.inf))


def _outcomes(run: CacheRun, sv: Served) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    idx = np.arange(run.n)
    s = np.maximum(sv.slot, 0)
    has = sv.slot >= 0
    kind = np.where(has, run.kind[idx, s], 0)
    right = has & run.right[idx, s]
    labelled = has & (kind > 0)
    return labelled, right, has


def metrics_at(run: CacheRun, sv: Served, tau: float) -> dict[str, float]:
    """Labelled precision, duplicate hit rate and counts when serving scores >= ``tau``."""
    labelled, right, has = _outcomes(run, sv)
    hit = has & (sv.score >= tau)
    lab = hit & labelled
    ok = hit & right
    n_lab = int(lab.sum())
    dup_hits = int((ok & run.duplicate & labelled).sum())
    return {
        "tau": float(tau),
        "hits": int(hit.sum()),
        "labelled": n_lab,
        "right": int(ok.sum()),
        "unjudged": int((hit & ~labelled).sum()),
        "precision": ok.sum() / n_lab if n_lab else float("nan"),
        "hit_rate": dup_hits / max(1, int(run.duplicate.sum())),
    }


def pav(y: np.ndarray) -> np.ndarray:
    """Isotonic (non-decreasing) least-squares fit of ``y`` (pool-adjacent-violators)."""
    vals: list[float] = []
    wts: list[int] = []
    for v in y.astype(np.float64):
        vals.append(float(v))
        wts.append(1)
        while len(vals) > 1 and vals[-2] > vals[-1]:
            w = wts[-2] + wts[-1]
            vals[-2] = (vals[-2] * wts[-2] + vals[-1] * wts[-1]) / w
            wts[-2] = w
            vals.pop()
            wts.pop()
    return np.repeat(np.array(vals), np.array(wts))


@dataclass
class Curve:
    """Precision/hit-rate as a function of tau over the served scores (ascending tau).
    ``smooth_precision``: mean of the isotonic fit of correctness-vs-score over labelled hits
    with score >= tau, non-decreasing in tau by construction."""

    tau: np.ndarray
    precision: np.ndarray
    smooth_precision: np.ndarray
    hit_rate: np.ndarray
    labelled: np.ndarray
    unjudged: np.ndarray


def curve(run: CacheRun, sv: Served) -> Curve:
    labelled, right, has = _outcomes(run, sv)
    m = has & np.isfinite(sv.score)
    sc = sv.score[m]
    lab, ok, dup = labelled[m], right[m], (right & run.duplicate & labelled)[m]
    order = np.argsort(-sc, kind="stable")
    sc, lab, ok, dup = sc[order], lab[order], ok[order], dup[order]
    # always-served (score +inf) hits count at every tau
    inf = ~np.isfinite(sv.score) & has & (sv.score > 0)
    base_lab, base_ok = int(labelled[inf].sum()), int(right[inf].sum())
    base_dup = int((right & run.duplicate & labelled)[inf].sum())
    iso = np.zeros(len(sc))
    lab_idx = np.flatnonzero(lab)
    if len(lab_idx):
        # isotonic in ascending score -> reverse order
        iso_lab = pav(ok[lab_idx][::-1].astype(np.float64))[::-1]
        iso[lab_idx] = iso_lab
    c_lab = np.cumsum(lab) + base_lab
    c_ok = np.cumsum(ok) + base_ok
    c_iso = np.cumsum(iso) + base_ok
    c_dup = np.cumsum(dup) + base_dup
    c_unj = np.cumsum(~lab) + int((inf & ~labelled).sum())
    # keep the last index of each distinct score (serving is score >= tau)
    last = np.r_[sc[1:] != sc[:-1], True] if len(sc) else np.zeros(0, dtype=bool)
    with np.errstate(invalid="ignore", divide="ignore"):
        prec = np.where(c_lab > 0, c_ok / np.maximum(c_lab, 1), np.nan)
        sm = np.where(c_lab > 0, c_iso / np.maximum(c_lab, 1), np.nan)
    nd = max(1, int(run.duplicate.sum()))
    sel = last
    return Curve(
        sc[sel][::-1],
        prec[sel][::-1],
        sm[sel][::-1],
        (c_dup[sel] / nd)[::-1],
        c_lab[sel][::-1],
        c_unj[sel][::-1],
    )


def conservative_precision(cv: Curve, min_labelled: int = 30) -> np.ndarray:
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


TARGETS = tuple(round(0.80 + 0.01 * i, 2) for i in range(18))


def build_table(
    run: CacheRun, sv: Served, targets: Sequence[float] = TARGETS, min_labelled: int = 30
) -> list[dict[str, Any]]:
    cv = curve(run, sv)
    table: list[dict[str, Any]] = []
    for t in targets:
        tau = tau_for(cv, t, min_labelled)
        if tau is None:
            table.append({"precision": t, "tau": None, "hit_rate": 0.0})
            continue
        m = metrics_at(run, sv, tau)
        table.append(
            {
                "precision": t,
                "tau": round(tau, 6),
                "hit_rate": round(m["hit_rate"], 4),
                "measured_precision": round(float(m["precision"]), 4),
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
) -> dict[str, Any]:
    doc = {
        "model_file": model_file.name,
        "model_sha256": sha256_file(model_file),
        "max_tokens": max_tokens,
        "k": k,
        "cosine_floor": floor,
        "decision": decision.kind,
        "combined": decision.params(),
        "skip_verification_above": skip_above,
        "fitted_on": fitted_on,
        "table": [
            {"precision": r["precision"], "tau": r["tau"], "hit_rate": r["hit_rate"]} for r in table
        ],
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return doc


def load_calibration(path: Path) -> tuple[Decision, dict[str, Any]]:
    doc: dict[str, Any] = json.loads(path.read_text())
    c: dict[str, Any] = doc.get("combined") or {}
    if doc["decision"] == "combined":
        dec = Decision("combined", float(c["w_logit"]), float(c["w_cosine"]), float(c["bias"]))
    else:
        dec = Decision("verifier")
    return dec, doc


def tau_for_target(doc: dict[str, Any], target: float) -> float | None:
    for r in doc["table"]:
        if math.isclose(float(r["precision"]), target, abs_tol=1e-9):
            return None if r["tau"] is None else float(r["tau"])
    raise KeyError(f"no table row for precision {target}")


__all__ = [
    "IDENTICAL",
    "OWN",
    "TARGETS",
    "UNJUDGED",
    "CacheRun",
    "Curve",
    "Decision",
    "Served",
    "Verifier",
    "auc",
    "build_table",
    "cache_run",
    "conservative_precision",
    "curve",
    "curve_area",
    "fit_combined",
    "fit_logistic",
    "load_calibration",
    "logit",
    "metrics_at",
    "pav",
    "serve",
    "serve_cosine",
    "sha256_file",
    "sigmoid",
    "skip_candidates",
    "tau_for",
    "tau_for_target",
    "write_calibration",
]
