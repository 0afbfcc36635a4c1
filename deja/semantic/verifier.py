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
from deja.semantic.mismatch import Signals, compare, tokens


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


def mismatches(query: str, candidates: Sequence[ScoredPoint]) -> list[Signals]:
    """The mismatch signals between ``query`` and each cached question
    (:func:`deja.semantic.mismatch.compare`), in order."""
    return [compare(query, str(p.payload.get("question") or "")) for p in candidates]


async def verify(
    verifier: Verifier,
    table: CalibrationTable,
    query: str,
    candidates: Sequence[ScoredPoint],
    signals: Sequence[Signals],
) -> list[float] | None:
    """One logit per candidate, asking the model only about those the table does not veto
    (a vetoed one scores 0 whatever its logit, so it gets 0.0 here and the same score as if
    it had been asked: on the bench's "configure the proxy number 12" / "… number 13" the
    verifier's 22 ms are saved). None: every candidate was vetoed, the model was not run."""
    asked = [i for i, s in enumerate(signals) if not table.vetoed(s)]
    if not asked:
        return None
    logits = [0.0] * len(candidates)
    questions = [str(candidates[i].payload.get("question") or "") for i in asked]
    for i, logit in zip(asked, await verifier.logits(query, questions), strict=True):
        logits[i] = logit
    return logits


def rank(
    table: CalibrationTable,
    query: str,
    candidates: Sequence[ScoredPoint],
    logits: Sequence[float],
    signals: Sequence[Signals] | None = None,
) -> list[Scored]:
    """Candidates by decision score, best first; the score weighs the mismatch signals
    between ``query`` and each cached question (:func:`mismatches`, computed here unless
    given)."""
    signals = mismatches(query, candidates) if signals is None else signals
    scored = [
        Scored(point, table.score(logit, point.score, mismatch))
        for point, logit, mismatch in zip(candidates, logits, signals, strict=True)
    ]
    return sorted(scored, key=lambda s: -(s.score or 0.0))
