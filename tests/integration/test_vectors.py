"""The one contract suite of the vector layer (``deja.vectors.collection.Collection``), run on
both backends: Qdrant Edge in a temporary folder, and the Qdrant server backend on
qdrant-client's local mode (same client API as a real server; no server binary can be
installed here). The two schemas on top of it have their own suites
(``test_question_index.py``, ``test_chunk_index.py``), run on both backends the same way."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from deja.errors import VectorStoreError
from deja.vectors.collection import Collection, Indexes, Point
from deja.vectors.filters import Filter, Match, MatchAny, Range, all_of
from tests.support import BACKENDS, CollectionFactory, collection_factory

pytestmark = pytest.mark.integration

DIM = 4
INDEXES: Indexes = {"tenant": "tenant", "tag": "keyword", "n": "integer", "at": "float"}


@pytest.fixture(params=BACKENDS)
async def make(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[CollectionFactory]:
    async with collection_factory(request.param, tmp_path) as factory:
        yield factory


@pytest.fixture
async def coll(make: CollectionFactory) -> Collection:
    opened = make("contract", DIM, INDEXES)
    await opened.open()
    return opened


def pid(n: int) -> str:
    return str(uuid.UUID(int=n + 1))


def point(n: int, vector: list[float], tenant: str = "t1", tag: str = "a") -> Point:
    return Point(pid(n), vector, {"tenant": tenant, "tag": tag, "n": n, "at": float(n)})


AXES = [[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]]
NEAR_X = [0.9, 0.1, 0.0, 0.0]


async def fill(coll: Collection) -> None:
    await coll.upsert(
        [
            point(0, AXES[0], tag="a"),
            point(1, NEAR_X, tag="b"),
            point(2, AXES[1], tag="b"),
            point(3, AXES[2], tenant="t2", tag="a"),
        ]
    )


async def test_open_is_idempotent_and_keeps_points(
    coll: Collection, make: CollectionFactory
) -> None:
    await fill(coll)
    await coll.open()
    assert await coll.count() == 4
    if coll.name == "qdrant":  # a second handle on the same server collection sees the points
        other = make("contract", DIM, INDEXES)
        await other.open()
        assert await other.count() == 4


async def test_search_is_cosine_best_first_with_the_filter_inside(coll: Collection) -> None:
    await fill(coll)
    hits = await coll.search(AXES[0], None, limit=2)
    assert [h.payload["n"] for h in hits] == [0, 1]
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert hits[1].score == pytest.approx(0.9 / (0.81 + 0.01) ** 0.5, abs=1e-4)
    only_b = await coll.search(AXES[0], Filter((Match("tag", "b"),)), limit=5)
    assert [h.payload["n"] for h in only_b] == [1, 2]


async def test_every_condition_kind_filters(coll: Collection) -> None:
    await fill(coll)

    async def found(where: Filter | None) -> set[int]:
        return {int(h.payload["n"]) for h in await coll.search(AXES[0], where, limit=10)}

    assert await found(all_of(Match("tenant", "t1"), Match("n", 2))) == {2}
    assert await found(Filter((MatchAny("tag", ("b", "zzz")),))) == {1, 2}
    assert await found(Filter((Range("at", gt=0.0, lte=2.0),))) == {1, 2}
    assert await found(Filter((Range("at", gte=3.0),))) == {3}
    assert await found(Filter((Range("n", lt=1),))) == {0}
    assert await found(all_of(None)) == {0, 1, 2, 3}
    assert await coll.count(Filter((Match("tenant", "t2"),))) == 1


async def test_upsert_replaces_by_id(coll: Collection) -> None:
    await coll.upsert([point(0, AXES[0], tag="a")])
    await coll.upsert([point(0, AXES[1], tag="z")])
    assert await coll.count() == 1
    hits = await coll.search(AXES[1], None, limit=1)
    assert hits[0].payload["tag"] == "z"
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)


async def test_deletes(coll: Collection) -> None:
    await fill(coll)
    await coll.delete_ids([pid(0), pid(99)])  # a missing id is ignored
    assert await coll.count() == 3
    assert await coll.delete(Filter((Match("tag", "b"),))) == 2
    assert await coll.delete(Filter((Match("tag", "b"),))) == 0
    assert await coll.count() == 1
    await fill(coll)
    taken = await coll.take(Filter((Match("tenant", "t1"),)), "n")
    assert sorted(taken) == ["0", "1", "2"]
    assert await coll.count() == 1


async def test_scroll_leaves_fields_out_and_facet_counts(coll: Collection) -> None:
    await fill(coll)
    payloads = await coll.scroll(Filter((Match("tenant", "t1"),)), leave_out=("at",))
    assert sorted(p["n"] for p in payloads) == [0, 1, 2]
    assert all("at" not in p and "tag" in p for p in payloads)
    assert len(await coll.scroll(None)) == 4
    assert await coll.facet("tag", limit=10) == {"a": 2, "b": 2}
    await coll.delete(Filter((Match("tag", "a"),)))
    assert await coll.facet("tag", limit=10) == {"b": 2}  # a value with no points left is gone


async def test_failures_are_vector_store_errors(coll: Collection, make: CollectionFactory) -> None:
    with pytest.raises(VectorStoreError):  # wrong dimension
        await coll.upsert([Point(pid(0), [1.0, 0.0], {})])
    with pytest.raises(VectorStoreError):
        await make("never-opened", DIM, INDEXES).count()
    await coll.close()
    await coll.close()  # idempotent
    with pytest.raises(VectorStoreError):
        await coll.search(AXES[0], None, limit=1)
    with pytest.raises(VectorStoreError):
        await coll.upsert([point(0, AXES[0])])


async def test_another_dimension_is_refused(make: CollectionFactory) -> None:
    first = make("dims", DIM, INDEXES)
    await first.open()
    await first.close()
    with pytest.raises(VectorStoreError):
        await make("dims", DIM * 2, INDEXES).open()
