"""The embedded backend: a Qdrant Edge shard on local disk (the default).

One shard per collection lives under ``data_dir / "qdrant-edge" / collection``. The Edge API is
synchronous and CPU-bound, so every call runs on a single worker thread owned by the collection:
calls are serialised (the shard is only ever touched from that thread), which also makes a
count-then-delete or a scroll-then-delete exact. Searches release the GIL inside the engine, so
the event loop keeps running while one is in flight; updates do not (an upsert of one point holds
it for microseconds, a batch of 2,000 for ~40 ms), and ``optimize()`` holds it for its whole run
(minutes at 100k points): keep it out of a serving process.

Updates go through the shard's write-ahead log, so an acknowledged write survives a crash of the
process; ``close()`` flushes the segments as well, so a clean restart need not replay the log.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import qdrant_edge as qe

from deja.diskspace import DiskSpace
from deja.errors import VectorStoreError
from deja.vectors.collection import SPARSE_VECTOR, Hit, Indexes, IndexKind, Point, Sparse
from deja.vectors.filters import Condition, Filter, Match, MatchAny

log = logging.getLogger("deja.vectors")
_T = TypeVar("_T")
#: Points per scroll page.
SCROLL_PAGE = 1000

_SCHEMAS: dict[IndexKind, qe.PayloadSchemaType | qe.KeywordIndexParams] = {
    "keyword": qe.PayloadSchemaType.Keyword,
    "tenant": qe.KeywordIndexParams(is_tenant=True),
    "integer": qe.PayloadSchemaType.Integer,
    "float": qe.PayloadSchemaType.Float,
}


def _condition(c: Condition) -> qe.FieldCondition:
    if isinstance(c, Match):
        return qe.FieldCondition(key=c.key, match=qe.MatchValue(c.value))
    if isinstance(c, MatchAny):
        return qe.FieldCondition(key=c.key, match=qe.MatchAny(list(c.values)))
    return qe.FieldCondition(key=c.key, range=qe.RangeFloat(gt=c.gt, gte=c.gte, lt=c.lt, lte=c.lte))


def edge_filter(where: Filter | None) -> qe.Filter | None:
    """The filter builder's conditions as an Edge filter (None selects every point)."""
    if where is None:
        return None
    return qe.Filter(must=[_condition(c) for c in where.must])


