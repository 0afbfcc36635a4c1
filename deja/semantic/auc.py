"""ROC AUC of scores against binary labels: numpy only, so that the training tools can use it on
a machine that has no gateway dependencies (the GPU machine of ``training.verifier.sweep``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt


def auc(scores: npt.NDArray[Any], labels: npt.NDArray[Any]) -> float:
    """ROC AUC (the Mann-Whitney rank statistic, ties averaged); NaN without both labels."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    npos, nneg = int(y.sum()), int((~y).sum())
    if npos == 0 or nneg == 0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    sorted_s = s[order]
    # average rank (1-based) of each run of equal scores
    starts = np.flatnonzero(np.r_[True, sorted_s[1:] != sorted_s[:-1]])
    ends = np.r_[starts[1:], len(s)]
    run_rank = (starts + ends + 1) / 2.0
    ranks = np.empty(len(s), dtype=np.float64)
    ranks[order] = np.repeat(run_rank, ends - starts)
    return float((ranks[y].sum() - npos * (npos + 1) / 2) / (npos * nneg))
