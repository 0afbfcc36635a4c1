"""The decision between "similar cached questions were found" and "an answer is served".

The vector search proposes up to ``k`` cached questions above a low cosine floor; the verifier
scores all of them in one batched call; the best decision score at or above τ (the cut-off for
the request's precision target) is served. Retrieval is rarely the limit (on Quora pairs the
row's own question is in the top 5 for 99% of true duplicates); the accept/reject decision is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from deja.semantic.cutoffs import CalibrationTable
from deja.semantic.index import ScoredPoint
from deja.semantic.mismatch import compare, tokens


class Verifier(Protocol):
    """Scores (query, cached question) pairs: one logit each, probability = sigmoid."""

    model_id: str

    async def logits(self, query: str, cached: Sequence[str]) -> list[float]: ...

    async def close(self) -> None: ...


def same_words(a: str, b: str) -> bool:
    """The same question up to case, the Unicode form, sentence punctuation and spacing
    ("how do i reset my password" / "How do I reset my password?"). Served without asking the
    model, since such pairs are right by construction. Symbols, digits and signs are words
    (:func:`deja.semantic.mismatch.tokens`): "mastering C?" and "mastering C++?" are two
    questions, as are "5" / "-5", "15%" / "15" and "v2" / "v3"."""
    return tokens(a) == tokens(b)


@dataclass(frozen=True, slots=True)
class Scored:
    """One candidate with its cosine similarity and decision score (None: not verified)."""

    point: ScoredPoint
    score: float | None

    @property
    def question(self) -> str:
        return str(self.point.payload.get("question") or "")


def rank(
    table: CalibrationTable,
    query: str,
    candidates: Sequence[ScoredPoint],
    logits: Sequence[float],
) -> list[Scored]:
    """Candidates by decision score, best first; the score weighs the mismatch signals
    between ``query`` and each cached question (:func:`deja.semantic.mismatch.compare`)."""
    scored = []
    for point, logit in zip(candidates, logits, strict=True):
        signals = compare(query, str(point.payload.get("question") or ""))
        scored.append(Scored(point, table.score(logit, point.score, signals)))
    return sorted(scored, key=lambda s: -(s.score or 0.0))
