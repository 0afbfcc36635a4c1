"""Qdrant for a distributed deployment: shard count, replication factor and write consistency
applied when the gateway creates a collection, payload indexes on the filter fields, and a
collection made before a setting changed kept as it is with a warning.

No Qdrant server binary can be installed here, so this runs on qdrant-client's local mode
(the same client API). Local mode accepts the three settings at creation but neither applies
nor reports them (``get_collection`` says None), and accepts payload indexes without building
them. So the tests read what the gateway *sends* (a local-mode client that records the calls
it is given) and, for the warning, what a server *reports* for an older collection (the
collection's real info from local mode with the server's figure put in).
"""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import ValidationError
from qdrant_client import AsyncQdrantClient, models

from app.wiring.vectors import QDRANT_LOCAL_MEMORY, VectorBackend, qdrant_distribution
from config.settings import Settings
from deja.corpus.index import CHUNKS
from deja.semantic.index import QUESTIONS, SCOPE_KEY_FIELD, SOURCES_FIELD
from deja.vectors.qdrant import Distribution, QdrantCollection

pytestmark = pytest.mark.integration

SPREAD = Distribution(shard_number=3, replication_factor=2, write_consistency_factor=2)
FLOAT_PAYLOAD_FIELDS = ("expires_at", "created_at")


def cache_collection(client: AsyncQdrantClient, distribution: Distribution | None = None) -> Any:
    """The cache's collection (its schema's indexes) on ``client``."""
    return QdrantCollection(
        collection="cache",
        dim=4,
        indexes=QUESTIONS.indexes,
        client=client,
        distribution=distribution,
    )


@dataclass(frozen=True)
class Named:
    """Just what a collection's name needs of an embedder."""

    model_id: str = "test-embedder"
    dim: int = 4


class RecordingClient(AsyncQdrantClient):
    """qdrant-client's local mode, recording the creation calls it is given; ``reported``
    stands for what a server says about an existing collection's distribution."""

    def __init__(self, reported: dict[str, int] | None = None) -> None:
        super().__init__(location=":memory:")
        self.created: list[dict[str, Any]] = []
        self.indexed: list[str] = []
        self.reported = reported or {}

    async def create_collection(self, collection_name: str, **kwargs: Any) -> bool:
        self.created.append({"name": collection_name, **kwargs})
        return await super().create_collection(collection_name, **kwargs)

    async def create_payload_index(
        self, collection_name: str, field_name: str, **kwargs: Any
    ) -> models.UpdateResult:
        self.indexed.append(field_name)
        return await super().create_payload_index(collection_name, field_name, **kwargs)

    async def get_collection(self, collection_name: str) -> models.CollectionInfo:
        info = await super().get_collection(collection_name)
        for name, value in self.reported.items():
            setattr(info.config.params, name, value)
        return info


def test_the_settings_come_from_deja_qdrant_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEJA_QDRANT_SHARD_NUMBER", "3")
    monkeypatch.setenv("DEJA_QDRANT_REPLICATION_FACTOR", "2")
    monkeypatch.setenv("DEJA_QDRANT_WRITE_CONSISTENCY_FACTOR", "2")
    assert qdrant_distribution(Settings()) == SPREAD
    assert qdrant_distribution(Settings(qdrant_shard_number=None)) == Distribution(None, 2, 2)
    with pytest.raises(ValidationError, match="cannot exceed"):
        Settings(qdrant_replication_factor=1, qdrant_write_consistency_factor=2)


async def test_a_new_collection_is_created_sharded_replicated_and_indexed() -> None:
    """Through the gateway's one backend choice: both collections (the cache's, the chunks')
    get the DEJA_QDRANT_* distribution from the settings."""
    client = RecordingClient()
    settings = Settings(
        qdrant_url=QDRANT_LOCAL_MEMORY,
        qdrant_shard_number=3,
        qdrant_replication_factor=2,
        qdrant_write_consistency_factor=2,
    )
    async with AsyncExitStack() as stack:
        backend = VectorBackend(settings, local=client)
        stack.push_async_callback(client.close)
        store, chunks = (
            backend.collection(schema, Named(), timeout=5, maintenance_timeout=5)
            for schema in (QUESTIONS, CHUNKS)
        )
        stack.push_async_callback(store.close)
        stack.push_async_callback(chunks.close)
        await store.open()
        await chunks.open()
        for created in client.created:
            assert created["shard_number"] == 3
            assert created["replication_factor"] == 2
            assert created["write_consistency_factor"] == 2
        names = [c["name"] for c in client.created]
        assert names == [
            QUESTIONS.collection("test-embedder", 4),
            CHUNKS.collection("test-embedder", 4),
        ]
        # The cache's lookup filter fields are indexed (the corpora's are too).
        assert {SCOPE_KEY_FIELD, "tenant", SOURCES_FIELD, *FLOAT_PAYLOAD_FIELDS} <= set(
            client.indexed
        )
        await store.open()  # opening again creates nothing
        assert len(client.created) == 2


async def test_without_settings_the_server_defaults_apply() -> None:
    client = RecordingClient()
    store = cache_collection(client)
    try:
        await store.open()
        (created,) = client.created
        assert created["shard_number"] is None and created["replication_factor"] is None
    finally:
        await store.close()
        await client.close()


async def test_an_older_collection_is_kept_with_one_warning_naming_the_setting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = RecordingClient()
    first = cache_collection(client)
    await first.open()  # made before the settings changed: the server's defaults
    await client.upsert(
        "cache", points=[models.PointStruct(id=1, vector=[1.0, 0, 0, 0], payload={})]
    )
    client.reported = {"shard_number": 1, "replication_factor": 1}  # what a server says
    later = cache_collection(client, SPREAD)
    try:
        with caplog.at_level(logging.WARNING, logger="deja.vectors"):
            await later.open()
        lines = [r.getMessage() for r in caplog.records if r.name == "deja.vectors"]
        assert len(lines) == 2
        assert "DEJA_QDRANT_SHARD_NUMBER=3 (collection has 1)" in lines[0]
        assert "DEJA_QDRANT_REPLICATION_FACTOR=2 (collection has 1)" in lines[1]
        assert all("kept as it is" in line for line in lines)
        assert len(client.created) == 1  # not recreated ...
        assert (await client.count("cache")).count == 1  # ... and nothing dropped
    finally:
        await first.close()
        await later.close()
        await client.close()


async def test_local_mode_reports_no_distribution_so_nothing_is_warned(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What local mode allows: the settings are accepted at creation, not reported back."""
    client = RecordingClient()
    store = cache_collection(client, SPREAD)
    try:
        await store.open()
        params = (await client.get_collection("cache")).config.params
        assert params.shard_number is None and params.replication_factor is None
        with caplog.at_level(logging.WARNING, logger="deja.vectors"):
            await store.open()
        assert not [r for r in caplog.records if r.name == "deja.vectors"]
    finally:
        await store.close()
        await client.close()


def test_mismatches_compare_only_what_is_set_and_reported() -> None:
    params = models.CollectionParams(shard_number=2, replication_factor=None)
    assert Distribution().mismatches(params) == []
    assert Distribution(shard_number=2).mismatches(params) == []
    assert Distribution(replication_factor=3).mismatches(params) == []  # not reported
    assert Distribution(shard_number=4).mismatches(params) == [
        "DEJA_QDRANT_SHARD_NUMBER=4 (collection has 2)"
    ]
