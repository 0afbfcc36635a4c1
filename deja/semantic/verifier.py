"""The decision between "similar cached questions were found" and "an answer is served".

The vector search proposes up to ``k`` cached questions above a low cosine floor; the verifier
scores all of them in one batched call; the best decision score at or above τ (the cut-off for
the request's precision target) is served. Retrieval is rarely the limit (on Quora pairs the
row's own question is in the top 5 for 99% of true duplicates); the accept/reject decision is.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from deja.semantic.cutoffs import CalibrationTable
from deja.semantic.index import ScoredPoint


class Verifier(Protocol):
    """Scores (query, cached question) pairs: one logit each, probability = sigmoid."""

    model_id: str

    async def logits(self, query: str, cached: Sequence[str]) -> list[float]: ...

    async def close(self) -> None: ...


_NON_WORD = re.compile(r"[^\w]+")


def same_words(a: str, b: str) -> bool:
    """The same question up to case, accents of the Unicode form, punctuation and spacing
    ("how do i reset my password" / "How do I reset my password?"). Served without asking the
    model: the verifier, trained on Quora pairs that rarely differ only so, scores such pairs
    poorly (an identical question scored 0.55), and they are right by construction."""
    return _normal(a) == _normal(b)


def _normal(text: str) -> str:
    return _NON_WORD.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


@dataclass(frozen=True, slots=True)
class Scored:
    """One candidate with its cosine similarity and decision score (None: not verified)."""

    point: ScoredPoint
    score: float | None

    @property
    def question(self) -> str:
        return str(self.point.payload.get("question") or "")


def rank(
    table: CalibrationTable, candidates: Sequence[ScoredPoint], logits: Sequence[float]
) -> list[Scored]:
    """Candidates by decision score, best first."""
    scored = [
        Scored(point, table.score(logit, point.score))
        for point, logit in zip(candidates, logits, strict=True)
    ]
    return sorted(scored, key=lambda s: -(s.score or 0.0))
