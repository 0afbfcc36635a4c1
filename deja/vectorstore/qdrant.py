"""The vector store on a Qdrant server, through ``qdrant_client.AsyncQdrantClient``.

Same contract and payload layout as the embedded store (``deja.vectorstore.edge``): a collection
per embedder and dimension, cosine distance, payload indexes on the compound scope key and the
scope fields (keyword) and on ``expires_at``/``created_at`` (float), and scope + lifetime
filtered inside the search. Every call
is bounded by a timeout suited to the request hot path; any failure becomes ``VectorStoreError``.

Tests pass a client in qdrant-client's local mode (``location=":memory:"`` or ``path=...``),
which speaks the same API; local mode ignores payload indexes (it filters by scanning).
"""

from __future__ import annotations

import asyncio
import logging
import math
import warnings
from collections.abc import Coroutine
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from qdrant_client import AsyncQdrantClient, models

from deja.errors import VectorStoreError
from deja.vectorstore.base import (
    FLOAT_PAYLOAD_FIELDS,
    SCOPE_FIELDS,
    SCOPE_KEY_FIELD,
    SOURCES_FIELD,
    Scope,
    ScoredPoint,
    VectorPoint,
    point_id,
    scope_key,
    stored_payload,
)

log = logging.getLogger("deja.vectors")

_T = TypeVar("_T")
#: Payload field → the index it gets.
IndexSchemas = dict[str, models.PayloadSchemaType | models.KeywordIndexParams]


def _index_schemas() -> IndexSchemas:
    schemas: IndexSchemas = {
        name: models.PayloadSchemaType.KEYWORD for name in (SCOPE_KEY_FIELD, *SCOPE_FIELDS)
    }
    # The tenant is the coarsest partition of the data: let the server co-locate by it.
    schemas["tenant"] = models.KeywordIndexParams(
        type=models.KeywordIndexType.KEYWORD, is_tenant=True
    )
    schemas[SOURCES_FIELD] = models.PayloadSchemaType.KEYWORD
    for name in FLOAT_PAYLOAD_FIELDS:
        schemas[name] = models.PayloadSchemaType.FLOAT
    return schemas


async def call_within(what: str, call: Coroutine[Any, Any, _T], seconds: float) -> _T:
    """Await ``call`` within ``seconds``; a timeout or any client failure becomes
    ``VectorStoreError`` naming ``what`` (e.g. ``qdrant search on 'deja_…'``)."""
    try:
        async with asyncio.timeout(seconds):
            return await call
    except TimeoutError as exc:
        raise VectorStoreError(f"{what} timed out after {seconds:g}s") from exc
    except Exception as exc:
        raise VectorStoreError(f"{what} failed: {exc}") from exc


@dataclass(frozen=True)
class Distribution:
    """How a distributed Qdrant spreads a new collection (``DEJA_QDRANT_SHARD_NUMBER``,
    ``_REPLICATION_FACTOR``, ``_WRITE_CONSISTENCY_FACTOR``; None = the server's default).

    Applied only when the collection is created: Qdrant cannot change a collection's shard
    count afterwards, and a gateway that silently recreated a shared collection would drop
    every cached answer of every gateway. A collection made before a setting changed is kept
    as it is, with a one-line warning naming the setting (``mismatches``); resharding it is an
    operator's decision (a new collection, or Qdrant's own tools)."""

    shard_number: int | None = None
    replication_factor: int | None = None
    write_consistency_factor: int | None = None

    def mismatches(self, params: models.CollectionParams) -> list[str]:
        """The settings whose value differs from what the server reports for an existing
        collection; a value the server does not report (None: qdrant-client's local mode
        reports none) is not a difference."""
        found = []
        for item in fields(self):
            wanted, actual = getattr(self, item.name), getattr(params, item.name, None)
            if wanted is not None and actual is not None and wanted != actual:
                found.append(f"DEJA_QDRANT_{item.name.upper()}={wanted} (collection has {actual})")
        return found


async def ensure_collection(
    client: AsyncQdrantClient,
    collection: str,
    dim: int,
    indexes: IndexSchemas,
    distribution: Distribution | None = None,
) -> None:
    """Create ``collection`` (cosine, ``dim``, sharded and replicated as ``distribution``
    says) and its payload indexes when missing; a concurrent creation by another gateway is
    tolerated, another dimension is refused, another distribution is warned about."""
    spread = distribution or Distribution()
    if not await client.collection_exists(collection):
        try:
            await client.create_collection(
                collection,
                vectors_config=models.VectorParams(size=dim, distance=models.Distance.COSINE),
                shard_number=spread.shard_number,
                replication_factor=spread.replication_factor,
                write_consistency_factor=spread.write_consistency_factor,
            )
        except Exception:
            if not await client.collection_exists(collection):
                raise  # not a lost race with another creator
    info = await client.get_collection(collection)
    params = info.config.params.vectors
    if isinstance(params, models.VectorParams) and params.size != dim:
        raise ValueError(f"collection has dimension {params.size}, expected {dim}")
    for mismatch in spread.mismatches(info.config.params):
        log.warning(
            "qdrant collection %r was created before %s: kept as it is", collection, mismatch
        )
    existing = info.payload_schema or {}
    with warnings.catch_warnings():
        # Local mode warns that payload indexes have no effect there: expected.
        warnings.simplefilter("ignore", UserWarning)
        for name, schema in indexes.items():
            if name not in existing:
                await client.create_payload_index(collection, name, field_schema=schema)


