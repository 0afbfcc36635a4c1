"""Hybrid search on the vector layer (``deja.vectors.hybrid``), the same contract on both
backends: Qdrant Edge, and the Qdrant server backend on qdrant-client's local mode (no server
binary can be installed here). The same points and questions must rank the same on both:
the fusion runs in the vector layer, over the two rankings each backend returns."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from deja.errors import VectorStoreError
from deja.vectors.collection import Collection, Hit, Indexes, Point, Sparse
from deja.vectors.filters import Filter, Match
from deja.vectors.hybrid import SparseEncoder, ranked_search, rrf
from tests.support import BACKENDS, CollectionFactory, collection_factory

pytestmark = pytest.mark.integration

DIM = 4
INDEXES: Indexes = {"tenant": "tenant"}
T1 = Filter((Match("tenant", "t1"),))
QUESTION = [1.0, 0.0, 0.0, 0.0]
TERM = Sparse([7], [1.0])


@pytest.fixture(params=BACKENDS)
async def make(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[CollectionFactory]:
    async with collection_factory(request.param, tmp_path) as factory:
        yield factory


def pid(n: int) -> str:
    return str(uuid.UUID(int=n + 1))


#: Dense ranking of QUESTION among t1: p0 (1.0), p1 (0.99), p2 (0.5), p3 (0.0); sparse ranking
#: of TERM: p3, then p2 (half its weight). RRF (k 60): p3 1/64+1/61 > p2 1/63+1/62 > p0 > p1.
POINTS = [
    Point(pid(0), [1.0, 0.0, 0.0, 0.0], {"tenant": "t1", "n": 0}, Sparse([9], [1.0])),
    Point(pid(1), [0.9, 0.1, 0.0, 0.0], {"tenant": "t1", "n": 1}, None),
    Point(pid(2), [0.5, 0.5, 0.5, 0.5], {"tenant": "t1", "n": 2}, Sparse([7], [0.5])),
    Point(pid(3), [0.0, 1.0, 0.0, 0.0], {"tenant": "t1", "n": 3}, Sparse([7], [1.0])),
    Point(pid(4), [1.0, 0.0, 0.0, 0.0], {"tenant": "t2", "n": 4}, Sparse([7], [3.0])),
]


async def filled(make: CollectionFactory, name: str = "hybrid") -> Collection:
    coll = make(name, DIM, INDEXES, sparse=True)
    await coll.open()
    assert coll.sparse
    await coll.upsert(POINTS)
    return coll


async def test_hybrid_fuses_dense_and_sparse_rankings_the_same_on_both(
    make: CollectionFactory,
) -> None:
    coll = await filled(make)
    found = await ranked_search(coll, QUESTION, TERM, T1, limit=4, mode="hybrid")
    assert [r.payload["n"] for r in found] == [3, 2, 0, 1]
    assert found[0].score == pytest.approx(1 / 64 + 1 / 61)
    # every result carries its cosine, also one only the sparse search would have found
    assert [round(r.cosine, 3) for r in found] == [0.0, 0.5, 1.0, 0.994]


async def test_sparse_and_dense_modes_rank_by_one_signal(make: CollectionFactory) -> None:
    coll = await filled(make)
    sparse = await ranked_search(coll, QUESTION, TERM, T1, limit=4, mode="sparse")
    assert [r.payload["n"] for r in sparse] == [3, 2]  # the tenant filter holds (p4 is t2)
    assert [round(r.cosine, 3) for r in sparse] == [0.0, 0.5]
    dense = await ranked_search(coll, QUESTION, TERM, T1, limit=2, mode="dense")
    assert [r.payload["n"] for r in dense] == [0, 1]
    assert dense[0].cosine == pytest.approx(1.0)
    # a question with no lexical term (only stop words) is searched dense
    none = await ranked_search(coll, QUESTION, Sparse([], []), T1, limit=2, mode="hybrid")
    assert [r.payload["n"] for r in none] == [0, 1]


async def test_a_collection_made_before_sparse_vectors_falls_back_to_dense(
    make: CollectionFactory, caplog: pytest.LogCaptureFixture
) -> None:
    old = make("legacy", DIM, INDEXES)  # as created by a gateway before hybrid search
    await old.open()
    await old.upsert([Point(p.id, p.vector, p.payload) for p in POINTS])
    await old.close()
    with caplog.at_level(logging.WARNING, logger="deja.vectors"):
        again = make("legacy", DIM, INDEXES, sparse=True)
        await again.open()
    assert not again.sparse
    assert sum("predates sparse vectors" in r.getMessage() for r in caplog.records) == 1
    await again.upsert(POINTS[:1])  # a sparse vector is dropped, the point written
    found = await ranked_search(again, QUESTION, TERM, T1, limit=2, mode="hybrid")
    assert [r.payload["n"] for r in found] == [0, 1]
    with pytest.raises(VectorStoreError):
        await again.search_sparse(TERM, T1, limit=1)


async def test_dense_vectors_of_matching_points(make: CollectionFactory) -> None:
    coll = await filled(make)
    vectors = await coll.vectors(Filter((Match("tenant", "t2"),)))
    assert vectors == [pytest.approx([1.0, 0.0, 0.0, 0.0])]


def test_rrf_breaks_ties_by_id() -> None:
    a, b = Hit(0.9, {}, "b"), Hit(0.8, {}, "a")
    fused = rrf([[a, b], [b, a]])
    assert [h.id for h, _ in fused] == ["a", "b"]  # equal sums: by id


def test_bm25_weights_stem_and_drop_stop_words() -> None:
    encoder = SparseEncoder()
    assert encoder.query("the of and").indices == []
    lighthouse = encoder.query("lighthouses")
    assert lighthouse.indices == encoder.query("lighthouse").indices  # stemmed
    doc = encoder.document("The lighthouse guides ships; the lighthouse keeper lives there.")
    weights = dict(zip(doc.indices, doc.values, strict=True))
    assert weights[lighthouse.indices[0]] > min(weights.values())  # term frequency counts
