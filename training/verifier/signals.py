"""Three more signals for the decision, measured on validation data only; nothing is fitted
for the gateway here.

- **Both orders.** The verifier reads ``[CLS] query [SEP] cached [SEP]``. Scoring the pair in
  the other order as well and averaging (or taking the lower) logit is a test-time ensemble:
  it costs a second verifier call per candidate.
- **Residual cosine.** The words each side has and the other lacks (the project's mismatch
  tokens), embedded with the gateway's embedder: "cancel" against "end" should read close,
  "gaming" against "programming" far. 0 when one side adds nothing (a narrower or wider
  question). Does it add to the verifier logit and the pair cosine, the decision's inputs?
- **Pair head** (``--head``). A logistic head over the embedder's two unit vectors, ``[u*v,
  |u-v|]`` (Sentence-BERT's classifier features: a learned weighting of the cosine's terms),
  trained on the verifier's training file. The embedder was trained on far more paraphrase
  pairs than the verifier ever saw; a head could carry some of that where the cross-encoder
  has not learnt it. At run time it would cost only the candidate's stored vector.

Pairwise ROC AUC per order on the Quora validation split (a seeded sample), the rule-made and
MRPC/STS validation rows (``val_extra``) and the held-out synonyms (all paraphrases: only the
logit's spread is shown); the residual cosine and the pair head by a 5-fold cross-fitted
logistic AUC on the Quora validation pairs that no mismatch kind flags.

    .venv-train/bin/python -m training.verifier.prep   # the validation files
    .venv/bin/python -m training.verifier.embed        # their cached vectors
    .venv/bin/python -m training.verifier.embed \
        --split training/verifier/.cache/train_synonyms.jsonl  # for --head
    .venv/bin/python -m training.verifier.signals --head --report /tmp/signals.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from deja.semantic.auc import auc
from deja.semantic.calibration import fit_logistic, sigmoid
from deja.semantic.mismatch import compare, tokens
from training.verifier.calibrate import cached_embed
from training.verifier.calibration import Verifier
from training.verifier.common import ARTIFACTS, CACHE, read_json_rows
from training.verifier.embed import load_embedder

TRAIN = CACHE / "train_synonyms.jsonl"  # the shipped model's training file (prep's default)
SETS = {
    "val": CACHE / "val.jsonl",
    "val_extra": CACHE / "val_extra.jsonl",
    "val_synonym": CACHE / "val_synonym.jsonl",
}


def residual(query: str, cached: str) -> tuple[str, str]:
    """The words of each side that the other lacks, in order."""
    qa, qb = tokens(query), tokens(cached)
    sa, sb = set(qa), set(qb)
    return " ".join(w for w in qa if w not in sb), " ".join(w for w in qb if w not in sa)


def unit_vectors(embedder: Any, texts: list[str]) -> np.ndarray:
    out = np.asarray(
        [v for i in range(0, len(texts), 64) for v in embedder.embed_batch(texts[i : i + 64])],
        dtype=np.float64,
    )
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


def pair_features(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Sentence-BERT's classifier features of two batches of unit vectors: [u*v, |u-v|]."""
    return np.hstack([u * v, np.abs(u - v)])


def fit_head(path: Path = TRAIN, l2: float = 1.0) -> np.ndarray:
    """The pair head's logistic weights (last = bias), fitted on every row of ``path`` (``b``
    asks, ``a`` is cached) from the embed step's cached vectors of that file."""
    rows = read_json_rows(path)
    vectors = cached_embed(path.stem)
    X = pair_features(vectors([str(r["b"]) for r in rows]), vectors([str(r["a"]) for r in rows]))
    return fit_logistic(X, np.array([float(r["duplicate"]) for r in rows]), l2=l2, iters=30)


