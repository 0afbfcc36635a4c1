"""The embedded chunk store: a Qdrant Edge shard under ``data_dir/qdrant-edge/<collection>``,
next to (never inside) the semantic cache's. The shard and its thread come from the cache's
``EdgeShardHost``, so the same rules hold: every call runs on the store's one worker thread,
writes go through the shard's write-ahead log, ``close()`` flushes.

Edge runs no optimizer on its own, so a search is an exact scan of the filtered corpus (a
corpus of 100k chunks: see ``bench/corpus.py`` for the figures), and the chunks of replaced
versions are deleted but not vacuumed until ``EdgeVectorStore.optimize``-style maintenance.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import qdrant_edge as qe

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
from deja.diskspace import DiskSpace
from deja.vectorstore.edge import EdgeShardHost, IndexSchemas

#: Points per scroll page when listing heads.
SCROLL_PAGE = 1000


def _index_schemas() -> IndexSchemas:
    schemas: IndexSchemas = {name: qe.PayloadSchemaType.Keyword for name in KEYWORD_FIELDS}
    schemas["tenant"] = qe.KeywordIndexParams(is_tenant=True)
    for name in INTEGER_FIELDS:
        schemas[name] = qe.PayloadSchemaType.Integer
    return schemas


def _filter(
    fields: list[tuple[str, str]],
    *,
    where: dict[str, str] | None = None,
    heads: bool = False,
    below: int | None = None,
) -> qe.Filter | None:
    must: list[qe.ConditionType] = [
        qe.FieldCondition(key=name, match=qe.MatchValue(value)) for name, value in fields
    ]
    for key, value in (where or {}).items():
        must.append(qe.FieldCondition(key=f"metadata.{key}", match=qe.MatchValue(value)))
    if heads:
        must.append(qe.FieldCondition(key="index", match=qe.MatchValue(0)))
    if below is not None:
        must.append(qe.FieldCondition(key="version", range=qe.RangeFloat(lt=below)))
    return qe.Filter(must=must) if must else None


class EdgeChunkStore:
    """``ChunkStore`` on an embedded Qdrant Edge shard (cosine distance)."""

    name = "qdrant-edge"
    shared = False

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
        self.path = Path(data_dir) / "qdrant-edge" / collection
        self._host = EdgeShardHost(
            self.path,
            dim=dim,
            indexes=_index_schemas(),
            search_threads=search_threads,
            space=space,
        )

    async def open(self) -> None:
        await self._host.open()

    async def upsert(self, points: list[ChunkPoint]) -> None:
        if not points:
            return
        batch = [qe.Point(chunk_point_id(p.chunk), p.vector, p.payload()) for p in points]
        await self._host.run(
            "upsert",
            lambda shard: shard.update(qe.UpdateOperation.upsert_points(batch)),
            grows=True,
        )

    async def _delete(self, op: str, flt: qe.Filter | None) -> None:
        assert flt is not None
        await self._host.run(
            op, lambda shard: shard.update(qe.UpdateOperation.delete_points_by_filter(flt))
        )

    async def delete_older(self, tenant: str, corpus: str, document: str, version: int) -> None:
        await self._delete("delete", _filter(matches(tenant, corpus, document), below=version))

    async def delete_document(self, tenant: str, corpus: str, document: str) -> None:
        await self._delete("delete", _filter(matches(tenant, corpus, document)))

    async def search(
        self,
        vector: list[float],
        tenant: str,
        corpus: str,
        *,
        limit: int,
        where: dict[str, str] | None = None,
    ) -> list[RetrievedChunk]:
        request = qe.SearchRequest(
            query=qe.Query.Nearest(vector),
            limit=limit,
            filter=_filter(matches(tenant, corpus), where=where),
            with_payload=True,
        )
        hits = await self._host.run("search", lambda shard: shard.search(request))
        found = (retrieved(hit.score, hit.payload or {}) for hit in hits)
        return [r for r in found if r is not None]

    async def heads(
        self, tenant: str | None = None, corpus: str | None = None, document: str | None = None
    ) -> list[DocumentHead]:
        flt = _filter(matches(tenant, corpus, document), heads=True)
        payloads = await self._host.run("scroll", lambda shard: _scroll(shard, flt))
        return [head_of(p) for p in payloads]

    async def corpus_keys(self) -> set[tuple[str, str]]:
        request = qe.FacetRequest(KEYWORD_FIELDS[0], limit=MAX_CORPORA, exact=True)
        response = await self._host.run("facet", lambda shard: shard.facet(request))
        # Edge keeps a value whose points were all deleted, with a count of 0.

        return {split_corpus_key(str(hit.value)) for hit in response.hits if hit.count > 0}

    async def count(self, tenant: str | None = None, corpus: str | None = None) -> int:
        request = qe.CountRequest(exact=True, filter=_filter(matches(tenant, corpus)))
        return await self._host.run("count", lambda shard: shard.count(request))

    async def close(self) -> None:
        await self._host.close()


def _scroll(shard: qe.EdgeShard, flt: qe.Filter | None) -> list[dict[str, Any]]:
    """Every matching point's payload but its text (executor thread)."""
    payloads: list[dict[str, Any]] = []
    offset: qe.PointId | None = None
    while True:
        records, offset = shard.scroll(
            qe.ScrollRequest(
                offset=offset,
                limit=SCROLL_PAGE,
                filter=flt,
                with_payload=qe.PayloadSelector.Exclude(["text"]),
            )
        )
        payloads.extend(r.payload for r in records if r.payload is not None)
        if offset is None:
            return payloads
