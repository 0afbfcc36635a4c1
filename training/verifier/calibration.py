"""The training pipeline's view of calibration. The computation itself (cache-mode runs,
decision scores, curves, the precision-target → τ table) lives in the gateway's domain package,
:mod:`deja.semantic.calibration` and :mod:`deja.semantic.curves`, and is shared with ``deja
calibrate``; this module adds what only training needs: a :class:`Verifier` over any ONNX file
(fp32 or int8 variants, padded batches for the export report) and readers of a written table.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from deja.semantic import calibration as _shared
from deja.semantic.auc import auc
from deja.semantic.calibration import (
    IDENTICAL,
    OWN,
    UNJUDGED,
    CacheRun,
    Decision,
    Served,
    at_duplicate_share,
    fit_combined,
    fit_logistic,
    metrics_at,
    serve,
    serve_cosine,
    sigmoid,
)
from deja.semantic.crossencoder import verifier_text
from deja.semantic.curves import (
    TARGETS,
    Curve,
    build_table,
    conservative_precision,
    curve,
    curve_area,
    pav,
    skip_candidates,
    tau_for,
    write_calibration,
)
from deja.semantic.pairs import PairRow

MAX_TOKENS = 64
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=np.float64), 1e-12, 1 - 1e-12)
    return np.asarray(np.log(p / (1 - p)), dtype=np.float64)


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
        """``tokenizer.encode(a, b)`` per pair -> [CLS] a [SEP] b [SEP], right-padded with 0, each
        text as the gateway feeds it (:func:`~deja.semantic.crossencoder.verifier_text`)."""
        encs = self.tokenizer.encode_batch([(verifier_text(a), verifier_text(b)) for a, b in pairs])
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


def cache_run(
    rows: Sequence[PairRow],
    embed: Callable[[list[str]], np.ndarray],
    verifier: Verifier | None,
    k: int = 4,
    floor: float = 0.6,
    progress: Callable[[int, int], None] | None = None,
    batch: int = 1,
) -> CacheRun:
    """:func:`deja.semantic.calibration.cache_run` with a :class:`Verifier`, ``batch`` pairs per
    run (1 by default, as the gateway scores them: dynamic int8 quantisation makes a padded
    pair's score depend on its batch-mates)."""

    def scorer(query: str, cached: list[str]) -> np.ndarray:
        assert verifier is not None
        return verifier.logits([(query, c) for c in cached], batch=batch)

    return _shared.cache_run(
        rows, embed, scorer if verifier is not None else None, k=k, floor=floor, progress=progress
    )


def load_calibration(path: Path) -> tuple[Decision, dict[str, Any]]:
    doc: dict[str, Any] = json.loads(path.read_text())
    c: dict[str, Any] = doc.get("combined") or {}
    vetoes = tuple(doc.get("vetoes") or ())
    if doc["decision"] == "combined":
        dec = Decision(
            "combined",
            float(c["w_logit"]),
            float(c["w_cosine"]),
            float(c["bias"]),
            float(c.get("w_negation", 0.0)),
            float(c.get("w_extra_entity", 0.0)),
            vetoes,
        )
    else:
        dec = Decision("verifier", vetoes=vetoes)
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
    "at_duplicate_share",
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
    "sigmoid",
    "skip_candidates",
    "tau_for",
    "tau_for_target",
    "write_calibration",
]
