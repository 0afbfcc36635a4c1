"""The embedded vector store: a Qdrant Edge shard on local disk (the default backend).

One shard per collection lives under ``data_dir / "qdrant-edge" / collection``. The Edge API is
synchronous and CPU-bound, so every call runs on a single worker thread owned by the store: calls
are serialised (the shard is only ever touched from that thread). Searches release the GIL
inside the engine, so the event loop keeps running while one is in flight; updates do not (an
upsert of one point holds it for microseconds, a batch of 2,000 for ~40 ms), and ``optimize()``
holds it for its whole run (minutes at 100k points): keep it out of a serving process.

Scope and lifetime are filtered inside the search by a Qdrant filter backed by payload indexes
(keyword on the scope fields, float on ``expires_at``/``created_at``). Each point also carries
``scope_key``, all scope fields in one keyword (an injective encoding, so matching it is matching
every scope field). The search filters on it rather than on the five fields: Qdrant's planner
drives a filtered search from its single most selective condition and checks every other
condition point by point, and no one scope field is selective on its own (a tenant holds many
models and contexts); the compound key makes the candidate set exactly the scope, and dropping
the redundant per-field checks halves the cost again (~0.4 ms instead of ~1.5 ms at 100k points).
The per-field indexes remain for maintenance queries (e.g. everything of one tenant).

Updates go through the shard's write-ahead log, so an acknowledged write survives a crash of the
process; ``close()`` flushes the segments as well, so a clean restart need not replay the log.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import qdrant_edge as qe

from deja.diskspace import DiskSpace
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

_T = TypeVar("_T")
#: Payload field → the index it gets.
IndexSchemas = dict[str, qe.PayloadSchemaType | qe.KeywordIndexParams | qe.IntegerIndexParams]


def _index_schemas() -> IndexSchemas:
    schemas: IndexSchemas = {
        name: qe.PayloadSchemaType.Keyword for name in (SCOPE_KEY_FIELD, *SCOPE_FIELDS)
    }
    # The tenant is the coarsest partition of the data: let the optimizer co-locate by it.
    schemas["tenant"] = qe.KeywordIndexParams(is_tenant=True)
    schemas[SOURCES_FIELD] = qe.PayloadSchemaType.Keyword
    for name in FLOAT_PAYLOAD_FIELDS:
        schemas[name] = qe.PayloadSchemaType.Float
    return schemas


def search_filter(scope: Scope, now: float, created_after: float | None) -> qe.Filter:
    """The Edge filter of a lookup: the scope key matches (so every scope field does),
    ``expires_at > now`` and, when given, ``created_at >= created_after``."""
    must: list[qe.ConditionType] = [
        qe.FieldCondition(key=SCOPE_KEY_FIELD, match=qe.MatchValue(scope_key(scope))),
        qe.FieldCondition(key="expires_at", range=qe.RangeFloat(gt=now)),
    ]
    if created_after is not None:
        must.append(qe.FieldCondition(key="created_at", range=qe.RangeFloat(gte=created_after)))
    return qe.Filter(must=must)


def expired_filter(now: float) -> qe.Filter:
    """Points whose lifetime ended: ``expires_at <= now``."""
    return qe.Filter(must=[qe.FieldCondition(key="expires_at", range=qe.RangeFloat(lte=now))])


class EdgeShardHost:
    """One Qdrant Edge shard on local disk and the single thread that touches it.

    The plumbing every Edge-backed store shares (the cache's vectors, the corpora's chunks):
    create or load the shard with its payload indexes, run each call on the host's own worker
    thread (calls are serialised and the event loop never waits on the engine), map any engine
    failure to ``VectorStoreError``, flush and close.

    Args:
        path: the shard's folder (created when missing).
        dim: the vector dimension; loading a shard created with another dimension fails.
        indexes: payload field → index schema, created when missing.
        search_threads: the engine's per-segment search pool (``None``: one per CPU).
        space: the data disk's reserve, checked on the host's thread before every upsert
            (``grows=True``): the engine writes through mmap, where a full disk is a SIGBUS.
    """

    def __init__(
        self,
        path: Path,
        *,
        dim: int,
        indexes: IndexSchemas,
        search_threads: int | None = 1,
        space: DiskSpace | None = None,
    ) -> None:
        if dim <= 0:
            raise ValueError(f"dim must be positive, got {dim}")
        self.path = path
        self.dim = dim
        self._indexes = indexes
        self._search_threads = search_threads
        self.space = space
        self._executor: ThreadPoolExecutor | None = None
        self._shard: qe.EdgeShard | None = None  # touched only on the executor thread
        self._open_lock = asyncio.Lock()

    @property
    def label(self) -> str:
        """The collection's name (the shard folder's)."""
        return self.path.name

    def _config(self) -> qe.EdgeConfig:
        return qe.EdgeConfig(
            vectors=qe.EdgeVectorParams(size=self.dim, distance=qe.Distance.Cosine),
            max_search_threads=self._search_threads,
        )

    def _on_shard(self, fn: Callable[[qe.EdgeShard], _T], grows: bool = False) -> _T:
        """Run ``fn`` on the open shard (executor thread); one that ``grows`` it only while
        the disk is above its reserve."""
        shard = self._shard
        if shard is None:
            raise VectorStoreError(f"qdrant-edge collection {self.label!r} is closed")
        if grows and self.space is not None:
            self.space.check(f"points of {self.label!r}")
        return fn(shard)

    async def run(self, op: str, fn: Callable[[qe.EdgeShard], _T], *, grows: bool = False) -> _T:
        """Hop to the host's thread, run ``fn`` on the shard, map any failure (a write that
        ``grows`` the shard is refused with ``DiskFullError`` below the disk reserve)."""
        executor = self._executor
        if executor is None:
            raise VectorStoreError(f"qdrant-edge collection {self.label!r} is not open")
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(executor, self._on_shard, fn, grows)
        except VectorStoreError:
            raise
        except Exception as exc:
            raise VectorStoreError(f"qdrant-edge {op} on {self.label!r} failed: {exc}") from exc

    def _open_sync(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        if (self.path / "edge_config.json").exists():
            shard = qe.EdgeShard.load(str(self.path), self._config())
        else:
            shard = qe.EdgeShard.create(str(self.path), self._config())
        try:
            existing = shard.info().payload_schema
            for name, schema in self._indexes.items():
                if name not in existing:
                    shard.update(qe.UpdateOperation.create_field_index(name, schema))
        except BaseException:
            shard.close()
            raise
        self._shard = shard

    def _close_sync(self) -> None:
        shard, self._shard = self._shard, None
        if shard is not None:
            try:
                shard.flush()
            finally:
                shard.close()

    async def open(self) -> None:
        """Create the shard and its payload indexes when missing, else load it (idempotent)."""
        async with self._open_lock:
            if self._executor is not None:
                return
            executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="qdrant-edge")
            loop = asyncio.get_running_loop()
            try:
                await loop.run_in_executor(executor, self._open_sync)
            except Exception as exc:
                executor.shutdown(wait=False)
                raise VectorStoreError(
                    f"cannot open qdrant-edge shard at {self.path}: {exc}"
                ) from exc
            self._executor = executor

    async def close(self) -> None:
        """Flush the segments to disk and release the shard and its thread (idempotent)."""
        executor, self._executor = self._executor, None
        if executor is None:
            return
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(executor, self._close_sync)
        except Exception as exc:
            raise VectorStoreError(f"qdrant-edge close of {self.label!r} failed: {exc}") from exc
        finally:
            executor.shutdown(wait=False)


class EdgeVectorStore:
    """``VectorStore`` on an embedded Qdrant Edge shard (cosine distance).

    Args:
        data_dir: deja's data directory; the shard lives in ``data_dir/qdrant-edge/<collection>``.
        collection: the collection name, normally ``collection_name(embedder_id, dim)``.
        dim: the vector dimension; opening a shard created with another dimension fails.
        search_threads: size of the engine's own per-segment search pool (``None``: one per
            CPU). One is enough for the few segments of a cache and leaves the other cores to
            the gateway.
    """

    name = "qdrant-edge"

    def __init__(
        self,
        data_dir: str | Path,
        *,
        collection: str,
        dim: int,
        search_threads: int | None = 1,
        space: DiskSpace | None = None,
    ) -> None:
        self.collection = collection
        self.dim = dim
        self.path = Path(data_dir) / "qdrant-edge" / collection
        self._host = EdgeShardHost(
            self.path,
            dim=dim,
            indexes=_index_schemas(),
            search_threads=search_threads,
            space=space,
        )

    async def _run(self, op: str, fn: Callable[[qe.EdgeShard], _T], *, grows: bool = False) -> _T:
        return await self._host.run(op, fn, grows=grows)

    # --- VectorStore ----------------------------------------------------------------------------
    async def open(self) -> None:
        """Create the shard and its payload indexes when missing, else load it (idempotent)."""
        await self._host.open()

    async def upsert(self, points: list[VectorPoint]) -> None:
        """Insert or replace points (by entry id), as one update."""
        if not points:
            return

        def upsert(shard: qe.EdgeShard) -> None:
            batch = [qe.Point(point_id(p.entry_id), p.vector, stored_payload(p)) for p in points]
            shard.update(qe.UpdateOperation.upsert_points(batch))

        await self._run("upsert", upsert, grows=True)

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
        request = qe.SearchRequest(
            query=qe.Query.Nearest(vector),
            limit=limit,
            filter=search_filter(scope, now, created_after),
            with_payload=True,
        )
        return await self._search(request)

    async def neighbours(
        self, vector: list[float], *, match: dict[str, str], now: float, limit: int
    ) -> list[ScoredPoint]:
        """Nearest unexpired points matching some scope fields (admin use)."""
        must: list[qe.ConditionType] = [
            qe.FieldCondition(key=name, match=qe.MatchValue(value)) for name, value in match.items()
        ]
        must.append(qe.FieldCondition(key="expires_at", range=qe.RangeFloat(gt=now)))
        request = qe.SearchRequest(
            query=qe.Query.Nearest(vector),
            limit=limit,
            filter=qe.Filter(must=must),
            with_payload=True,
        )
        return await self._search(request)

    async def _search(self, request: qe.SearchRequest) -> list[ScoredPoint]:
        hits = await self._run("search", functools.partial(_search, request=request))
        return [
            ScoredPoint(entry_id=str(payload["entry_id"]), score=score, payload=payload)
            for score, payload in hits
        ]

    async def delete(self, entry_ids: list[str]) -> None:
        """Remove points by entry id; missing ids are ignored."""
        if not entry_ids:
            return
        ids: list[qe.PointId] = [point_id(entry_id) for entry_id in entry_ids]
        await self._run("delete", lambda shard: shard.update(qe.UpdateOperation.delete_points(ids)))

    async def delete_expired(self, now: float) -> int:
        """Remove every point with ``expires_at <= now``; returns how many were removed.

        The count and the delete run back to back on the store's thread, which is the only
        writer of the shard, so the count is exact."""
        flt = expired_filter(now)

        def sweep(shard: qe.EdgeShard) -> int:
            removed = shard.count(qe.CountRequest(exact=True, filter=flt))
            if removed:
                shard.update(qe.UpdateOperation.delete_points_by_filter(flt))
            return removed

        return await self._run("delete_expired", sweep)

    async def delete_sourced(self, tenant: str, sources: list[str]) -> list[str]:
        """Remove the tenant's points built from any of ``sources``; returns their entry ids
        (found and deleted back to back on the store's single writer thread)."""
        if not sources:
            return []
        flt = qe.Filter(
            must=[
                qe.FieldCondition(key="tenant", match=qe.MatchValue(tenant)),
                qe.FieldCondition(key=SOURCES_FIELD, match=qe.MatchAny(sources)),
            ]
        )

        def remove(shard: qe.EdgeShard) -> list[str]:
            found: list[str] = []
            offset: qe.PointId | None = None
            while True:
                page, offset = shard.scroll(
                    qe.ScrollRequest(offset=offset, limit=1000, filter=flt, with_payload=True)
                )
                found += [
                    str(p.payload["entry_id"])
                    for p in page
                    if p.payload is not None and "entry_id" in p.payload
                ]
                if offset is None:
                    break
            if found:
                shard.update(qe.UpdateOperation.delete_points_by_filter(flt))
            return found

        return await self._run("delete_sourced", remove)

    async def count(self) -> int:
        """How many points the shard holds (expired ones not yet swept included)."""
        return await self._run("count", lambda shard: shard.count(qe.CountRequest(exact=True)))

    async def optimize(self) -> bool:
        """Run the segment optimizers (vacuum deleted points, build the HNSW index) until done.

        Maintenance, never while serving: it takes seconds to minutes on a large shard (~150 s
        for 100k 384-dim points on 2 cores), every other call of this store waits behind it, and
        the engine holds the GIL throughout, which freezes the whole process (event loop
        included). Edge runs no optimizer on its own: without this call deleted points are never
        vacuumed and searches stay exact scans of the scope. Returns whether anything changed."""
        return await self._run("optimize", lambda shard: shard.optimize())

    async def close(self) -> None:
        """Flush the segments to disk and release the shard and its thread (idempotent)."""
        await self._host.close()


def _search(
    shard: qe.EdgeShard, *, request: qe.SearchRequest
) -> list[tuple[float, dict[str, Any]]]:
    """The raw search (executor thread): ``(score, payload)`` of the hits that carry an entry
    id, best first, the scope key stripped from the payload."""
    hits: list[tuple[float, dict[str, Any]]] = []
    for hit in shard.search(request):
        payload = hit.payload
        if payload is not None and "entry_id" in payload:
            payload.pop(SCOPE_KEY_FIELD, None)
            hits.append((hit.score, payload))
    return hits
