"""The corpora's schema (``deja.corpus.index.ChunkStore``) on both vector backends: the embedded
Qdrant Edge shard (in a temporary directory) and the Qdrant server backend (on qdrant-client's
local mode, which speaks the same client API as a real server; no server binary can be
installed here). The backends' own contract is ``test_vectors.py``."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import numpy as np
import pytest

from deja.corpus.base import Chunk
from deja.corpus.index import (
    CHUNK_INDEXES,
    ChunkPoint,
    ChunkStore,
    DocumentHead,
    corpus_collection,
)
from deja.errors import VectorStoreError
from deja.vectors.edge import EdgeCollection
from deja.vectors.qdrant import QdrantCollection
from tests.support import BACKENDS, collection_factory

pytestmark = pytest.mark.integration

DIM = 16
COLLECTION = corpus_collection("test-embedder", DIM)

Factory = Callable[[], ChunkStore]


@pytest.fixture(params=BACKENDS)
async def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Factory]:
    """Builds stores of the parametrised kind over one backing location; closes them all."""
    async with collection_factory(request.param, tmp_path) as make:
        yield lambda: ChunkStore(make(COLLECTION, DIM, CHUNK_INDEXES))


def edge_store(data_dir: Path) -> ChunkStore:
    return ChunkStore(
        EdgeCollection(data_dir, collection=COLLECTION, dim=DIM, indexes=CHUNK_INDEXES)
    )


@pytest.fixture
async def store(make_store: Factory) -> ChunkStore:
    opened = make_store()
    await opened.open()
    return opened


def unit(seed: int) -> list[float]:
    vec = np.random.default_rng(seed).standard_normal(DIM)
    return [float(x) for x in vec / np.linalg.norm(vec)]


def document(
    tenant: str,
    corpus: str,
    name: str,
    *,
    version: int = 1,
    chunks: int = 3,
    seed: int = 0,
    metadata: dict[str, str] | None = None,
) -> list[ChunkPoint]:
    """A document's points: chunk i has vector unit(seed + i)."""
    meta = metadata or {}
    head = DocumentHead(
        tenant=tenant,
        corpus=corpus,
        document=name,
        version=version,
        chunks=chunks,
        content_hash=f"hash-{name}-{version}",
        title=f"Title of {name}",
        source=name,
        format="markdown",
        bytes=123,
        ingested_at=time.time(),
        metadata=meta,
    )
    return [
        ChunkPoint(
            chunk=Chunk(
                tenant=tenant,
                corpus=corpus,
                document=name,
                version=version,
                index=i,
                text=f"{name} v{version} chunk {i}",
                title=f"Title of {name} > part {i}",
                metadata=meta,
            ),
            vector=unit(seed + i),
            content_hash=head.content_hash,
            head=head if i == 0 else None,
        )
        for i in range(chunks)
    ]


async def test_open_is_idempotent_and_a_second_store_sees_the_data(
    store: ChunkStore, make_store: Factory
) -> None:
    await store.upsert(document("t1", "docs", "a.md"))
    await store.open()
    assert await store.count() == 3
    if isinstance(store.backend, QdrantCollection):
        other = make_store()
        await other.open()
        assert await other.count() == 3


async def test_search_returns_chunks_with_payload_and_cosine(store: ChunkStore) -> None:
    points = document("t1", "docs", "a.md", chunks=5, seed=10, metadata={"lang": "en"})
    await store.upsert(points)
    hits = await store.search(unit(12), "t1", "docs", limit=5)
    assert hits[0].chunk.index == 2
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert hits[0].chunk == points[2].chunk  # every field round-trips
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert len(hits) == 5


async def test_search_never_crosses_tenants_or_corpora(store: ChunkStore) -> None:
    await store.upsert(document("t1", "docs", "a.md", seed=1))
    await store.upsert(document("t2", "docs", "a.md", seed=1))  # same corpus name, same vectors
    await store.upsert(document("t1", "other", "b.md", seed=1))
    for tenant, corpus in (("t1", "docs"), ("t2", "docs"), ("t1", "other")):
        hits = await store.search(unit(1), tenant, corpus, limit=10)
        assert len(hits) == 3
        assert {(h.chunk.tenant, h.chunk.corpus) for h in hits} == {(tenant, corpus)}
    assert await store.search(unit(1), "t2", "other", limit=10) == []
    assert await store.search(unit(1), "t3", "docs", limit=10) == []


async def test_search_filters_on_metadata_equality(store: ChunkStore) -> None:
    await store.upsert(document("t1", "docs", "en.md", seed=1, metadata={"lang": "en"}))
    await store.upsert(document("t1", "docs", "fr.md", seed=1, metadata={"lang": "fr"}))
    hits = await store.search(unit(1), "t1", "docs", limit=10, where={"lang": "fr"})
    assert {h.chunk.document for h in hits} == {"fr.md"}
    assert await store.search(unit(1), "t1", "docs", limit=10, where={"lang": "de"}) == []
    assert len(await store.search(unit(1), "t1", "docs", limit=10)) == 6


