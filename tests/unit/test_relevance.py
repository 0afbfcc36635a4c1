"""The relevance floor (issue 21); the stream's sources are in test_sse.py."""

from __future__ import annotations

from deja.corpus.base import Chunk, RetrievedChunk
from deja.corpus.relevance import Floor


def ranked(*scores: float) -> list[RetrievedChunk]:
    return [RetrievedChunk(Chunk("t", "c", f"d{i}", 1, 0, "x"), s) for i, s in enumerate(scores)]


def docs(chunks: list[RetrievedChunk]) -> list[str]:
    return [c.chunk.document for c in chunks]


def test_the_floor_keeps_chunks_near_enough_to_the_best_in_ranked_order() -> None:
    chunks = ranked(0.55, 0.62, 0.50, 0.20)  # hybrid order need not be cosine order
    assert docs(Floor(0.3, 0.1).keep(chunks, 4)) == ["d0", "d1"]  # 0.50 < 0.62 - 0.1
    assert docs(Floor(0.3, None).keep(chunks, 4)) == ["d0", "d1", "d2"]
    assert docs(Floor(0.3, None).keep(chunks, 2)) == ["d0", "d1"]  # top-k is the most
    assert Floor(0.7, None).keep(chunks, 4) == []  # nothing relevant: possibly none
    assert Floor(0.3, 0.1).keep([], 4) == []
