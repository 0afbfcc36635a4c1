"""Where the vector collections live, decided once per gateway from ``DEJA_QDRANT_URL``: unset,
Qdrant Edge under ``data_dir``; a URL, that Qdrant server; ``:memory:``, qdrant-client's
in-process local mode (tests and demos: same client API, no server). The semantic cache and
the corpora both ask this one object for their collection."""

from __future__ import annotations

from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

from qdrant_client import AsyncQdrantClient

from config.settings import Settings
from deja.diskspace import DiskSpace
from deja.embedding.base import Embedder
from deja.vectors.collection import Collection, Schema
from deja.vectors.edge import EdgeCollection
from deja.vectors.qdrant import Distribution, QdrantCollection

#: ``DEJA_QDRANT_URL`` value that runs the server backend on qdrant-client's in-process local
#: mode (same client API, no server): for tests and demos only.
QDRANT_LOCAL_MEMORY = ":memory:"


def qdrant_distribution(settings: Settings) -> Distribution:
    """Shards and replicas of the collections this gateway creates on a Qdrant server."""
    return Distribution(
        shard_number=settings.qdrant_shard_number,
        replication_factor=settings.qdrant_replication_factor,
        write_consistency_factor=settings.qdrant_write_consistency_factor,
    )


@dataclass(frozen=True)
class VectorBackend:
    """The one choice of backend, and the local-mode client when that is the choice."""

    settings: Settings
    #: qdrant-client's local mode, shared by every collection (one in-process "server").
    local: AsyncQdrantClient | None = None
    #: The data disk's reserve, checked before every Qdrant Edge write (None: not checked).
    space: DiskSpace | None = None

    @classmethod
    def open(
        cls, stack: AsyncExitStack, settings: Settings, space: DiskSpace | None = None
    ) -> VectorBackend:
        if settings.qdrant_url != QDRANT_LOCAL_MEMORY:
            return cls(settings, space=space)
        client = AsyncQdrantClient(location=":memory:")
        stack.push_async_callback(client.close)
        return cls(settings, client, space)

    def collection(
        self, schema: Schema, embedder: Embedder, *, timeout: float, maintenance_timeout: float
    ) -> Collection:
        """The schema's collection for ``embedder`` on the chosen backend (not yet opened),
        with the BM25 sparse vector when the schema asks for one (the corpora's chunks)."""
        settings = self.settings
        name, dim, indexes = (
            schema.collection(embedder.model_id, embedder.dim),
            embedder.dim,
            schema.indexes,
        )
        if not settings.qdrant_url:
            return EdgeCollection(
                settings.data_dir,
                collection=name,
                dim=dim,
                indexes=indexes,
                space=self.space,
                sparse=schema.sparse,
            )
        server: dict[str, Any] = {"client": self.local}
        if self.local is None:
            key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
            server = {"url": settings.qdrant_url, "api_key": key}
        return QdrantCollection(
            collection=name,
            dim=dim,
            indexes=indexes,
            timeout=timeout,
            maintenance_timeout=maintenance_timeout,
            sparse=schema.sparse,
            distribution=qdrant_distribution(settings),
            **server,
        )