class EdgeCollection:
    """``Collection`` on an embedded Qdrant Edge shard (cosine distance).

    Args:
        data_dir: deja's data directory; the shard lives in ``data_dir/qdrant-edge/<collection>``.
        collection: the collection name.
        dim: the vector dimension; loading a shard created with another dimension fails.
        indexes: payload field → index kind, created when missing.
        search_threads: the engine's per-segment search pool (``None``: one per CPU). One is
            enough for the few segments of a cache and leaves the other cores to the gateway.
        space: the data disk's reserve, checked on the collection's thread before every upsert:
            the engine writes through mmap, where a full disk is a SIGBUS, not an exception.
        sparse: also keep the sparse vector ``SPARSE_VECTOR`` (IDF modifier). A shard created
            without it is loaded dense-only (``self.sparse`` False, one warning): Edge cannot
            add a vector to existing segments.
    """

    name = "qdrant-edge"
    shared = False

    def __init__(
        self,
        data_dir: str | Path,
        *,
        collection: str,
        dim: int,
        indexes: Indexes,
        search_threads: int | None = 1,
        space: DiskSpace | None = None,
        sparse: bool = False,
    ) -> None:
        if dim <= 0:
            raise ValueError(f"dim must be positive, got {dim}")
        self.collection = collection
        self.dim = dim
        self.path = Path(data_dir) / "qdrant-edge" / collection
        self._indexes = indexes
        self._search_threads = search_threads
        self.space = space
        self._want_sparse = sparse
        self.sparse = False
        self._executor: ThreadPoolExecutor | None = None
        self._shard: qe.EdgeShard | None = None  # touched only on the executor thread
        self._open_lock = asyncio.Lock()

    # --- the shard and its thread ---------------------------------------------------------------
    def _config(self, sparse: bool) -> qe.EdgeConfig:
        lexical = {SPARSE_VECTOR: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)}
        return qe.EdgeConfig(
            vectors=qe.EdgeVectorParams(size=self.dim, distance=qe.Distance.Cosine),
            sparse_vectors=lexical if sparse else None,
            max_search_threads=self._search_threads,
        )

    def _load(self) -> qe.EdgeShard:
        """Load or create the shard, with the sparse vector when asked and possible."""
        if not (self.path / "edge_config.json").exists():
            self.sparse = self._want_sparse
            return qe.EdgeShard.create(str(self.path), self._config(self.sparse))
        if self._want_sparse:
            try:
                shard = qe.EdgeShard.load(str(self.path), self._config(True))
            except Exception as exc:  # the engine's only error type: incompatible segments
                if "incompatible" not in str(exc).lower():
                    raise
                log.warning(
                    "%s predates sparse vectors: dense-only retrieval (re-create it to get "
                    "hybrid search)",
                    self.path,
                )
            else:
                self.sparse = True
                return shard
        self.sparse = False
        return qe.EdgeShard.load(str(self.path), self._config(False))

    def _on_shard(self, fn: Callable[[qe.EdgeShard], _T], grows: bool = False) -> _T:
        shard = self._shard
        if shard is None:
            raise VectorStoreError(f"qdrant-edge collection {self.collection!r} is closed")
        if grows and self.space is not None:
            self.space.check(f"points of {self.collection!r}")
        return fn(shard)

    async def _run(self, op: str, fn: Callable[[qe.EdgeShard], _T], *, grows: bool = False) -> _T:
        """Hop to the collection's thread, run ``fn`` on the shard, map any failure (a write
        that ``grows`` the shard is refused with ``DiskFullError`` below the disk reserve)."""
        executor = self._executor
        if executor is None:
            raise VectorStoreError(f"qdrant-edge collection {self.collection!r} is not open")
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(executor, self._on_shard, fn, grows)
        except VectorStoreError:
            raise
        except Exception as exc:
            raise VectorStoreError(
                f"qdrant-edge {op} on {self.collection!r} failed: {exc}"
            ) from exc

    def _open_sync(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        shard = self._load()
        try:
            existing = shard.info().payload_schema
            for name, kind in self._indexes.items():
                if name not in existing:
                    shard.update(qe.UpdateOperation.create_field_index(name, _SCHEMAS[kind]))
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
        executor, self._executor = self._executor, None
        if executor is None:
            return
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(executor, self._close_sync)
        except Exception as exc:
            raise VectorStoreError(
                f"qdrant-edge close of {self.collection!r} failed: {exc}"
            ) from exc
        finally:
            executor.shutdown(wait=False)

    # --- Collection -----------------------------------------------------------------------------
    async def upsert(self, points: list[Point], *, maintenance: bool = False) -> None:
        if not points:
            return
        batch = [qe.Point(p.id, self._vector(p), p.payload) for p in points]
        await self._run(
            "upsert",
            lambda shard: shard.update(qe.UpdateOperation.upsert_points(batch)),
            grows=True,
        )

    async def search(
        self, vector: list[float], where: Filter | None, *, limit: int, maintenance: bool = False
    ) -> list[Hit]:
        request = qe.SearchRequest(
            query=qe.Query.Nearest(vector),
            limit=limit,
            filter=edge_filter(where),
            with_payload=True,
        )

        def search(shard: qe.EdgeShard) -> list[Hit]:
            return [Hit(h.score, h.payload, str(h.id)) for h in shard.search(request) if h.payload]

        return await self._run("search", search)

    def _vector(self, point: Point) -> qe.Vector:
        if not self.sparse or point.sparse is None:
            return point.vector
        return {"": point.vector, SPARSE_VECTOR: _edge_sparse(point.sparse)}

    async def search_sparse(
        self, sparse: Sparse, where: Filter | None, *, limit: int, with_vector: bool = False
    ) -> list[Hit]:
        if not self.sparse:
            raise VectorStoreError(
                f"qdrant-edge collection {self.collection!r} has no sparse vector"
            )
        request = qe.QueryRequest(
            limit=limit,
            query=qe.Query.Nearest(_edge_sparse(sparse), using=SPARSE_VECTOR),
            filter=edge_filter(where),
            with_payload=True,
            with_vector=[""] if with_vector else False,
        )

        def search(shard: qe.EdgeShard) -> list[Hit]:
            return [
                Hit(h.score, h.payload, str(h.id), _dense(h.vector))
                for h in shard.query(request)
                if h.payload
            ]

        return await self._run("search", search)

    async def vectors(self, where: Filter) -> list[list[float]]:
        flt = edge_filter(where)

        def read(shard: qe.EdgeShard) -> list[list[float]]:
            records = _records(shard, flt, with_payload=False, with_vector=[""])
            return [v for r in records if (v := _dense(r.vector)) is not None]

        return await self._run("scroll", read)

    async def delete_ids(self, ids: list[str]) -> None:
        if not ids:
            return
        points: list[qe.PointId] = list(ids)
        await self._run(
            "delete", lambda shard: shard.update(qe.UpdateOperation.delete_points(points))
        )

    async def delete(self, where: Filter) -> int:
        flt = edge_filter(where)
        assert flt is not None

        def remove(shard: qe.EdgeShard) -> int:
            removed = shard.count(qe.CountRequest(exact=True, filter=flt))
            if removed:
                shard.update(qe.UpdateOperation.delete_points_by_filter(flt))
            return removed

        return await self._run("delete", remove)

    async def take(self, where: Filter, field: str) -> list[str]:
        flt = edge_filter(where)
        assert flt is not None

        def take(shard: qe.EdgeShard) -> list[str]:
            found = [str(p[field]) for p in _scroll(shard, flt, None) if field in p]
            if found:
                shard.update(qe.UpdateOperation.delete_points_by_filter(flt))
            return found

        return await self._run("delete", take)

    async def scroll(
        self, where: Filter | None, *, leave_out: tuple[str, ...] = ()
    ) -> list[dict[str, Any]]:
        flt = edge_filter(where)
        selector = qe.PayloadSelector.Exclude(list(leave_out)) if leave_out else None
        return await self._run("scroll", lambda shard: _scroll(shard, flt, selector))

    async def facet(self, key: str, *, limit: int) -> dict[str, int]:
        request = qe.FacetRequest(key, limit=limit, exact=True)
        response = await self._run("facet", lambda shard: shard.facet(request))
        # Edge keeps a value whose points were all deleted, with a count of 0.
        return {str(hit.value): hit.count for hit in response.hits if hit.count > 0}

    async def count(self, where: Filter | None = None, *, maintenance: bool = False) -> int:
        request = qe.CountRequest(exact=True, filter=edge_filter(where))
        return await self._run("count", lambda shard: shard.count(request))

    async def optimize(self) -> bool:
        """Run the segment optimizers (vacuum deleted points, build the HNSW index) until done.

        Maintenance, never while serving: it takes seconds to minutes on a large shard (~150 s
        for 100k 384-dim points on 2 cores), every other call waits behind it, and the engine
        holds the GIL throughout, which freezes the whole process (event loop included). Edge
        runs no optimizer on its own: without this call deleted points are never vacuumed and
        searches stay exact scans of the filtered points. Returns whether anything changed."""
        return await self._run("optimize", lambda shard: shard.optimize())


def _scroll(
    shard: qe.EdgeShard, flt: qe.Filter | None, selector: qe.PayloadSelector | None
) -> list[dict[str, Any]]:
    """Every matching point's payload (executor thread)."""
    records = _records(shard, flt, with_payload=selector if selector is not None else True)
    return [r.payload for r in records if r.payload is not None]


def _records(shard: qe.EdgeShard, flt: qe.Filter | None, **selected: Any) -> list[qe.Record]:
    """Every matching point, page by page, with what ``selected`` asks for (``with_payload``,
    ``with_vector``) (executor thread)."""
    found: list[qe.Record] = []
    offset: qe.PointId | None = None
    while True:
        records, offset = shard.scroll(
            qe.ScrollRequest(offset=offset, limit=SCROLL_PAGE, filter=flt, **selected)
        )
        found.extend(records)
        if offset is None:
            return found


def _edge_sparse(sparse: Sparse) -> qe.SparseVector:
    return qe.SparseVector(list(sparse.indices), list(sparse.values))


def _dense(vector: qe.Vector | None) -> list[float] | None:
    """The dense (unnamed) vector of a returned point, if it came back."""
    found: object = vector.get("") if isinstance(vector, dict) else vector
    if isinstance(found, list) and found and isinstance(found[0], float):
        return [float(x) for x in found]
    return None