def measure(
    rows: list[dict[str, Any]],
    split: str,
    v: Verifier,
    embedder: Any,
    head: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    q, c = [str(r["b"]) for r in rows], [str(r["a"]) for r in rows]
    pair_vectors = cached_embed(split)  # the embed step's vectors, not embedded again
    uq, uc = pair_vectors(q), pair_vectors(c)
    res = [residual(x, y) for x, y in zip(q, c, strict=True)]
    one_sided = np.array([not (a and b) for a, b in res])
    rcos = np.sum(
        unit_vectors(embedder, [a or "." for a, _ in res])
        * unit_vectors(embedder, [b or "." for _, b in res]),
        axis=1,
    )
    head_logit = (
        np.zeros(len(rows)) if head is None else pair_features(uq, uc) @ head[:-1] + head[-1]
    )
    return {
        "y": np.array([bool(r["duplicate"]) for r in rows]),
        "forward": v.logits(list(zip(q, c, strict=True)), batch=1),
        "reverse": v.logits(list(zip(c, q, strict=True)), batch=1),
        "cos": np.sum(uq * uc, axis=1),
        "head": head_logit,
        "rcos": np.where(one_sided, 0.0, rcos),
        "one_sided": one_sided.astype(np.float64),
        "flagged": np.array([compare(x, y).mask != 0 for x, y in zip(q, c, strict=True)]),
    }


def cross_fitted_auc(X: np.ndarray, y: np.ndarray, folds: int = 5, seed: int = 7) -> float:
    """ROC AUC of a logistic fit, each row scored by the fit on the other folds."""
    fold = np.random.default_rng(seed).integers(0, folds, len(y))
    score = np.zeros(len(y))
    for f in range(folds):
        w = fit_logistic(X[fold != f], y[fold != f].astype(np.float64))
        score[fold == f] = sigmoid(X[fold == f] @ w[:-1] + w[-1])
    return auc(score, y)


def summary(m: dict[str, np.ndarray]) -> dict[str, Any]:
    y, f, r = m["y"], m["forward"], m["reverse"]
    out: dict[str, Any] = {
        "rows": len(y),
        "duplicates": int(y.sum()),
        "order_corr": round(float(np.corrcoef(f, r)[0, 1]), 4),
        "order_mean_abs_diff": round(float(np.abs(f - r).mean()), 4),
    }
    if 0 < y.sum() < len(y):
        for name, s in (("forward", f), ("reverse", r), ("mean", (f + r) / 2)):
            out[f"auc_{name}"] = round(auc(s, y), 4)
        out["auc_min"] = round(auc(np.minimum(f, r), y), 4)
    else:
        out["logit_above_0"] = {
            k: int((s > 0).sum()) for k, s in (("forward", f), ("mean", (f + r) / 2))
        }
    return out


def residual_report(m: dict[str, np.ndarray]) -> dict[str, Any]:
    keep = ~m["flagged"]
    y = m["y"][keep]
    base = np.column_stack([m["forward"][keep], m["cos"][keep]])
    more = np.column_stack([base, m["rcos"][keep], m["one_sided"][keep]])
    return {
        "rows": int(keep.sum()),
        "auc_residual_cosine_alone": round(auc(m["rcos"][keep], y), 4),
        "auc_logit_cos": round(cross_fitted_auc(base, y), 4),
        "auc_logit_cos_residual": round(cross_fitted_auc(more, y), 4),
    }


def head_report(m: dict[str, np.ndarray]) -> dict[str, Any]:
    """Whether the pair head adds to the verifier logit and the pair cosine (same rows and
    folds as :func:`residual_report`)."""
    keep = ~m["flagged"]
    y = m["y"][keep]
    base = np.column_stack([m["forward"][keep], m["cos"][keep]])
    return {
        "rows": int(keep.sum()),
        "auc_cos_alone": round(auc(m["cos"][keep], y), 4),
        "auc_head_alone": round(auc(m["head"][keep], y), 4),
        "auc_logit_cos": round(cross_fitted_auc(base, y), 4),
        "auc_logit_cos_head": round(
            cross_fitted_auc(np.column_stack([base, m["head"][keep]]), y), 4
        ),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", type=Path, default=ARTIFACTS / "verifier-int8.onnx")
    ap.add_argument("--rows", type=int, default=3000, help="seeded sample of each larger set")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--report", type=Path, help="write the figures here (JSON)")
    ap.add_argument(
        "--head",
        action="store_true",
        help=f"also fit and measure the pair head (needs the embed step's vectors of {TRAIN.name})",
    )
    args = ap.parse_args(argv)
    head = fit_head() if args.head else None
    v = Verifier.load(args.model, args.model.parent / "tokenizer.json", threads=args.threads)
    embedder = load_embedder(CACHE / "embedder")
    report: dict[str, Any] = {"model": str(args.model)}
    for name, path in SETS.items():
        rows = read_json_rows(path)
        if len(rows) > args.rows:
            pick = np.random.default_rng(0).choice(len(rows), args.rows, replace=False)
            rows = [rows[i] for i in sorted(pick)]
        m = measure(rows, name, v, embedder, head)
        report[name] = summary(m)
        if name == "val":
            report["residual_on_val"] = residual_report(m)
            if head is not None:
                report["head_on_val"] = head_report(m)
        print(json.dumps({name: report[name]}), flush=True)
    for key in ("residual_on_val", "head_on_val"):
        if key in report:
            print(json.dumps({key: report[key]}), flush=True)
    if args.report:
        args.report.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
