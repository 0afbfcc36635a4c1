"""The relevance floor: which retrieved chunks are relevant enough to go into a prompt.

A corpus search always returns its ``limit`` best chunks, however unrelated they are; put in a
prompt they cost prefill and tie the answer to documents it does not depend on (its sources). A
chunk is kept when its cosine to the question is at least ``floor`` and within ``margin`` of
the best chunk's (the best one first: a question whose best chunk is near only the floor keeps
one or two chunks, one with a clear best keeps what is about as close). The cosine, not the
fused rank score, because an RRF score says how a chunk ranked, not whether it is relevant.

The defaults come from ``bench/retrieval.py`` on the tuning half of WikiQA (the figures are in
``docs/architecture.md``, retrieval section).
"""

from __future__ import annotations

from dataclasses import dataclass

from deja.corpus.base import RetrievedChunk


@dataclass(frozen=True, slots=True)
class Floor:
    """``floor``: the least cosine a chunk needs; ``margin``: how far below the best chunk's
    cosine a chunk may be (None: no relative cut)."""

    floor: float = 0.0
    margin: float | None = None

    def keep(self, chunks: list[RetrievedChunk], limit: int) -> list[RetrievedChunk]:
        """The first ``limit`` of ``chunks`` (best first) that pass, order kept."""
        if not chunks:
            return []
        least = self.floor
        if self.margin is not None:
            least = max(least, max(c.score for c in chunks) - self.margin)
        return [c for c in chunks if c.score >= least][:limit]
