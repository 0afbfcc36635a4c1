"""The semantic cache's schema (``deja.semantic.index.VectorStore``) on both vector backends: the
embedded Qdrant Edge shard (in a temporary directory) and the Qdrant server backend (on
qdrant-client's local mode, which speaks the same client API as a real server). The backends'
own contract is ``test_vectors.py``."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from qdrant_client import AsyncQdrantClient

from deja.errors import VectorStoreError
from deja.semantic.index import (
    QUESTION_INDEXES,
    SCOPE_FIELDS,
    Scope,
    VectorPoint,
    VectorStore,
    question_collection,
)
from deja.vectors.edge import EdgeCollection
from deja.vectors.qdrant import QdrantCollection
from tests.support import BACKENDS, collection_factory

pytestmark = pytest.mark.integration

DIM = 16
COLLECTION = question_collection("test-embedder", DIM)
NOW = 1_000_000.0
SCOPE = Scope(tenant="t1", model="m1", params_hash="p1", context_hash="c1", namespace="ns")

Factory = Callable[[], VectorStore]


@pytest.fixture(params=BACKENDS)
async def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Factory]:
    """Builds stores of the parametrised kind over one backing location; closes them all."""
    async with collection_factory(request.param, tmp_path) as make:
        yield lambda: VectorStore(make(COLLECTION, DIM, QUESTION_INDEXES))


def edge_store(data_dir: Path, dim: int = DIM) -> VectorStore:
    return VectorStore(
        EdgeCollection(data_dir, collection=COLLECTION, dim=dim, indexes=QUESTION_INDEXES)
    )


def server_store(**options: Any) -> VectorStore:
    return VectorStore(
        QdrantCollection(collection=COLLECTION, dim=DIM, indexes=QUESTION_INDEXES, **options)
    )


@pytest.fixture
async def store(make_store: Factory) -> VectorStore:
    opened = make_store()
    await opened.open()
    return opened


def unit(*values: float) -> list[float]:
    """A unit vector of ``DIM`` starting with ``values`` (rest zeros)."""
    vec = np.zeros(DIM)
    vec[: len(values)] = values
    return [float(x) for x in vec / np.linalg.norm(vec)]


def random_unit(rng: np.random.Generator) -> list[float]:
    vec = rng.standard_normal(DIM)
    return [float(x) for x in vec / np.linalg.norm(vec)]


def entry() -> str:
    return uuid.uuid4().hex + uuid.uuid4().hex


def point(
    vector: list[float],
    *,
    scope: Scope = SCOPE,
    entry_id: str | None = None,
    created_at: float = NOW - 10,
    expires_at: float = NOW + 3600,
    question: str = "q",
) -> VectorPoint:
    return VectorPoint(
        entry_id=entry_id or entry(),
        vector=vector,
        scope=scope,
        question=question,
        created_at=created_at,
        expires_at=expires_at,
    )


async def test_open_is_idempotent(store: VectorStore, make_store: Factory) -> None:
    await store.open()
    await store.upsert([point(unit(1))])
    await store.open()
    assert await store.count() == 1
    if isinstance(store.backend, QdrantCollection):  # a second store on an existing collection
        other = make_store()
        await other.open()
        assert await other.count() == 1


async def test_search_returns_nearest_with_cosine_score(store: VectorStore) -> None:
    rng = np.random.default_rng(7)
    points = [point(random_unit(rng), question=f"q{i}") for i in range(20)]
    await store.upsert(points)
    query = random_unit(rng)
    scores = {p.entry_id: float(np.dot(query, p.vector)) for p in points}
    ranked = sorted(scores, key=scores.__getitem__, reverse=True)

    hits = await store.search(query, SCOPE, now=NOW, limit=3)

    assert [h.entry_id for h in hits] == ranked[:3]
    for hit in hits:
        assert hit.score == pytest.approx(scores[hit.entry_id], abs=1e-4)
    best = next(p for p in points if p.entry_id == ranked[0])
    assert hits[0].payload == best.payload()


async def test_scope_fields_all_must_match(store: VectorStore) -> None:
    vec = unit(1, 2, 3)
    inside = point(vec)
    outside = [point(vec, scope=_with(SCOPE, name, "other")) for name in SCOPE_FIELDS]
    await store.upsert([inside, *outside])

    hits = await store.search(vec, SCOPE, now=NOW, limit=10)
    assert [h.entry_id for h in hits] == [inside.entry_id]
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    for name in SCOPE_FIELDS:  # each foreign point is found in its own scope only
        scoped = await store.search(vec, _with(SCOPE, name, "other"), now=NOW, limit=10)
        assert len(scoped) == 1
        assert scoped[0].payload[name] == "other"
    nowhere = Scope(tenant="t9", model="m1", params_hash="p1", context_hash="c1", namespace="ns")
    assert await store.search(vec, nowhere, now=NOW, limit=10) == []


def _with(scope: Scope, name: str, value: str) -> Scope:
    fields = scope.as_payload()
    fields[name] = value
    return Scope(**fields)


async def test_expired_nearest_is_filtered_inside_the_search(store: VectorStore) -> None:
    expired = point(unit(1), expires_at=NOW - 1)
    at_now = point(unit(1, 0.01), expires_at=NOW)  # expires_at > now is required: excluded
    valid = point(unit(1, 0.5))
    await store.upsert([expired, at_now, valid])

    # limit=1: a post-filter would have dropped the expired top hit and returned nothing.
    hits = await store.search(unit(1), SCOPE, now=NOW, limit=1)
    assert [h.entry_id for h in hits] == [valid.entry_id]
    earlier = await store.search(unit(1), SCOPE, now=NOW - 5, limit=1)
    assert [h.entry_id for h in earlier] == [expired.entry_id]


async def test_created_after(store: VectorStore) -> None:
    old = point(unit(1), created_at=100.0)
    new = point(unit(1, 0.3), created_at=200.0)
    await store.upsert([old, new])

    assert [h.entry_id for h in await store.search(unit(1), SCOPE, now=NOW)] == [old.entry_id]
    hits = await store.search(unit(1), SCOPE, now=NOW, created_after=150.0)
    assert [h.entry_id for h in hits] == [new.entry_id]
    inclusive = await store.search(unit(1), SCOPE, now=NOW, limit=5, created_after=200.0)
    assert [h.entry_id for h in inclusive] == [new.entry_id]
    assert await store.search(unit(1), SCOPE, now=NOW, created_after=201.0) == []


async def test_delete_by_entry_id(store: VectorStore) -> None:
    first, second = point(unit(1)), point(unit(1, 0.2))
    await store.upsert([first, second])

    await store.delete([first.entry_id, entry()])  # an unknown id is ignored
    await store.delete([])

    assert await store.count() == 1
    hits = await store.search(unit(1), SCOPE, now=NOW, limit=5)
    assert [h.entry_id for h in hits] == [second.entry_id]


async def test_delete_expired_removes_only_expired(store: VectorStore) -> None:
    rng = np.random.default_rng(3)
    expired = [point(random_unit(rng), expires_at=NOW - i) for i in range(3)]  # incl. == now
    alive = [point(random_unit(rng), expires_at=NOW + 1 + i) for i in range(2)]
    await store.upsert(expired + alive)

    assert await store.delete_expired(NOW) == 3
    assert await store.count() == 2
    assert await store.delete_expired(NOW) == 0
    left = await store.search(alive[0].vector, SCOPE, now=0.0, limit=10)
    assert {h.entry_id for h in left} == {p.entry_id for p in alive}


async def test_count(store: VectorStore) -> None:
    assert await store.count() == 0
    rng = np.random.default_rng(5)
    await store.upsert([point(random_unit(rng)) for _ in range(7)])
    await store.upsert([])
    assert await store.count() == 7


async def test_upsert_same_entry_id_replaces(store: VectorStore) -> None:
    entry_id = entry()
    await store.upsert([point(unit(1), entry_id=entry_id, question="before")])
    await store.upsert([point(unit(0, 1), entry_id=entry_id, question="after")])

    assert await store.count() == 1
    hits = await store.search(unit(0, 1), SCOPE, now=NOW)
    assert [h.entry_id for h in hits] == [entry_id]
    assert hits[0].payload["question"] == "after"
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)


async def test_concurrent_calls(store: VectorStore) -> None:
    rng = np.random.default_rng(11)
    points = [point(random_unit(rng)) for _ in range(50)]
    await store.upsert(points)
    searches = asyncio.gather(*(store.search(p.vector, SCOPE, now=NOW) for p in points))
    results, count = await asyncio.gather(searches, store.count())
    assert [r[0].entry_id for r in results] == [p.entry_id for p in points]
    assert count == 50


async def test_wrong_dimension_raises_vector_store_error(store: VectorStore) -> None:
    with pytest.raises(VectorStoreError):
        await store.upsert([point([1.0, 0.0, 0.0])])
    with pytest.raises(VectorStoreError):
        await store.search([1.0, 0.0, 0.0], SCOPE, now=NOW)


async def test_calls_after_close_raise_vector_store_error(store: VectorStore) -> None:
    await store.close()
    await store.close()  # idempotent
    with pytest.raises(VectorStoreError):
        await store.search(unit(1), SCOPE, now=NOW)
    with pytest.raises(VectorStoreError):
        await store.upsert([point(unit(1))])
    with pytest.raises(VectorStoreError):
        await store.count()


# --- Edge only ---------------------------------------------------------------------------------
async def test_edge_survives_restart(tmp_path: Path) -> None:
    rng = np.random.default_rng(13)
    points = [point(random_unit(rng)) for _ in range(30)]
    first = edge_store(tmp_path)
    await first.open()
    await first.upsert(points)
    await first.delete([points[0].entry_id])
    await first.close()
    assert (tmp_path / "qdrant-edge" / COLLECTION / "edge_config.json").exists()

    second = edge_store(tmp_path)
    await second.open()
    try:
        assert await second.count() == 29
        hits = await second.search(points[5].vector, SCOPE, now=NOW)
        assert hits[0].entry_id == points[5].entry_id
        assert hits[0].score == pytest.approx(1.0, abs=1e-5)
        hits = await second.search(points[0].vector, SCOPE, now=NOW, limit=30)
        assert len(hits) == 29
        assert points[0].entry_id not in {h.entry_id for h in hits}
    finally:
        await second.close()


async def test_edge_shard_is_exclusive_to_one_store(tmp_path: Path) -> None:
    first = edge_store(tmp_path)
    await first.open()
    try:
        with pytest.raises(VectorStoreError):
            await edge_store(tmp_path).open()
    finally:
        await first.close()
    with pytest.raises(VectorStoreError):  # reopening with another dimension is refused
        await edge_store(tmp_path, DIM * 2).open()


async def test_edge_unusable_directory_raises(tmp_path: Path) -> None:
    (tmp_path / "qdrant-edge").write_text("not a directory")
    with pytest.raises(VectorStoreError):
        await edge_store(tmp_path).open()
    with pytest.raises(VectorStoreError):  # never opened
        await edge_store(tmp_path).count()


# --- server only -------------------------------------------------------------------------------
async def test_server_unreachable_raises_vector_store_error_fast() -> None:
    store = server_store(
        url="http://127.0.0.1:1",
        timeout=0.3,
        maintenance_timeout=0.3,
    )
    started = time.monotonic()
    try:
        with pytest.raises(VectorStoreError):
            await store.open()
        with pytest.raises(VectorStoreError):
            await store.search(unit(1), SCOPE, now=NOW)
        with pytest.raises(VectorStoreError):
            await store.upsert([point(unit(1))])
    finally:
        await store.close()
    assert time.monotonic() - started < 3.0


async def test_server_store_needs_exactly_one_backend() -> None:
    with pytest.raises(ValueError):
        server_store()
    client = AsyncQdrantClient(location=":memory:")
    try:
        with pytest.raises(ValueError):
            server_store(url="http://127.0.0.1:6333", client=client)
    finally:
        await client.close()


async def test_server_store_leaves_a_passed_client_open(tmp_path: Path) -> None:
    client = AsyncQdrantClient(path=str(tmp_path / "local"))
    try:
        store = server_store(client=client)
        await store.open()
        await store.upsert([point(unit(1))])
        await store.close()
        assert await client.count(COLLECTION) is not None  # still usable
        reopened = server_store(client=client)
        await reopened.open()
        assert await reopened.count() == 1
        await reopened.close()
    finally:
        await client.close()


async def test_scope_values_with_separators_do_not_collide(store: VectorStore) -> None:
    vec = unit(1)
    left = Scope(tenant="a,b", model='m"', params_hash="p", context_hash="c")
    right = Scope(tenant="a", model='b,m"', params_hash="p", context_hash="c")
    first, second = point(vec, scope=left), point(vec, scope=right)
    await store.upsert([first, second])
    assert [h.entry_id for h in await store.search(vec, left, now=NOW, limit=5)] == [first.entry_id]
    assert [h.entry_id for h in await store.search(vec, right, now=NOW, limit=5)] == [
        second.entry_id
    ]


async def test_delete_sourced_removes_only_the_tenants_points_built_from_those_documents(
    store: VectorStore,
) -> None:
    other_tenant = Scope(tenant="t2", model="m1", params_hash="p1", context_hash="c1")

    def point(scope: Scope, sources: list[str] | None) -> VectorPoint:
        extra: dict[str, object] = {"sources": sources} if sources is not None else {}
        return VectorPoint(entry(), unit(1, 0.1), scope, "q", NOW, NOW + 100, extra)

    from_a = point(SCOPE, ["docs/a.md", "docs/b.md"])
    from_b = point(SCOPE, ["docs/b.md"])
    from_c = point(SCOPE, ["docs/c.md"])
    plain = point(SCOPE, None)
    elsewhere = point(other_tenant, ["docs/a.md"])
    await store.upsert([from_a, from_b, from_c, plain, elsewhere])

    removed = await store.delete_sourced("t1", ["docs/a.md"])
    assert removed == [from_a.entry_id]
    removed = await store.delete_sourced("t1", ["docs/b.md", "docs/zzz.md"])
    assert removed == [from_b.entry_id]
    assert await store.delete_sourced("t1", []) == []
    left = await store.search(unit(1, 0.1), SCOPE, now=NOW, limit=10)
    assert {p.entry_id for p in left} == {from_c.entry_id, plain.entry_id}
    still = await store.search(unit(1, 0.1), other_tenant, now=NOW, limit=10)
    assert [p.entry_id for p in still] == [elsewhere.entry_id]
