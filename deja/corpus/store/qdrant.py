"""The chunk store on a Qdrant server, through ``qdrant_client.AsyncQdrantClient``: the same
payload, indexes and filters as ``deja.corpus.store.edge``, in its own collection.

Searches are bounded by ``timeout`` (the retrieval budget); writes and listings by
``maintenance_timeout``, since an upsert carries a whole document's chunks. Any failure becomes
``VectorStoreError``. Tests use qdrant-client's local mode (``location=":memory:"``), which
speaks the same API but ignores payload indexes (it filters by scanning): no Qdrant server
binary can be installed on the development machines.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

from qdrant_client import AsyncQdrantClient, models

from deja.corpus.base import RetrievedChunk
from deja.corpus.store.base import (
    INTEGER_FIELDS,
    KEYWORD_FIELDS,
    MAX_CORPORA,
    ChunkPoint,
    DocumentHead,
    chunk_point_id,
    head_of,
    matches,
    retrieved,
    split_corpus_key,
)
from deja.vectorstore.qdrant import Distribution, IndexSchemas, QdrantCollection

_T = TypeVar("_T")
#: Points per scroll page when listing heads.
SCROLL_PAGE = 1000


def _index_schemas() -> IndexSchemas:
    schemas: IndexSchemas = {name: models.PayloadSchemaType.KEYWORD for name in KEYWORD_FIELDS}
    schemas["tenant"] = models.KeywordIndexParams(
        type=models.KeywordIndexType.KEYWORD, is_tenant=True
    )
    for name in INTEGER_FIELDS:
        schemas[name] = models.PayloadSchemaType.INTEGER
    return schemas


def _filter(
    fields: list[tuple[str, str]],
    *,
    where: dict[str, str] | None = None,
    heads: bool = False,
    below: int | None = None,
) -> models.Filter | None:
    must: list[models.Condition] = [
        models.FieldCondition(key=name, match=models.MatchValue(value=value))
        for name, value in fields
    ]
    for key, value in (where or {}).items():
        must.append(
            models.FieldCondition(key=f"metadata.{key}", match=models.MatchValue(value=value))
        )
    if heads:
        must.append(models.FieldCondition(key="index", match=models.MatchValue(value=0)))
    if below is not None:
        must.append(models.FieldCondition(key="version", range=models.Range(lt=below)))
    return models.Filter(must=must) if must else None


class QdrantChunkStore:
    """``ChunkStore`` on a Qdrant collection (cosine distance).

    Pass either ``url`` (and ``api_key``) of a server, or an already-built ``client``; a client
    passed in is never closed by the store.
    """

    name = "qdrant"

    def __init__(
        self,
        *,
        collection: str,
        dim: int,
        url: str | None = None,
        api_key: str | None = None,
        client: AsyncQdrantClient | None = None,
        timeout: float = 1.0,
        maintenance_timeout: float = 60.0,
        distribution: Distribution | None = None,
    ) -> None:
        self.collection = collection
        self.dim = dim
        self.timeout = timeout
        self.maintenance_timeout = maintenance_timeout
        #: A server is shared with other gateways; a client passed in (local mode) is not.
        self.shared = url is not None
        self._db = QdrantCollection(
            collection=collection,
            dim=dim,
            url=url,
            api_key=api_key,
            client=client,
            seconds=max(timeout, maintenance_timeout),
            distribution=distribution,
        )
        self._client = self._db.client

    async def _call(self, op: str, call: Coroutine[Any, Any, _T], seconds: float) -> _T:
        return await self._db.call(op, call, seconds)

    async def open(self) -> None:
        await self._db.open(_index_schemas(), self.maintenance_timeout)

    async def upsert(self, points: list[ChunkPoint]) -> None:
        if not points:
            return
        structs = [
            models.PointStruct(id=chunk_point_id(p.chunk), vector=p.vector, payload=p.payload())
            for p in points
        ]
        await self._call(
            "upsert",
            self._client.upsert(self.collection, points=structs, wait=True),
            self.maintenance_timeout,
        )

    async def _delete(self, flt: models.Filter | None) -> None:
        assert flt is not None
        await self._call(
            "delete",
            self._client.delete(
                self.collection, points_selector=models.FilterSelector(filter=flt), wait=True
            ),
            self.maintenance_timeout,
        )

    async def delete_older(self, tenant: str, corpus: str, document: str, version: int) -> None:
        await self._delete(_filter(matches(tenant, corpus, document), below=version))

    async def delete_document(self, tenant: str, corpus: str, document: str) -> None:
        await self._delete(_filter(matches(tenant, corpus, document)))

    async def search(
        self,
        vector: list[float],
        tenant: str,
        corpus: str,
        *,
        limit: int,
        where: dict[str, str] | None = None,
    ) -> list[RetrievedChunk]:
        response = await self._call(
            "search",
            self._client.query_points(
                self.collection,
                query=vector,
                query_filter=_filter(matches(tenant, corpus), where=where),
                limit=limit,
                with_payload=True,
            ),
            self.timeout,
        )
        found = (retrieved(hit.score, hit.payload or {}) for hit in response.points)
        return [r for r in found if r is not None]

    async def heads(
        self, tenant: str | None = None, corpus: str | None = None, document: str | None = None
    ) -> list[DocumentHead]:
        flt = _filter(matches(tenant, corpus, document), heads=True)
        payloads = await self._call("scroll", self._scroll(flt), self.maintenance_timeout)
        return [head_of(p) for p in payloads]

    async def _scroll(self, flt: models.Filter | None) -> list[dict[str, Any]]:
        payloads: list[dict[str, Any]] = []
        offset: models.ExtendedPointId | None = None
        while True:
            records, offset = await self._client.scroll(
                self.collection,
                scroll_filter=flt,
                limit=SCROLL_PAGE,
                offset=offset,
                with_payload=models.PayloadSelectorExclude(exclude=["text"]),
            )
            payloads.extend(r.payload for r in records if r.payload is not None)
            if offset is None:
                return payloads

    async def corpus_keys(self) -> set[tuple[str, str]]:
        response = await self._call(
            "facet",
            self._client.facet(
                self.collection, key=KEYWORD_FIELDS[0], limit=MAX_CORPORA, exact=True
            ),
            self.maintenance_timeout,
        )
        return {split_corpus_key(str(hit.value)) for hit in response.hits if hit.count > 0}

    async def count(self, tenant: str | None = None, corpus: str | None = None) -> int:
        result = await self._call(
            "count",
            self._client.count(
                self.collection, count_filter=_filter(matches(tenant, corpus)), exact=True
            ),
            self.maintenance_timeout,
        )
        return result.count

    async def close(self) -> None:
        """Close the client if the store built it (idempotent)."""
        await self._db.close()