class QdrantCollection:
    """One collection on a Qdrant server (or qdrant-client's local mode) as a store uses it:
    the client (built from ``url``, or passed in and then never closed here), every call
    bounded by a timeout and mapped to ``VectorStoreError``, and the close. The semantic
    cache's store and the corpora's chunk store share it."""

    def __init__(
        self,
        *,
        collection: str,
        dim: int,
        url: str | None,
        api_key: str | None,
        client: AsyncQdrantClient | None,
        seconds: float,
        prefer_grpc: bool = False,
        distribution: Distribution | None = None,
    ) -> None:
        if (url is None) == (client is None):
            raise ValueError("pass exactly one of url or client")
        if dim <= 0:
            raise ValueError(f"dim must be positive, got {dim}")
        self.collection = collection
        self.dim = dim
        self.owns_client = client is None
        self.distribution = distribution
        if client is None:
            client = AsyncQdrantClient(
                url=url,
                api_key=api_key,
                prefer_grpc=prefer_grpc,
                # qdrant-client takes whole seconds; the asyncio timeout is the real bound.
                timeout=max(1, math.ceil(seconds)),
                check_compatibility=False,  # no version-probe thread per store
            )
        self.client: AsyncQdrantClient = client
        self.closed = False

    async def call(self, op: str, call: Coroutine[Any, Any, _T], seconds: float) -> _T:
        """Await ``call`` within ``seconds``, mapping any failure (a closed store refuses)."""
        if self.closed:
            call.close()
            raise VectorStoreError(f"qdrant collection {self.collection!r}: store is closed")
        return await call_within(f"qdrant {op} on {self.collection!r}", call, seconds)

    async def open(self, indexes: IndexSchemas, seconds: float) -> None:
        """Create the collection and its payload indexes when missing (idempotent)."""
        ensure = ensure_collection(
            self.client, self.collection, self.dim, indexes, self.distribution
        )
        await self.call("open", ensure, seconds)

    async def close(self) -> None:
        """Close the client if it was built here (idempotent); the store is unusable after."""
        if self.closed:
            return
        self.closed = True
        if self.owns_client:
            try:
                await self.client.close()
            except Exception as exc:
                raise VectorStoreError(f"qdrant client close failed: {exc}") from exc


def search_filter(scope: Scope, now: float, created_after: float | None) -> models.Filter:
    """The filter of a lookup: the scope key matches (so every scope field does, see
    ``deja.vectorstore.edge``), ``expires_at > now`` and, when given, ``created_at >=
    created_after``."""
    must: list[models.Condition] = [
        models.FieldCondition(key=SCOPE_KEY_FIELD, match=models.MatchValue(value=scope_key(scope))),
        models.FieldCondition(key="expires_at", range=models.Range(gt=now)),
    ]
    if created_after is not None:
        must.append(models.FieldCondition(key="created_at", range=models.Range(gte=created_after)))
    return models.Filter(must=must)


def expired_filter(now: float) -> models.Filter:
    """Points whose lifetime ended: ``expires_at <= now``."""
    return models.Filter(
        must=[models.FieldCondition(key="expires_at", range=models.Range(lte=now))]
    )


