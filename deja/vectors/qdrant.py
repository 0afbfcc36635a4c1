"""The server backend: a collection on a Qdrant server, through
``qdrant_client.AsyncQdrantClient``.

Same contract as the embedded backend (``deja.vectors.edge``). Every call is bounded: the
request path's calls by ``timeout``, the ones a caller marks ``maintenance`` (bulk writes,
listings, sweeps) and ``open`` by ``maintenance_timeout``; a timeout or any client failure
becomes ``VectorStoreError``. Two calls that must go together (count then delete, scroll then
delete) run under one bound; unlike the embedded shard's single writer, another gateway may
write between them, so the count is the number counted just before.

Tests pass a client in qdrant-client's local mode (``location=":memory:"`` or ``path=...``),
which speaks the same API: no Qdrant server binary can be installed on the development
machines. Local mode ignores payload indexes (it filters by scanning).
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
from deja.vectors.collection import SPARSE_VECTOR, Hit, Indexes, IndexKind, Point, Sparse
from deja.vectors.filters import Condition, Filter, Match, MatchAny

log = logging.getLogger("deja.vectors")

_T = TypeVar("_T")
#: Points per scroll page.
SCROLL_PAGE = 1000

_SCHEMAS: dict[IndexKind, models.PayloadSchemaType | models.KeywordIndexParams] = {
    "keyword": models.PayloadSchemaType.KEYWORD,
    "tenant": models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True),
    "integer": models.PayloadSchemaType.INTEGER,
    "float": models.PayloadSchemaType.FLOAT,
}


def _condition(c: Condition) -> models.FieldCondition:
    if isinstance(c, Match):
        return models.FieldCondition(key=c.key, match=models.MatchValue(value=c.value))
    if isinstance(c, MatchAny):
        return models.FieldCondition(key=c.key, match=models.MatchAny(any=list(c.values)))
    return models.FieldCondition(
        key=c.key, range=models.Range(gt=c.gt, gte=c.gte, lt=c.lt, lte=c.lte)
    )


def qdrant_filter(where: Filter | None) -> models.Filter | None:
    """The filter builder's conditions as a qdrant-client filter (None selects every point)."""
    if where is None:
        return None
    must: list[models.Condition] = [_condition(c) for c in where.must]
    return models.Filter(must=must)


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


