"""Hybrid search on the vector layer: a dense ranking and a sparse (BM25) ranking of the same
filtered points, fused by reciprocal rank fusion, the same way on both backends.

Both backends could fuse inside the engine (``Prefetch`` + ``Fusion.Rrf``: Qdrant Edge 0.9 and
qdrant-client local mode both have it), but they break score ties differently and Edge counts
ranks from 0 where local mode counts from 1, so the same corpus would rank differently on the
two. Fusing here, on the two rankings the backends return (ties broken by point id), gives one
result everywhere, checked by the contract suite on both backends.

Every result also carries its dense cosine to the question, whatever found it (a point that only
the sparse search found is scored from its returned vector): the relevance floor
(``deja.corpus.relevance``) is a cosine, because an RRF score says how a point ranked, not
whether it is relevant.

``SparseEncoder`` makes the sparse vectors: BM25 term weights from the ``Bm25`` model that ships
in ``qdrant-edge-py`` (Qdrant's own tokenizer, English stop words and Snowball stemmer, terms
hashed to ids; ~0.2 ms per chunk), so no second library and no download; the backend multiplies
by the IDF over the collection (the ``idf`` modifier).
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any, Literal

import qdrant_edge as qe

from deja.vectors.collection import Collection, Hit, Sparse
from deja.vectors.filters import Filter

#: ``hybrid``: dense + sparse fused by RRF; ``dense``: cosine only; ``sparse``: BM25 only.
SearchMode = Literal["hybrid", "dense", "sparse"]
#: The RRF constant: a point's fused score is the sum over rankings of 1 / (RRF_K + rank), rank
#: from 1. 60 is the value of Cormack et al. (2009) and Qdrant's default.
RRF_K = 60


@dataclass(frozen=True, slots=True)
class Ranked:
    """One result of a ranked search: its payload, the score it was ranked by (RRF in hybrid
    mode, cosine in dense mode, BM25 in sparse mode) and its dense cosine to the question."""

    id: str
    payload: dict[str, Any]
    score: float
    cosine: float


class SparseEncoder:
    """BM25 term weights for chunks (``document``) and questions (``query``).

    Args:
        avg_len: the expected chunk length in tokens (BM25's length normalisation); a chunk
            holds at most ``corpus_chunk_tokens`` WordPiece tokens, about 0.75 of that in words.
    """

    def __init__(self, avg_len: float = 128.0) -> None:
        self._bm25 = qe.Bm25(qe.Bm25Config(language="english", avg_len=avg_len))

    def document(self, text: str) -> Sparse:
        vector = self._bm25.embed_document(text)
        return Sparse(list(vector.indices), list(vector.values))

    def query(self, text: str) -> Sparse:
        vector = self._bm25.embed_query(text)
        return Sparse(list(vector.indices), list(vector.values))


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def _by_score(hits: list[Hit]) -> list[Hit]:
    """Best first, ties by id: the same order on both backends."""
    return sorted(hits, key=lambda h: (-h.score, h.id))


def rrf(rankings: list[list[Hit]], *, k: int = RRF_K) -> list[tuple[Hit, float]]:
    """Reciprocal rank fusion of rankings (each best first): every point once, with the sum
    of 1 / (k + rank) over the rankings it is in, best first, ties by id."""
    fused: dict[str, float] = {}
    first: dict[str, Hit] = {}
    for ranking in rankings:
        for rank, hit in enumerate(ranking, start=1):
            fused[hit.id] = fused.get(hit.id, 0.0) + 1.0 / (k + rank)
            first.setdefault(hit.id, hit)
    order = sorted(fused, key=lambda pid: (-fused[pid], pid))
    return [(first[pid], fused[pid]) for pid in order]


async def ranked_search(
    collection: Collection,
    vector: list[float],
    sparse: Sparse | None,
    where: Filter | None,
    *,
    limit: int,
    mode: SearchMode = "hybrid",
) -> list[Ranked]:
    """The ``limit`` best points matching ``where`` by ``mode``, best first. A collection
    without the sparse vector, or a question with no lexical term (all stop words), is searched
    dense-only whatever ``mode`` says."""
    if mode == "dense" or sparse is None or not sparse.indices or not collection.sparse:
        hits = _by_score(await collection.search(vector, where, limit=limit))
        return [Ranked(h.id, h.payload, h.score, h.score) for h in hits]
    if mode == "sparse":
        lexical = await collection.search_sparse(sparse, where, limit=limit, with_vector=True)
        return [
            Ranked(h.id, h.payload, h.score, cosine(vector, h.vector) if h.vector else 0.0)
            for h in _by_score(lexical)
        ]
    dense, lexical = await asyncio.gather(
        collection.search(vector, where, limit=limit),
        collection.search_sparse(sparse, where, limit=limit, with_vector=True),
    )
    cosines = {h.id: h.score for h in dense}
    found: list[Ranked] = []
    for hit, score in rrf([_by_score(dense), _by_score(lexical)])[:limit]:
        near = cosines.get(hit.id)
        if near is None:
            near = cosine(vector, hit.vector) if hit.vector else 0.0
        found.append(Ranked(hit.id, hit.payload, score, near))
    return found