class QdrantServerVectorStore:
    """``VectorStore`` on a Qdrant collection (cosine distance).

    Pass either ``url`` (and ``api_key``) of a server, or an already-built ``client``; a client
    passed in is never closed by the store.

    Args:
        collection: the collection name, normally ``collection_name(embedder_id, dim)``.
        dim: the vector dimension of the collection.
        url: the server's REST URL, e.g. ``http://qdrant:6333``.
        api_key: the server's API key, if it needs one.
        client: an ``AsyncQdrantClient`` to use instead of building one.
        timeout: seconds allowed to a hot-path call (search, upsert, delete, count).
        maintenance_timeout: seconds allowed to ``open`` and ``delete_expired``.
        prefer_grpc: talk gRPC (port 6334) rather than REST to a server built from ``url``.
        distribution: shards and replicas of the collection when this store creates it.
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
        timeout: float = 0.5,
        maintenance_timeout: float = 10.0,
        prefer_grpc: bool = False,
        distribution: Distribution | None = None,
    ) -> None:
        self.collection = collection
        self.dim = dim
        self.timeout = timeout
        self.maintenance_timeout = maintenance_timeout
        self._db = QdrantCollection(
            collection=collection,
            dim=dim,
            url=url,
            api_key=api_key,
            client=client,
            seconds=max(timeout, maintenance_timeout),
            prefer_grpc=prefer_grpc,
            distribution=distribution,
        )
        self._client = self._db.client

    async def _call(self, op: str, call: Coroutine[Any, Any, _T], seconds: float) -> _T:
        return await self._db.call(op, call, seconds)

    async def open(self) -> None:
        """Create the collection and its payload indexes when missing (idempotent; a concurrent
        creation by another gateway is tolerated)."""
        await self._db.open(_index_schemas(), self.maintenance_timeout)

    async def upsert(self, points: list[VectorPoint]) -> None:
        """Insert or replace points (by entry id); returns once the server applied them."""
        if not points:
            return
        structs = [
            models.PointStruct(id=point_id(p.entry_id), vector=p.vector, payload=stored_payload(p))
            for p in points
        ]
        await self._call(
            "upsert",
            self._client.upsert(self.collection, points=structs, wait=True),
            self.timeout,
        )

    async def search(
        self,
        vector: list[float],
        scope: Scope,
        *,
        now: float,
        limit: int = 1,
        created_after: float | None = None,
    ) -> list[ScoredPoint]:
        """Nearest points in ``scope`` with ``expires_at > now`` (and ``created_at >=
        created_after`` when given), best first; the filter runs inside the search."""
        response = await self._call(
            "search",
            self._client.query_points(
                self.collection,
                query=vector,
                query_filter=search_filter(scope, now, created_after),
                limit=limit,
                with_payload=True,
            ),
            self.timeout,
        )
        return _scored(response.points)

    async def neighbours(
        self, vector: list[float], *, match: dict[str, str], now: float, limit: int
    ) -> list[ScoredPoint]:
        """Nearest unexpired points matching some scope fields (admin use)."""
        must: list[models.Condition] = [
            models.FieldCondition(key=name, match=models.MatchValue(value=value))
            for name, value in match.items()
        ]
        must.append(models.FieldCondition(key="expires_at", range=models.Range(gt=now)))
        response = await self._call(
            "search",
            self._client.query_points(
                self.collection,
                query=vector,
                query_filter=models.Filter(must=must),
                limit=limit,
                with_payload=True,
            ),
            self.maintenance_timeout,
        )
        return _scored(response.points)

    async def delete(self, entry_ids: list[str]) -> None:
        """Remove points by entry id; missing ids are ignored."""
        if not entry_ids:
            return
        selector = models.PointIdsList(points=[point_id(entry_id) for entry_id in entry_ids])
        await self._call(
            "delete",
            self._client.delete(self.collection, points_selector=selector, wait=True),
            self.timeout,
        )

    async def delete_expired(self, now: float) -> int:
        """Remove every point with ``expires_at <= now``; returns how many were removed (counted
        with the same filter just before the delete)."""
        return await self._call("delete_expired", self._sweep(now), self.maintenance_timeout)

    async def _sweep(self, now: float) -> int:
        flt = expired_filter(now)
        counted = await self._client.count(self.collection, count_filter=flt, exact=True)
        if counted.count:
            await self._client.delete(
                self.collection, points_selector=models.FilterSelector(filter=flt), wait=True
            )
        return counted.count

    async def delete_sourced(self, tenant: str, sources: list[str]) -> list[str]:
        """Remove the tenant's points built from any of ``sources``; returns their entry ids."""
        if not sources:
            return []
        return await self._call(
            "delete_sourced", self._delete_sourced(tenant, sources), self.maintenance_timeout
        )

    async def _delete_sourced(self, tenant: str, sources: list[str]) -> list[str]:
        flt = models.Filter(
            must=[
                models.FieldCondition(key="tenant", match=models.MatchValue(value=tenant)),
                models.FieldCondition(key=SOURCES_FIELD, match=models.MatchAny(any=sources)),
            ]
        )
        found: list[str] = []
        offset: models.ExtendedPointId | None = None
        while True:
            page, offset = await self._client.scroll(
                self.collection, scroll_filter=flt, limit=1000, offset=offset, with_payload=True
            )
            found += [
                str(p.payload["entry_id"]) for p in page if p.payload and "entry_id" in p.payload
            ]
            if offset is None:
                break
        if found:
            await self._client.delete(
                self.collection, points_selector=models.FilterSelector(filter=flt), wait=True
            )
        return found

    async def count(self) -> int:
        """How many points the collection holds (expired ones not yet swept included)."""
        result = await self._call(
            "count", self._client.count(self.collection, exact=True), self.timeout
        )
        return result.count

    async def close(self) -> None:
        """Close the client if the store built it (idempotent); the store is unusable after."""
        await self._db.close()


def _scored(points: list[models.ScoredPoint]) -> list[ScoredPoint]:
    """Hits that carry an entry id, best first, the scope key stripped from the payload."""
    hits: list[ScoredPoint] = []
    for hit in points:
        payload = hit.payload
        if payload is not None and "entry_id" in payload:
            payload.pop(SCOPE_KEY_FIELD, None)
            hits.append(ScoredPoint(str(payload["entry_id"]), hit.score, payload))
    return hits