class QdrantCollection:
    """``Collection`` on a Qdrant server (or qdrant-client's local mode), cosine distance.

    Pass either ``url`` (and ``api_key``) of a server, or an already-built ``client``; a client
    passed in is never closed here (one local-mode client can hold several collections).

    Args:
        collection: the collection name.
        dim: the vector dimension of the collection.
        indexes: payload field → index kind, created when missing.
        url: the server's REST URL, e.g. ``http://qdrant:6333``.
        api_key: the server's API key, if it needs one.
        client: an ``AsyncQdrantClient`` to use instead of building one.
        timeout: seconds allowed to a request-path call.
        maintenance_timeout: seconds allowed to ``open`` and to calls marked ``maintenance``.
        prefer_grpc: talk gRPC (port 6334) rather than REST to a server built from ``url``.
        sparse: also keep the sparse vector ``SPARSE_VECTOR`` (IDF modifier, computed by the
            server). A collection created without it is used dense-only (``self.sparse``
            False, one warning).
        distribution: shards and replicas of the collection when this creates it.
    """

    name = "qdrant"

    def __init__(
        self,
        *,
        collection: str,
        dim: int,
        indexes: Indexes,
        url: str | None = None,
        api_key: str | None = None,
        client: AsyncQdrantClient | None = None,
        timeout: float = 0.5,
        maintenance_timeout: float = 10.0,
        prefer_grpc: bool = False,
        sparse: bool = False,
        distribution: Distribution | None = None,
    ) -> None:
        if (url is None) == (client is None):
            raise ValueError("pass exactly one of url or client")
        if dim <= 0:
            raise ValueError(f"dim must be positive, got {dim}")
        self.collection = collection
        self.dim = dim
        self.timeout = timeout
        self.maintenance_timeout = maintenance_timeout
        self._indexes = indexes
        self._want_sparse = sparse
        self.sparse = False
        self.distribution = distribution or Distribution()
        #: A server is shared with other gateways; a client passed in (local mode) is not.
        self.shared = url is not None
        self.owns_client = client is None
        if client is None:
            client = AsyncQdrantClient(
                url=url,
                api_key=api_key,
                prefer_grpc=prefer_grpc,
                # qdrant-client takes whole seconds; the asyncio timeout is the real bound.
                timeout=max(1, math.ceil(max(timeout, maintenance_timeout))),
                check_compatibility=False,  # no version-probe thread per collection
            )
        self.client: AsyncQdrantClient = client
        self.closed = False

    async def _call(self, op: str, call: Coroutine[Any, Any, _T], maintenance: bool) -> _T:
        """Await ``call`` within its bound, mapping any failure (a closed collection refuses)."""
        if self.closed:
            call.close()
            raise VectorStoreError(f"qdrant collection {self.collection!r}: store is closed")
        seconds = self.maintenance_timeout if maintenance else self.timeout
        return await call_within(f"qdrant {op} on {self.collection!r}", call, seconds)

    async def open(self) -> None:
        await self._call("open", self._ensure(), maintenance=True)

    async def _ensure(self) -> None:
        """Create the collection (sharded and replicated as ``distribution`` says) and its
        indexes when missing; a concurrent creation by another gateway is tolerated, another
        dimension is refused, another distribution is warned about."""
        client, name, spread = self.client, self.collection, self.distribution
        if not await client.collection_exists(name):
            try:
                await client.create_collection(
                    name,
                    vectors_config=models.VectorParams(
                        size=self.dim, distance=models.Distance.COSINE
                    ),
                    sparse_vectors_config=(
                        {SPARSE_VECTOR: models.SparseVectorParams(modifier=models.Modifier.IDF)}
                        if self._want_sparse
                        else None
                    ),
                    shard_number=spread.shard_number,
                    replication_factor=spread.replication_factor,
                    write_consistency_factor=spread.write_consistency_factor,
                )
            except Exception:
                if not await client.collection_exists(name):
                    raise  # not a lost race with another creator
        info = await client.get_collection(name)
        params = info.config.params.vectors
        if isinstance(params, models.VectorParams) and params.size != self.dim:
            raise ValueError(f"collection has dimension {params.size}, expected {self.dim}")
        self.sparse = self._want_sparse and SPARSE_VECTOR in (
            info.config.params.sparse_vectors or {}
        )
        if self._want_sparse and not self.sparse:
            log.warning(
                "qdrant collection %r predates sparse vectors: dense-only retrieval (re-create "
                "it to get hybrid search)",
                name,
            )
        for mismatch in spread.mismatches(info.config.params):
            log.warning("qdrant collection %r was created before %s: kept as it is", name, mismatch)
        existing = info.payload_schema or {}
        with warnings.catch_warnings():
            # Local mode warns that payload indexes have no effect there: expected.
            warnings.simplefilter("ignore", UserWarning)
            for field, kind in self._indexes.items():
                if field not in existing:
                    await client.create_payload_index(name, field, field_schema=_SCHEMAS[kind])

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.owns_client:
            try:
                await self.client.close()
            except Exception as exc:
                raise VectorStoreError(f"qdrant client close failed: {exc}") from exc

    async def upsert(self, points: list[Point], *, maintenance: bool = False) -> None:
        if not points:
            return
        structs = [
            models.PointStruct(id=p.id, vector=self._vector(p), payload=p.payload) for p in points
        ]
        await self._call(
            "upsert", self.client.upsert(self.collection, points=structs, wait=True), maintenance
        )

    async def search(
        self, vector: list[float], where: Filter | None, *, limit: int, maintenance: bool = False
    ) -> list[Hit]:
        response = await self._call(
            "search",
            self.client.query_points(
                self.collection,
                query=vector,
                query_filter=qdrant_filter(where),
                limit=limit,
                with_payload=True,
            ),
            maintenance,
        )
        return [Hit(p.score, p.payload, str(p.id)) for p in response.points if p.payload]

    def _vector(self, point: Point) -> models.VectorStruct:
        if not self.sparse or point.sparse is None:
            return point.vector
        return {"": point.vector, SPARSE_VECTOR: _sparse(point.sparse)}

    async def search_sparse(
        self, sparse: Sparse, where: Filter | None, *, limit: int, with_vector: bool = False
    ) -> list[Hit]:
        if not self.sparse:
            raise VectorStoreError(f"qdrant collection {self.collection!r} has no sparse vector")
        response = await self._call(
            "search",
            self.client.query_points(
                self.collection,
                query=_sparse(sparse),
                using=SPARSE_VECTOR,
                query_filter=qdrant_filter(where),
                limit=limit,
                with_payload=True,
                with_vectors=[""] if with_vector else False,
            ),
            maintenance=False,
        )
        return [
            Hit(p.score, p.payload, str(p.id), _dense(p.vector))
            for p in response.points
            if p.payload
        ]

    async def vectors(self, where: Filter) -> list[list[float]]:
        return await self._call("scroll", self._vectors(qdrant_filter(where)), maintenance=True)

    async def _vectors(self, flt: models.Filter | None) -> list[list[float]]:
        records = await self._records(flt, with_payload=False, with_vectors=[""])
        return [v for r in records if (v := _dense(r.vector)) is not None]

    async def delete_ids(self, ids: list[str]) -> None:
        if not ids:
            return
        selector = models.PointIdsList(points=list(ids))
        await self._call(
            "delete",
            self.client.delete(self.collection, points_selector=selector, wait=True),
            maintenance=False,
        )

    async def _delete_matching(self, flt: models.Filter) -> None:
        selector = models.FilterSelector(filter=flt)
        await self.client.delete(self.collection, points_selector=selector, wait=True)

    async def delete(self, where: Filter) -> int:
        return await self._call("delete", self._count_and_delete(where), maintenance=True)

    async def _count_and_delete(self, where: Filter) -> int:
        flt = qdrant_filter(where)
        assert flt is not None
        counted = await self.client.count(self.collection, count_filter=flt, exact=True)
        if counted.count:
            await self._delete_matching(flt)
        return counted.count

    async def take(self, where: Filter, field: str) -> list[str]:
        return await self._call("delete", self._take(where, field), maintenance=True)

    async def _take(self, where: Filter, field: str) -> list[str]:
        flt = qdrant_filter(where)
        assert flt is not None
        found = [str(p[field]) for p in await self._scroll(flt, None) if field in p]
        if found:
            await self._delete_matching(flt)
        return found

    async def scroll(
        self, where: Filter | None, *, leave_out: tuple[str, ...] = ()
    ) -> list[dict[str, Any]]:
        selector = models.PayloadSelectorExclude(exclude=list(leave_out)) if leave_out else None
        return await self._call(
            "scroll", self._scroll(qdrant_filter(where), selector), maintenance=True
        )

    async def _scroll(
        self, flt: models.Filter | None, selector: models.PayloadSelectorExclude | None
    ) -> list[dict[str, Any]]:
        records = await self._records(flt, with_payload=selector if selector is not None else True)
        return [r.payload for r in records if r.payload is not None]

    async def _records(self, flt: models.Filter | None, **selected: Any) -> list[models.Record]:
        """Every matching point, page by page, with what ``selected`` asks for
        (``with_payload``, ``with_vectors``)."""
        found: list[models.Record] = []
        offset: models.ExtendedPointId | None = None
        while True:
            records, offset = await self.client.scroll(
                self.collection, scroll_filter=flt, limit=SCROLL_PAGE, offset=offset, **selected
            )
            found.extend(records)
            if offset is None:
                return found

    async def facet(self, key: str, *, limit: int) -> dict[str, int]:
        response = await self._call(
            "facet",
            self.client.facet(self.collection, key=key, limit=limit, exact=True),
            maintenance=True,
        )
        return {str(hit.value): hit.count for hit in response.hits if hit.count > 0}

    async def count(self, where: Filter | None = None, *, maintenance: bool = False) -> int:
        result = await self._call(
            "count",
            self.client.count(self.collection, count_filter=qdrant_filter(where), exact=True),
            maintenance,
        )
        return result.count


def _sparse(sparse: Sparse) -> models.SparseVector:
    return models.SparseVector(indices=list(sparse.indices), values=list(sparse.values))


def _dense(vector: Any) -> list[float] | None:
    """The dense (unnamed) vector of a returned point, if it came back."""
    if isinstance(vector, dict):
        vector = vector.get("")
    if isinstance(vector, list) and vector and isinstance(vector[0], float):
        return [float(x) for x in vector]
    return None
