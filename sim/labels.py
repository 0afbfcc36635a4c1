"""A labelled judge, for benchmarks that replay labelled questions (``--judge-labels``).

The simulator's own judge answers by word overlap (:mod:`sim.judge`), which cannot tell whether
a cache that learns from verdicts gets better. With a labels file, the simulator knows which
questions ask the same thing, as a replay benchmark built from duplicate clusters does, and it
plays a judge of a chosen accuracy. **This simulates a judge; it is not a model, and no figure
obtained with it says anything about a real model's verdicts.**

The file is JSON Lines, one ``{"question": str, "cluster": str | int}`` per line (questions of
one cluster ask the same thing). With it loaded:

* **A judge request** about two labelled questions is answered ``"yes"`` when their clusters are
  equal and ``"no"`` otherwise, and that verdict is flipped for a share ``1 - accuracy`` of the
  pairs. Which pairs are flipped is fixed by the pair and ``seed`` (the same pair always gets
  the same verdict, in either order), so a repeated question meets the same judge. A pair with
  an unlabelled question falls back to the word-overlap rule.
* **A chat request** whose last message is a labelled user question is answered with its
  cluster's answer: every question of one cluster gets the same text (what a shadow re-ask
  compares), and questions of different clusters different ones.

Questions are matched after stripping surrounding whitespace, exactly otherwise.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["Labels", "LabelsError"]


class LabelsError(ValueError):
    """The labels file cannot be used (its path and line say why)."""


class Labels:
    """Question → cluster, and a judge of ``accuracy`` over them."""

    def __init__(self, clusters: Mapping[str, str], *, accuracy: float = 1.0, seed: int = 0):
        if not 0.5 <= accuracy <= 1.0:
            raise ValueError(f"judge accuracy must be in [0.5, 1], got {accuracy}")
        self.clusters = {q.strip(): str(c) for q, c in clusters.items()}
        self.accuracy = accuracy
        self.seed = seed

    @classmethod
    def load(cls, path: str | Path, *, accuracy: float = 1.0, seed: int = 0) -> Labels:
        clusters: dict[str, str] = {}
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise LabelsError(f"judge_labels {path}: {exc.strerror or exc}") from exc
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            row = _row(line, path, number)
            clusters[str(row["question"]).strip()] = str(row["cluster"])
        if not clusters:
            raise LabelsError(f"judge_labels {path}: no labelled question")
        return cls(clusters, accuracy=accuracy, seed=seed)

    def cluster(self, question: str) -> str | None:
        return self.clusters.get(question.strip())

    def verdict(self, a: str, b: str) -> str | None:
        """``"yes"`` or ``"no"`` for two labelled questions (flipped for ``1 - accuracy`` of
        the pairs); None when either is unlabelled."""
        first, second = self.cluster(a), self.cluster(b)
        if first is None or second is None:
            return None
        same = first == second
        if self.coin(a, b) >= self.accuracy:
            same = not same
        return "yes" if same else "no"

    def coin(self, a: str, b: str) -> float:
        """A number in [0, 1) fixed by the unordered pair and the seed."""
        low, high = sorted((a.strip(), b.strip()))
        digest = hashlib.blake2b(f"{self.seed}\x00{low}\x00{high}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2**64

    def answer_seed(self, question: str) -> str | None:
        """The text a labelled question's answer is generated from (its cluster's), or None."""
        found = self.cluster(question)
        return None if found is None else f"the answer of question cluster {found}"


def _row(line: str, path: str | Path, number: int) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise LabelsError(f"judge_labels {path}:{number}: not JSON ({exc.msg})") from exc
    if not isinstance(row, dict) or not isinstance(row.get("question"), str):
        raise LabelsError(f'judge_labels {path}:{number}: expected {{"question": str, "cluster"}}')
    if not isinstance(row.get("cluster"), str | int) or isinstance(row.get("cluster"), bool):
        raise LabelsError(f"judge_labels {path}:{number}: 'cluster' must be a string or integer")
    return row
