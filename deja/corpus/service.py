"""``Corpora``: the tenants' document corpora, from ingestion to retrieval.

Ingesting a file: its fingerprint (the bytes, the metadata and the chunking recipe) is compared
with the stored version's; equal means nothing to do, so re-ingesting a tree is cheap. Otherwise
the file is parsed and chunked (in a thread: CPU work), the chunks are embedded in batches
(``Embedder.embed_batch`` in a thread, so request-path embeddings interleave between batches),
the new version's chunks are upserted in one call and the older versions' deleted in another:
a reader sees the old document or the new one, never a mix (``newest_only`` covers the moment
both are stored). A changed or removed document is then announced to ``on_change``, which drops
the cached answers built from the old version and returns how many it dropped.

Writes are serialised in this process by one lock, so versions are assigned without races.
Two gateways writing the same document of a shared Qdrant server at the same time could both
write the same next version; ingest from one place (the admin API of one gateway, the CLI).

Which (tenant, corpus) pairs exist is kept in memory (``has_corpus`` runs on every RAG
request): refreshed after every change here and, on a shared server, every
``corpus_refresh_seconds`` to see other gateways' changes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from deja.corpus.base import DocumentChange, RetrievedChunk, newest_only
from deja.corpus.chunking import (
    ChunkText,
    TokenCounter,
    chunk_document,
    recipe,
    tokenizer_counter,
    word_counter,
)
from deja.corpus.index import ChunkPoint, ChunkStore, DocumentHead
from deja.corpus.ingest import (
    Pending,
    check_file,
    chunk_points,
    embed_pending,
    fingerprint,
    groups,
    new_head,
    parse_all,
)
from deja.corpus.names import check_metadata
from deja.corpus.parsing import ParsedDocument
from deja.corpus.parsing.base import detect_format
from deja.corpus.relevance import Floor
from deja.corpus.reports import FileReport, IngestReport, Removal, SourceFile
from deja.corpus.worker import ParseLimits, parse_bounded, parse_isolated
from deja.embedding.base import Embedder
from deja.errors import (
    CorpusNotFoundError,
    DejaError,
    DocumentError,
    EmbedderError,
    RetrievalError,
    VectorStoreError,
)
from deja.observability.metrics import Metrics
from deja.vectors.hybrid import SearchMode

log = logging.getLogger("deja.corpus")

OnChange = Callable[[list[DocumentChange]], Awaitable[int]]
Progress = Callable[[FileReport], None]

#: Retrieval fetches ``limit + max(limit, OVER_FETCH)`` hits, so that dropping an older
#: version's chunks while a document is being replaced still leaves ``limit`` chunks.
OVER_FETCH = 4


@dataclass(frozen=True, slots=True)
class CorpusSettings:
    chunk_tokens: int = 200
    chunk_overlap: int = 32
    max_file_bytes: int = 20 * 1024 * 1024
    retrieval_timeout: float = 1.0
    embed_batch: int = 32
    embed_threads: int = 2
    #: Bounds of one document (issue 19): PDF pages, chunks, and the CPU seconds of the PDF
    #: parse, which runs in its own worker process (``deja.corpus.worker``).
    max_pages: int = 500
    max_chunks: int = 2000
    parse_cpu_seconds: int = 30
    #: How a question searches its corpus (``deja.vectors.hybrid``).
    search: SearchMode = "dense"
    #: Which retrieved chunks go into the prompt (``deja.corpus.relevance``).
    floor: Floor = field(default_factory=Floor)


def token_counter(model_id: str) -> tuple[str, TokenCounter]:
    """The embedder's own tokenizer when deja has it (the ONNX MiniLM's WordPiece), else the
    word approximation; with the name that goes into the chunking recipe."""
    from deja.embedding.onnx.encoder import DYNINT8_ID, INT8_ID, load_tokenizer

    if model_id in (DYNINT8_ID, INT8_ID):
        try:
            return "minilm-wordpiece", tokenizer_counter(load_tokenizer())
        except EmbedderError as exc:
            log.warning("counting chunk tokens by words: %s", exc.message)
    return "words", word_counter


class Corpora:
    """The corpora: what the request path reads (``has_corpus``, ``retrieve``, which raises
    ``deja.errors.RetrievalError`` when the store cannot answer), and ingestion, removal and
    listing."""

    def __init__(
        self,
        store: ChunkStore,
        embedder: Embedder,
        *,
        settings: CorpusSettings | None = None,
        counter: tuple[str, TokenCounter] | None = None,
        metrics: Metrics | None = None,
        on_change: OnChange | None = None,
        on_preview: OnChange | None = None,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.settings = settings or CorpusSettings()
        counter_name, self._count = counter or token_counter(embedder.model_id)
        s = self.settings
        self.recipe = recipe(s.chunk_tokens, s.chunk_overlap, counter_name)
        self.metrics = metrics
        #: Called with the changes after every update or removal; returns answers invalidated.
        self.on_change = on_change
        #: Called instead by a dry run: how many answers the changes would invalidate.
        self.on_preview = on_preview
        self._known: set[tuple[str, str]] = set()
        self._write = asyncio.Lock()

    # --- the corpus set -----------------------------------------------------------------------
    async def refresh(self) -> None:
        """Re-read which (tenant, corpus) pairs hold chunks."""
        self._known = await self.store.corpus_keys()

    async def refresh_forever(self, every: float) -> None:
        """Keep the corpus set current when other processes write to the store."""
        while True:
            await asyncio.sleep(every)
            try:
                await self.refresh()
            except VectorStoreError as exc:
                log.warning("corpus list not refreshed: %s", exc.message)

    def has_corpus(self, tenant: str, corpus: str) -> bool:
        return (tenant, corpus) in self._known

    def pairs(self) -> list[tuple[str, str]]:
        """Every (tenant, corpus) known, sorted."""
        return sorted(self._known)

    def corpora(self, tenant: str) -> list[str]:
        """The tenant's corpus names, sorted."""
        return sorted(c for t, c in self._known if t == tenant)

    async def _require(self, tenant: str, corpus: str) -> None:
        if not self.has_corpus(tenant, corpus):
            await self.refresh()  # another process may have created it
        if not self.has_corpus(tenant, corpus):
            raise CorpusNotFoundError(f"no corpus named {corpus!r}", param="corpus")

    # --- reading --------------------------------------------------------------------------------
    async def retrieve(
        self,
        tenant: str,
        corpus: str,
        vector: list[float],
        *,
        limit: int,
        where: dict[str, str] | None = None,
        query: str = "",
    ) -> list[RetrievedChunk]:
        """At most ``limit`` chunks of the tenant's corpus for the question ``query`` (embedded
        as ``vector``), best first by the search mode, one version per document, those under
        the relevance floor left out (possibly all). ``RetrievalError`` when the store fails or
        the retrieval timeout passes."""
        if limit < 1:
            return []
        if where:
            check_metadata(where, param="where")
        fetch = limit + max(limit, OVER_FETCH)
        seconds = self.settings.retrieval_timeout
        try:
            async with asyncio.timeout(seconds):
                hits = await self.store.search(
                    vector,
                    tenant,
                    corpus,
                    limit=fetch,
                    where=where,
                    query=query,
                    mode=self.settings.search,
                )
        except TimeoutError as exc:
            raise RetrievalError(
                f"retrieval from corpus {corpus!r} timed out after {seconds:g}s"
            ) from exc
        except VectorStoreError as exc:
            raise RetrievalError(f"retrieval from corpus {corpus!r} failed: {exc.message}") from exc
        return self.settings.floor.keep(newest_only(hits), limit)

    async def documents(self, tenant: str, corpus: str | None = None) -> list[DocumentHead]:
        """The newest version of each document of the tenant (of one corpus), sorted by corpus
        and id. ``CorpusNotFoundError`` for a corpus the tenant does not have."""
        if corpus is not None:
            await self._require(tenant, corpus)
        newest: dict[tuple[str, str], DocumentHead] = {}
        for head in await self.store.heads(tenant, corpus):
            key = (head.corpus, head.document)
            if key not in newest or head.version > newest[key].version:
                newest[key] = head
        return [newest[key] for key in sorted(newest)]

    async def _current(self, tenant: str, corpus: str, document: str) -> DocumentHead | None:
        heads = await self.store.heads(tenant, corpus, document)
        return max(heads, key=lambda h: h.version) if heads else None

    # --- writing --------------------------------------------------------------------------------
    async def ingest(
        self,
        tenant: str,
        corpus: str,
        files: list[SourceFile],
        progress: Progress | None = None,
        *,
        dry_run: bool = False,
    ) -> IngestReport:
        """Add or update each file as a document of ``tenant``'s ``corpus`` (created on first
        use), in groups of files embedded and written together (``deja.corpus.ingest``). A file
        that cannot be used is reported ``failed`` with its reason and the others go on; a
        failing store raises ``VectorStoreError``, an embedder that fails on every file of a
        group ``EmbedderError``. ``dry_run``: parse, chunk and embed, write nothing, and report
        what would change and how many cached answers it would invalidate."""
        report = IngestReport(tenant, corpus)
        for group in groups(files):
            async with self._write:
                lines = await self._ingest_group(tenant, corpus, group, dry_run)
            for line in lines:
                report.files.append(line)
                if not dry_run:
                    self._count_metric(corpus, line)
                if progress is not None:
                    progress(line)
        return report

    async def _ingest_group(
        self, tenant: str, corpus: str, files: list[SourceFile], dry_run: bool
    ) -> list[FileReport]:
        """One group: check, parse, embed across files, write once, announce; a line per file
        in the order given."""
        lines: dict[int, FileReport] = {}
        usable: dict[int, SourceFile] = {}
        for i, file in enumerate(files):
            bad = check_file(file)
            if bad is None:
                usable[i] = file
            else:
                lines[i] = bad
        current = await self.store.heads_of(tenant, corpus, [f.document for f in usable.values()])
        changed: dict[int, tuple[SourceFile, str]] = {}
        for i, file in usable.items():
            content_hash = fingerprint(file, self.recipe)
            head = current.get(file.document)
            if head is not None and head.content_hash == content_hash:
                lines[i] = FileReport(file.document, "unchanged", head.version, chunks=head.chunks)
            else:
                changed[i] = (file, content_hash)
        parsed = await parse_all(self._parse, [f for f, _ in changed.values()])
        pending: dict[int, Pending] = {}
        for (i, (file, content_hash)), result in zip(changed.items(), parsed, strict=True):
            if isinstance(result, DocumentError):
                lines[i] = FileReport(file.document, "failed", reason=result.message)
            else:
                pending[i] = Pending(file, content_hash, current.get(file.document), *result)
        s = self.settings
        refused = await embed_pending(
            self.embedder, list(pending.values()), s.embed_batch, s.embed_threads
        )
        for i, item in list(pending.items()):
            if item.file.document in refused:
                lines[i] = refused[item.file.document]
                del pending[i]
        lines.update(await self._write_group(tenant, corpus, pending, dry_run))
        return [lines[i] for i in range(len(files))]

    async def _write_group(
        self, tenant: str, corpus: str, pending: dict[int, Pending], dry_run: bool
    ) -> dict[int, FileReport]:
        """Upsert the group's new versions in one call, delete the versions they replace, then
        announce each change (an update's answers are found by provenance, per document)."""
        made: dict[int, tuple[Pending, DocumentHead]] = {}
        points: list[ChunkPoint] = []
        now = time.time()
        for i, item in pending.items():
            head = new_head(tenant, corpus, item, now)
            made[i] = (item, head)
            assert item.vectors is not None
            points.extend(chunk_points(head, item.pieces, item.vectors))
        if not dry_run and points:
            await self.store.upsert(points)
            for item, head in made.values():
                if item.current is not None:
                    await self.store.delete_older(tenant, corpus, head.document, head.version)
            self._known.add((tenant, corpus))
            if self.metrics is not None:
                self.metrics.corpus_chunks.labels(corpus).inc(len(points))
        lines: dict[int, FileReport] = {}
        for i, (item, head) in made.items():
            old = item.current.version if item.current is not None else None
            assert item.vectors is not None
            change = DocumentChange(tenant, corpus, head.document, old, head.version, item.vectors)
            invalidated, error = await self._announce([change], dry_run=dry_run)
            lines[i] = FileReport(
                head.document,
                "added" if old is None else "updated",
                head.version,
                old,
                chunks=head.chunks,
                invalidated=invalidated,
                invalidation_error=error,
                dry_run=dry_run,
            )
        return lines

    async def _parse(self, file: SourceFile) -> tuple[ParsedDocument, list[ChunkText]]:
        """Parse (a PDF in its own bounded worker process, anything else in a thread: their
        cost is linear in their size, a PDF's is not) and chunk, within the limits."""
        s = self.settings
        limits = ParseLimits(s.max_file_bytes, s.max_pages, s.parse_cpu_seconds)
        args = (file.document, file.data, file.content_type, limits)
        if detect_format(file.document, file.content_type) == "pdf":
            parsed = await parse_isolated(*args)
        else:
            parsed = await asyncio.to_thread(parse_bounded, *args)
        pieces = await asyncio.to_thread(
            chunk_document,
            parsed,
            max_tokens=s.chunk_tokens,
            overlap=s.chunk_overlap,
            count=self._count,
        )
        if len(pieces) > s.max_chunks:
            raise DocumentError(
                f"the document makes {len(pieces)} chunks, above the limit of {s.max_chunks} "
                "(corpus_max_chunks)"
            )
        return parsed, pieces

    async def remove(self, tenant: str, corpus: str, document: str) -> Removal | None:
        """Remove every chunk of a document; None when the corpus has no such document
        (``CorpusNotFoundError`` when the tenant has no such corpus)."""
        await self._require(tenant, corpus)
        async with self._write:
            current = await self._current(tenant, corpus, document)
            if current is None:
                return None
            # Its chunks' vectors, for the questions near them (``rag_invalidate_near``).
            vectors = await self.store.vectors(tenant, corpus, document)
            await self.store.delete_document(tenant, corpus, document)
            await self.refresh()
        if self.metrics is not None:
            self.metrics.corpus_documents.labels(corpus, "removed").inc()
        change = DocumentChange(tenant, corpus, document, current.version, None, vectors)
        invalidated, error = await self._announce([change])
        return Removal(change, current.chunks, invalidated, error)

    async def _announce(
        self, changes: list[DocumentChange], *, dry_run: bool = False
    ) -> tuple[int, str | None]:
        """Tell ``on_change`` (``on_preview`` for a dry run); (answers invalidated, or that
        would be, and the error if it failed)."""
        announce = self.on_preview if dry_run else self.on_change
        if announce is None:
            return 0, None
        try:
            invalidated = await announce(changes)
        except DejaError as exc:
            keys = ", ".join(c.key() for c in changes)
            log.error("answers built from %s NOT invalidated: %s", keys, exc.message)
            return 0, exc.message
        if self.metrics is not None and invalidated and not dry_run:
            for corpus in {c.corpus for c in changes}:
                self.metrics.corpus_invalidated.labels(corpus).inc(invalidated)
        return invalidated, None

    def _count_metric(self, corpus: str, line: FileReport) -> None:
        if self.metrics is not None:
            self.metrics.corpus_documents.labels(corpus, line.status).inc()
