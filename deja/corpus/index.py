"""The corpora's payload schema on the vector layer (``deja.vectors``): one point per chunk.

A point is one chunk: its vector and a payload naming the tenant, corpus, document, version
and position it belongs to, its text and heading path, the document's metadata and content
hash. The first chunk of each version (``index`` 0, the *head*) also carries what listing a
corpus needs: the chunk count, the source name, the format, the size and when it was ingested.

Every search filters by tenant and corpus inside the engine, on ``corpus_key`` (both as one
keyword, an injective encoding as the cache's ``scope_key``): the planner then starts from
exactly the corpus's points, and a tenant can never retrieve another tenant's chunks.

Point ids include the version, so a new version's chunks are written next to the old ones and
the old ones deleted afterwards (two calls, never a moment without the document). Edge runs no
optimizer on its own, so a search is an exact scan of the filtered corpus (``bench/corpus.py``
has the figures), and replaced chunks are deleted but not vacuumed until
``EdgeCollection.optimize``.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from deja.corpus.base import Chunk, RetrievedChunk
from deja.vectors.collection import Collection, Point, Schema
from deja.vectors.filters import Condition, Filter, Match, MatchAny, Range, all_of
from deja.vectors.hybrid import SearchMode, SparseEncoder, ranked_search

#: Payload key of the compound (tenant, corpus) keyword every search filters on.
CORPUS_KEY_FIELD = "corpus_key"
#: The corpora's schema: collections ``deja-corpus_<embedder>_<dim>``, their payload indexes
#: (an integer one on ``index``: 0 selects the heads), and the BM25 sparse vector, written
#: whatever ``rag_search`` says so that the search mode can change without a re-ingest.
CHUNKS = Schema(
    "deja-corpus",
    {
        CORPUS_KEY_FIELD: "keyword",
        "tenant": "tenant",
        "corpus": "keyword",
        "document": "keyword",
        "version": "integer",
        "index": "integer",
    },
    sparse=True,
)
CHUNK_INDEXES = CHUNKS.indexes
#: Most corpora a listing of every tenant's corpora returns.
MAX_CORPORA = 100_000


def corpus_key(tenant: str, corpus: str) -> str:
    return json.dumps([tenant, corpus], separators=(",", ":"))


def split_corpus_key(key: str) -> tuple[str, str]:
    """(tenant, corpus) back from a ``corpus_key``."""
    tenant, corpus = json.loads(key)
    return str(tenant), str(corpus)


def corpus_collection(embedder_id: str, dim: int) -> str:
    """The chunk collection of an embedder identity and dimension, separate from the cache's
    (``deja_…``): e.g. ``deja-corpus_all-minilm-l6-v2-dynint8_384``."""
    return CHUNKS.collection(embedder_id, dim)


def chunk_point_id(chunk: Chunk) -> str:
    """A UUID from (tenant, corpus, document, version, index): stable, so re-writing a chunk
    replaces it, and distinct across versions."""
    name = json.dumps(
        [chunk.tenant, chunk.corpus, chunk.document, chunk.version, chunk.index],
        separators=(",", ":"),
    )
    return str(uuid.UUID(bytes=hashlib.sha256(name.encode()).digest()[:16]))


@dataclass(frozen=True, slots=True)
class DocumentHead:
    """One version of a document, as a listing shows it."""

    tenant: str
    corpus: str
    document: str
    version: int
    chunks: int
    content_hash: str
    title: str = ""
    source: str = ""
    format: str = ""
    bytes: int = 0
    ingested_at: float = 0.0
    metadata: dict[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "document": self.document,
            "corpus": self.corpus,
            "version": self.version,
            "chunks": self.chunks,
            "title": self.title,
            "source": self.source,
            "format": self.format,
            "bytes": self.bytes,
            "content_hash": self.content_hash,
            "ingested_at": self.ingested_at,
            "metadata": self.metadata,
        }


@dataclass(frozen=True, slots=True)
class ChunkPoint:
    """One chunk to upsert, with its vector; ``head`` is set on the chunk of index 0."""

    chunk: Chunk
    vector: list[float]
    content_hash: str
    head: DocumentHead | None = None

    def payload(self) -> dict[str, Any]:
        c = self.chunk
        payload: dict[str, Any] = {
            CORPUS_KEY_FIELD: corpus_key(c.tenant, c.corpus),
            "tenant": c.tenant,
            "corpus": c.corpus,
            "document": c.document,
            "version": c.version,
            "index": c.index,
            "text": c.text,
            "title": c.title,
            "metadata": dict(c.metadata),
            "content_hash": self.content_hash,
        }
        if self.head is not None:
            h = self.head
            payload.update(
                chunks=h.chunks,
                document_title=h.title,
                source=h.source,
                format=h.format,
                bytes=h.bytes,
                ingested_at=h.ingested_at,
            )
        return payload


def chunk_of(payload: dict[str, Any]) -> Chunk:
    """The chunk a stored payload describes."""
    return Chunk(
        tenant=str(payload["tenant"]),
        corpus=str(payload["corpus"]),
        document=str(payload["document"]),
        version=int(payload["version"]),
        index=int(payload["index"]),
        text=str(payload.get("text", "")),
        title=str(payload.get("title", "")),
        metadata={str(k): str(v) for k, v in (payload.get("metadata") or {}).items()},
    )


def head_of(payload: dict[str, Any]) -> DocumentHead:
    """The document version a stored head payload describes."""
    return DocumentHead(
        tenant=str(payload["tenant"]),
        corpus=str(payload["corpus"]),
        document=str(payload["document"]),
        version=int(payload["version"]),
        chunks=int(payload.get("chunks", 0)),
        content_hash=str(payload.get("content_hash", "")),
        title=str(payload.get("document_title", "")),
        source=str(payload.get("source", "")),
        format=str(payload.get("format", "")),
        bytes=int(payload.get("bytes", 0)),
        ingested_at=float(payload.get("ingested_at", 0.0)),
        metadata={str(k): str(v) for k, v in (payload.get("metadata") or {}).items()},
    )


def retrieved(score: float, payload: dict[str, Any]) -> RetrievedChunk | None:
    """A search hit as a ``RetrievedChunk``; None for a point that is not a chunk."""
    if "document" not in payload or "index" not in payload:
        return None
    return RetrievedChunk(chunk_of(payload), score)


def matches(
    tenant: str | None, corpus: str | None = None, document: str | None = None
) -> list[Condition]:
    """The conditions selecting a tenant, one of its corpora, one of its documents. A corpus
    or document without its tenant is refused: corpus names are only unique within a tenant."""
    if tenant is None:
        if corpus is not None or document is not None:
            raise ValueError("a corpus or document needs its tenant")
        return []
    if corpus is None:
        if document is not None:
            raise ValueError("a document needs its corpus")
        return [Match("tenant", tenant)]
    found: list[Condition] = [Match(CORPUS_KEY_FIELD, corpus_key(tenant, corpus))]
    if document is not None:
        found.append(Match("document", document))
    return found


def _where(
    conditions: list[Condition], where: dict[str, str] | None = None, *, heads: bool = False
) -> Filter | None:
    """``conditions``, the metadata equalities of ``where``, and the heads only when asked."""
    meta = [Match(f"metadata.{key}", value) for key, value in (where or {}).items()]
    return all_of(*conditions, *meta, Match("index", 0) if heads else None)


class ChunkStore:
    """The corpora's store of chunks on one ``Collection`` (Edge or a Qdrant server: the same
    code): a dense vector per chunk and, when the collection has one, its BM25 sparse vector,
    searched dense, sparse or both fused (``deja.vectors.hybrid``). Searches are request-path
    calls (the retrieval budget); writes, deletes and listings are maintenance (an upsert
    carries many chunks). Raises ``deja.errors.VectorStoreError`` for any backend failure."""

    def __init__(self, collection: Collection, encoder: SparseEncoder | None = None) -> None:
        self.backend = collection
        self.encoder = encoder or SparseEncoder()
        self.name = collection.name
        self.collection = collection.collection
        #: True when other processes may change the store (a Qdrant server): the corpus set is
        #: then re-read periodically.
        self.shared = collection.shared

    async def open(self) -> None:
        """Create the collection and its payload indexes when missing (idempotent)."""
        await self.backend.open()

    async def upsert(self, points: list[ChunkPoint]) -> None:
        """Insert or replace points, all in one update."""
        lexical = self.backend.sparse
        batch = [
            Point(
                chunk_point_id(p.chunk),
                p.vector,
                p.payload(),
                self.encoder.document(p.chunk.text) if lexical else None,
            )
            for p in points
        ]
        await self.backend.upsert(batch, maintenance=True)

    async def delete_older(self, tenant: str, corpus: str, document: str, version: int) -> None:
        """Remove the document's chunks of every version below ``version``, in one update."""
        older = Filter((*matches(tenant, corpus, document), Range("version", lt=version)))
        await self.backend.delete(older)

    async def delete_document(self, tenant: str, corpus: str, document: str) -> None:
        """Remove every chunk of the document, all versions, in one update."""
        await self.backend.delete(Filter(tuple(matches(tenant, corpus, document))))

    async def search(
        self,
        vector: list[float],
        tenant: str,
        corpus: str,
        *,
        limit: int,
        where: dict[str, str] | None = None,
        query: str = "",
        mode: SearchMode = "dense",
    ) -> list[RetrievedChunk]:
        """The best chunks of ``tenant``'s ``corpus`` (whose metadata equals ``where`` when
        given) for the question ``query`` embedded as ``vector``, best first by ``mode``, each
        scored by its cosine to the question; every version present is searched."""
        flt = _where(matches(tenant, corpus), where)
        sparse = self.encoder.query(query) if query and mode != "dense" else None
        hits = await ranked_search(self.backend, vector, sparse, flt, limit=limit, mode=mode)
        found = (retrieved(hit.cosine, hit.payload) for hit in hits)
        return [r for r in found if r is not None]

    @property
    def hybrid(self) -> bool:
        """Whether the collection holds sparse vectors (False for one created before them)."""
        return self.backend.sparse

    async def vectors(self, tenant: str, corpus: str, document: str) -> list[list[float]]:
        """The dense vectors of every stored chunk of a document (before it is removed)."""
        return await self.backend.vectors(Filter(tuple(matches(tenant, corpus, document))))

    async def heads(
        self, tenant: str | None = None, corpus: str | None = None, document: str | None = None
    ) -> list[DocumentHead]:
        """The head of every stored version matching the given fields (all when None)."""
        flt = _where(matches(tenant, corpus, document), heads=True)
        return [head_of(p) for p in await self.backend.scroll(flt, leave_out=("text",))]

    async def heads_of(
        self, tenant: str, corpus: str, documents: list[str]
    ) -> dict[str, DocumentHead]:
        """The newest stored version of each of ``documents`` that has one, in one listing."""
        if not documents:
            return {}
        chosen = MatchAny("document", tuple(sorted(set(documents))))
        flt = _where([*matches(tenant, corpus), chosen], heads=True)
        newest: dict[str, DocumentHead] = {}
        for head in map(head_of, await self.backend.scroll(flt, leave_out=("text",))):
            if head.document not in newest or head.version > newest[head.document].version:
                newest[head.document] = head
        return newest

    async def corpus_keys(self) -> set[tuple[str, str]]:
        """Every (tenant, corpus) that holds at least one chunk."""
        counts = await self.backend.facet(CORPUS_KEY_FIELD, limit=MAX_CORPORA)
        return {split_corpus_key(key) for key in counts}

    async def count(self, tenant: str | None = None, corpus: str | None = None) -> int:
        """How many chunks are stored (of a tenant, of one of its corpora)."""
        return await self.backend.count(_where(matches(tenant, corpus)), maintenance=True)

    async def close(self) -> None:
        """Release what the store created (flush to disk for the embedded store)."""
        await self.backend.close()
