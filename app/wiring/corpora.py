"""The corpora: the chunk store on the gateway's vector backend, ``Corpora`` on the process's
one embedder, the retrieval step, and the start-up preload."""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack
from pathlib import Path

from app.wiring.vectors import VectorBackend
from config.settings import Settings
from deja.corpus.files import collect, content_type_for, read_document
from deja.corpus.index import CHUNKS, ChunkStore
from deja.corpus.names import check_corpus_name
from deja.corpus.relevance import Floor
from deja.corpus.reports import FileReport, SourceFile
from deja.corpus.service import Corpora, CorpusSettings
from deja.embedding.base import Embedder
from deja.errors import DejaError, InvalidRequestError
from deja.observability.metrics import Metrics
from deja.vectors.hybrid import SparseEncoder
from middleware.retrieve import RetrievalPolicy, RetrieveStep

log = logging.getLogger("deja.corpus")


def corpus_settings(settings: Settings) -> CorpusSettings:
    return CorpusSettings(
        chunk_tokens=settings.corpus_chunk_tokens,
        chunk_overlap=settings.corpus_chunk_overlap,
        max_file_bytes=settings.corpus_max_file_bytes,
        retrieval_timeout=settings.rag_retrieval_timeout_seconds,
        embed_batch=settings.corpus_embed_batch,
        embed_threads=settings.corpus_embed_threads,
        max_pages=settings.corpus_max_pages,
        max_chunks=settings.corpus_max_chunks,
        parse_cpu_seconds=settings.corpus_parse_cpu_seconds,
        search=settings.rag_search,
        floor=Floor(settings.rag_min_score, settings.rag_score_margin),
    )


#: Seconds allowed to the chunk store's writes and listings (an upsert carries a whole
#: document's chunks) on a Qdrant server.
CHUNK_MAINTENANCE_SECONDS = 60.0


def chunk_store(settings: Settings, embedder: Embedder, vectors: VectorBackend) -> ChunkStore:
    """The chunks, in a collection apart from the cache's; searches bounded by the retrieval
    budget."""
    timeout = settings.rag_retrieval_timeout_seconds
    collection = vectors.collection(
        CHUNKS, embedder, timeout=timeout, maintenance_timeout=CHUNK_MAINTENANCE_SECONDS
    )
    return ChunkStore(collection, SparseEncoder(avg_len=0.75 * settings.corpus_chunk_tokens))


async def open_corpora(
    stack: AsyncExitStack,
    settings: Settings,
    embedder: Embedder | None,
    metrics: Metrics,
    vectors: VectorBackend,
) -> Corpora | None:
    """The corpora with their store open and the corpus list read; None when turned off."""
    if not settings.corpora_enabled or embedder is None:
        return None
    store = chunk_store(settings, embedder, vectors)
    await store.open()
    stack.push_async_callback(store.close)
    corpora = Corpora(store, embedder, settings=corpus_settings(settings), metrics=metrics)
    await corpora.refresh()
    log.info(
        "corpora: %d on %s (collection %s), chunks of at most %d tokens",
        len(corpora.pairs()),
        store.name,
        store.collection,
        settings.corpus_chunk_tokens,
    )
    return corpora


def retrieve_step(
    settings: Settings, corpora: Corpora | None, embedder: Embedder | None, metrics: Metrics
) -> RetrieveStep | None:
    """Step 5 of the request path over the corpora (None without them: a request naming a
    corpus then gets 404)."""
    if corpora is None or embedder is None:
        return None
    rag = RetrievalPolicy(
        system_prompt=settings.rag_system_prompt,
        top_k=settings.rag_top_k,
        timeout=settings.rag_retrieval_timeout_seconds,
        order=settings.rag_context_order,
        on_empty=settings.rag_on_empty,
    )
    return RetrieveStep(corpora, embedder.embed, rag, metrics)


def read_files(paths: list[str], root: Path, follow_symlinks: bool = False) -> list[SourceFile]:
    """The files under ``paths`` as ``SourceFile``s (paths missing, links out of the tree and
    names that are not UTF-8 are logged and skipped)."""
    files: list[SourceFile] = []
    for path in paths:
        try:
            found = collect([Path(path)], root, follow_symlinks=follow_symlinks)
        except FileNotFoundError as exc:
            log.warning("corpus preload: %s", exc)
            continue
        for name, reason in found.refused:
            log.warning("corpus preload: refused %s: %s", name, reason)
        for document, file in found.files:
            try:
                data = read_document(file, follow_symlinks=follow_symlinks)
            except OSError as exc:
                log.warning("corpus preload: cannot read %s: %s", file, exc.strerror or exc)
                continue
            files.append(SourceFile(document, data, content_type_for(file), source=str(file)))
    return files


async def preload(corpora: Corpora, settings: Settings, root: Path | None = None) -> None:
    """Ingest ``corpus_preload`` for ``corpus_preload_tenant`` (paths relative to ``root``,
    default the working directory). Unchanged files are skipped, so a restart costs a hash per
    file. A file that fails is logged and skipped; a store or embedder failure stops the
    preload with an error line but not the gateway (it still serves without those corpora)."""
    tenant = settings.corpus_preload_tenant
    base = root or Path.cwd()
    for name, paths in settings.corpus_preload.items():
        try:
            check_corpus_name(name)
        except InvalidRequestError as exc:
            log.error("corpus preload: %s", exc.message)
            continue
        follow = settings.corpus_preload_follow_symlinks
        files = await asyncio.to_thread(read_files, paths, base, follow)
        log.info("corpus preload: %s <- %d file(s) from %s", name, len(files), ", ".join(paths))
        done = 0

        def progress(line: FileReport, total: int = len(files)) -> None:
            nonlocal done
            done += 1
            if line.status == "failed":
                log.warning("corpus preload: %s: %s", line.document, line.reason)
            elif line.status != "unchanged":
                log.info("corpus preload: [%d/%d] %s %s", done, total, line.status, line.document)

        try:
            report = await corpora.ingest(tenant, name, files, progress)
        except DejaError as exc:  # the store or the embedder failed
            log.error("corpus preload of %s stopped: %s", name, exc.message)
            continue
        counts = report.counts()
        log.info(
            "corpus preload: %s ready (%d added, %d updated, %d unchanged, %d failed)",
            name,
            counts["added"],
            counts["updated"],
            counts["unchanged"],
            counts["failed"],
        )
