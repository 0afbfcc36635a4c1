"""Recent semantic lookups, in memory, for the console: where the scores fall, which misses
came close, and what another θ or precision target would have served.

Two bounded rings fed by the semantic step (``middleware/semantic.py``) once per lookup that
searched: ``samples`` holds the best candidate's scores and its pair of questions (cut to
``TEXT_LIMIT``: the query's text and the cached question are the strings the lookup already
held, so a sample keeps them alive rather than copying them; ≤ 4 MB for 4,096 samples of long
questions), which lists the recent served pairs and what a θ preview would start or stop
serving; ``near`` holds misses whose best score fell less than ``margin`` under its cut-off,
with both questions, so ops can judge whether θ is too strict. A record costs one
``deque.append``; the rings are per process and start empty (they describe recent traffic, not
history).

Both rings keep question texts (cut to ``TEXT_LIMIT`` characters): the admin API shows
cached questions already; nothing here leaves the process except through ``/admin``.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

#: How many recent lookups the histograms and the θ preview look at.
SAMPLE_SIZE = 4096
#: How many recent near misses are kept.
NEAR_MISS_SIZE = 256
#: A miss is "near" when its score is within this much under the cut-off.
NEAR_MISS_MARGIN = 0.10
#: Question texts are cut to this many characters in the near-miss ring.
TEXT_LIMIT = 500
#: Histogram bins over [0, 1].
BINS = 40

Cut = Literal["theta", "tau"]


@dataclass(frozen=True, slots=True)
class Candidate:
    """The best candidate of one lookup, as the semantic step saw it."""

    question: str
    cached_question: str
    entry_id: str
    similarity: float
    score: float | None

    def cut(self) -> Candidate:
        """This candidate with its texts cut to ``TEXT_LIMIT`` (itself when they fit)."""
        if len(self.question) <= TEXT_LIMIT and len(self.cached_question) <= TEXT_LIMIT:
            return self
        return dataclasses.replace(
            self,
            question=self.question[:TEXT_LIMIT],
            cached_question=self.cached_question[:TEXT_LIMIT],
        )


@dataclass(frozen=True, slots=True)
class LookupSample:
    """One semantic lookup that searched: its best candidate's scores and what happened.

    ``similarity`` is None when the scope held no candidate at all; ``score`` (the verifier's
    decision score) is None when the best candidate was not verified (below θ, or no verifier).
    ``tenant_theta`` is the tenant's own θ from the keys file, kept so a preview resolves θ the
    way the request did. ``candidate`` is the best candidate with both questions (None: no
    candidate, or a caller that kept no texts).
    """

    at: float
    tenant: str
    model: str
    tenant_theta: float | None
    similarity: float | None
    score: float | None
    served: bool
    candidate: Candidate | None = None

    def pair_json(self) -> dict[str, Any]:
        """The asked and the cached question with their scores (the sample has a candidate)."""
        c = self.candidate
        assert c is not None
        return {
            "at": self.at,
            "tenant": self.tenant,
            "model": self.model,
            "question": c.question,
            "cached_question": c.cached_question,
            "entry_id": c.entry_id,
            "similarity": round(c.similarity, 4),
            "score": None if c.score is None else round(c.score, 4),
        }


@dataclass(frozen=True, slots=True)
class NearMiss:
    """A miss whose best candidate fell just under the cut-off (``cut``: θ on the cosine, or
    τ, the verifier cut-off, on the decision score)."""

    at: float
    tenant: str
    model: str
    question: str
    cached_question: str
    entry_id: str
    similarity: float
    score: float | None
    cut: Cut
    cutoff: float

    @property
    def gap(self) -> float:
        """How far under the cut-off the deciding score fell (≥ 0)."""
        value = self.score if self.cut == "tau" and self.score is not None else self.similarity
        return max(0.0, self.cutoff - value)

    def as_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "tenant": self.tenant,
            "model": self.model,
            "question": self.question,
            "cached_question": self.cached_question,
            "entry_id": self.entry_id,
            "similarity": round(self.similarity, 4),
            "score": None if self.score is None else round(self.score, 4),
            "cut": self.cut,
            "cutoff": round(self.cutoff, 4),
            "gap": round(self.gap, 4),
        }


class RecentLookups:
    """The two rings; ``record`` is the only call on the request path."""

    def __init__(
        self,
        size: int = SAMPLE_SIZE,
        near_size: int = NEAR_MISS_SIZE,
        margin: float = NEAR_MISS_MARGIN,
    ) -> None:
        self.samples: deque[LookupSample] = deque(maxlen=size)
        self.near: deque[NearMiss] = deque(maxlen=near_size)
        self.margin = margin

    def record(
        self,
        sample: LookupSample,
        best: Candidate | None = None,
        cut: Cut = "theta",
        cutoff: float = 0.0,
    ) -> None:
        """One lookup; ``best`` and the cut-off it was judged against make a near miss when
        it was not served and fell less than ``margin`` short. The sample keeps ``best`` (or
        its own candidate), texts cut."""
        if best is None:
            best = sample.candidate
        if best is not None:
            best = best.cut()
            if sample.candidate is not best:
                sample = dataclasses.replace(sample, candidate=best)
        self.samples.append(sample)
        if sample.served or best is None:
            return
        value = best.score if cut == "tau" else best.similarity
        if value is None or not cutoff - self.margin <= value < cutoff:
            return
        self.near.append(
            NearMiss(
                at=sample.at,
                tenant=sample.tenant,
                model=sample.model,
                question=best.question,
                cached_question=best.cached_question,
                entry_id=best.entry_id,
                similarity=best.similarity,
                score=best.score,
                cut=cut,
                cutoff=cutoff,
            )
        )

    def recent(self, tenant: str | None = None, model: str | None = None) -> Iterator[LookupSample]:
        """The kept samples, oldest first, optionally of one tenant and/or model."""
        for s in list(self.samples):
            if (tenant is None or s.tenant == tenant) and (model is None or s.model == model):
                yield s

    def near_misses(
        self, *, limit: int = 50, margin: float | None = None, tenant: str | None = None
    ) -> list[NearMiss]:
        """Newest first; ``margin`` narrows the window under the cut-off."""
        out = []
        for miss in reversed(list(self.near)):
            if tenant is not None and miss.tenant != tenant:
                continue
            if margin is not None and miss.gap > margin:
                continue
            out.append(miss)
            if len(out) >= limit:
                break
        return out

    def served(self, *, limit: int = 50, tenant: str | None = None) -> list[LookupSample]:
        """The recent semantic hits with their pair of questions, newest first."""
        out = []
        for s in reversed(list(self.samples)):
            if s.served and s.candidate is not None and (tenant is None or s.tenant == tenant):
                out.append(s)
                if len(out) >= limit:
                    break
        return out

    def histograms(self, tenant: str | None = None) -> dict[str, Any]:
        """Counts of the best cosine and the best decision score in ``BINS`` bins over [0, 1],
        split into served and not served."""
        samples = list(self.recent(tenant))
        return {
            "lookups": len(samples),
            "no_candidate": sum(1 for s in samples if s.similarity is None),
            "similarity": _histogram((s.similarity, s.served) for s in samples),
            "score": _histogram((s.score, s.served) for s in samples),
        }


def _histogram(values: Iterator[tuple[float | None, bool]]) -> list[dict[str, float]]:
    served = [0] * BINS
    missed = [0] * BINS
    for value, hit in values:
        if value is None:
            continue
        i = min(BINS - 1, max(0, int(value * BINS)))
        if hit:
            served[i] += 1
        else:
            missed[i] += 1
    return [
        {"lo": i / BINS, "hi": (i + 1) / BINS, "served": served[i], "missed": missed[i]}
        for i in range(BINS)
    ]