async def test_replacing_a_version_keeps_the_document_whole(store: ChunkStore) -> None:
    await store.upsert(document("t1", "docs", "a.md", version=1, chunks=4, seed=1))
    await store.upsert(document("t1", "docs", "b.md", version=1, chunks=2, seed=50))
    # The new version is written next to the old one: both are there until the delete.
    await store.upsert(document("t1", "docs", "a.md", version=2, chunks=2, seed=100))
    assert await store.count("t1", "docs") == 8
    assert {h.version for h in await store.heads("t1", "docs", "a.md")} == {1, 2}
    await store.delete_older("t1", "docs", "a.md", 2)
    assert await store.count("t1", "docs") == 4
    hits = await store.search(unit(1), "t1", "docs", limit=10)
    versions = {(h.chunk.document, h.chunk.version) for h in hits}
    assert versions == {("a.md", 2), ("b.md", 1)}
    assert [h.version for h in await store.heads("t1", "docs", "a.md")] == [2]


async def test_delete_document_removes_every_version_and_nothing_else(store: ChunkStore) -> None:
    await store.upsert(document("t1", "docs", "a.md", version=1))
    await store.upsert(document("t1", "docs", "a.md", version=2))
    await store.upsert(document("t1", "docs", "b.md"))
    await store.upsert(document("t2", "docs", "a.md"))
    await store.delete_document("t1", "docs", "a.md")
    assert await store.heads("t1", "docs", "a.md") == []
    assert await store.count("t1", "docs") == 3
    assert await store.count("t2") == 3


async def test_heads_list_documents_by_tenant_and_corpus(store: ChunkStore) -> None:
    await store.upsert(document("t1", "docs", "a.md", chunks=4, metadata={"k": "v"}))
    await store.upsert(document("t1", "docs", "sub/b.md", chunks=2))
    await store.upsert(document("t1", "faq", "c.md", chunks=1))
    await store.upsert(document("t2", "docs", "z.md"))
    heads = {h.document: h for h in await store.heads("t1", "docs")}
    assert set(heads) == {"a.md", "sub/b.md"}
    a = heads["a.md"]
    assert (a.chunks, a.version, a.title, a.source, a.format, a.bytes) == (
        4,
        1,
        "Title of a.md",
        "a.md",
        "markdown",
        123,
    )
    assert a.metadata == {"k": "v"} and a.content_hash == "hash-a.md-1" and a.ingested_at > 0
    assert {h.document for h in await store.heads("t1")} == {"a.md", "sub/b.md", "c.md"}
    assert {(h.tenant, h.document) for h in await store.heads()} >= {("t2", "z.md")}
    with pytest.raises(ValueError):
        await store.heads(None, "docs")


async def test_corpus_keys_and_counts(store: ChunkStore) -> None:
    assert await store.corpus_keys() == set()
    await store.upsert(document("t1", "docs", "a.md", chunks=4))
    await store.upsert(document("t1", "faq", "b.md", chunks=2))
    await store.upsert(document("t2", "docs", "c.md", chunks=1))
    assert await store.corpus_keys() == {("t1", "docs"), ("t1", "faq"), ("t2", "docs")}
    assert await store.count() == 7
    assert await store.count("t1") == 6
    assert await store.count("t1", "faq") == 2
    await store.delete_document("t1", "faq", "b.md")
    assert await store.corpus_keys() == {("t1", "docs"), ("t2", "docs")}


async def test_a_closed_store_raises_vector_store_error(make_store: Factory) -> None:
    store = make_store()
    await store.open()
    await store.close()
    with pytest.raises(VectorStoreError):
        await store.search(unit(1), "t1", "docs", limit=1)
    with pytest.raises(VectorStoreError):
        await store.upsert(document("t1", "docs", "a.md"))


# --- Edge only ---------------------------------------------------------------------------------
async def test_edge_chunks_survive_a_restart_and_live_apart_from_the_cache(
    tmp_path: Path,
) -> None:
    first = edge_store(tmp_path)
    await first.open()
    await first.upsert(document("t1", "docs", "a.md", chunks=5))
    await first.close()
    assert tmp_path.joinpath("qdrant-edge", COLLECTION).is_dir()
    assert first.collection == COLLECTION
    assert COLLECTION.startswith("deja-corpus_")
    second = edge_store(tmp_path)
    await second.open()
    try:
        assert await second.count("t1", "docs") == 5
        assert (await second.heads("t1", "docs"))[0].chunks == 5
    finally:
        await second.close()


# --- server only -------------------------------------------------------------------------------
async def test_server_unreachable_raises_vector_store_error_fast() -> None:
    store = ChunkStore(
        QdrantCollection(
            collection=COLLECTION,
            dim=DIM,
            indexes=CHUNK_INDEXES,
            url="http://127.0.0.1:1",
            timeout=0.3,
            maintenance_timeout=0.3,
        )
    )
    assert store.shared
    started = time.monotonic()
    try:
        with pytest.raises(VectorStoreError):
            await store.open()
        with pytest.raises(VectorStoreError):
            await store.search(unit(1), "t1", "docs", limit=1)
    finally:
        await store.close()
    assert time.monotonic() - started < 3.0
