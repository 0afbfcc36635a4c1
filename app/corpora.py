"""Opening the corpora (issue 11): the chunk store on the semantic layer's backend, ``Corpora`` on
the process's one embedder, and the start-up preload. Kept apart from ``app.resources`` for
size; ``Gateway.build`` calls it in the same way and closes what it opens on the same stack."""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack
from pathlib import Path

from qdrant_client import AsyncQdrantClient

from app.semantic_parts import QDRANT_LOCAL_MEMORY, qdrant_distribution
from config.settings import Settings
from deja.corpus.files import collect, content_type_for
from deja.corpus.names import check_corpus_name
from deja.corpus.reports import FileReport, SourceFile
from deja.corpus.service import Corpora, CorpusSettings
from deja.corpus.store.base import ChunkStore, corpus_collection
from deja.corpus.store.edge import EdgeChunkStore
from deja.corpus.store.qdrant import QdrantChunkStore
from deja.embedding.base import Embedder
from deja.errors import DejaError, InvalidRequestError
from deja.observability.metrics import Metrics
from middleware.retrieve import RagSettings, RetrieveStep

log = logging.getLogger("deja.corpus")


def corpus_settings(settings: Settings) -> CorpusSettings:
    return CorpusSettings(
        chunk_tokens=settings.corpus_chunk_tokens,
        chunk_overlap=settings.corpus_chunk_overlap,
        max_file_bytes=settings.corpus_max_file_bytes,
        retrieval_timeout=settings.rag_retrieval_timeout_seconds,
        embed_batch=settings.corpus_embed_batch,
    )


def chunk_store(
    settings: Settings, embedder: Embedder, client: AsyncQdrantClient | None = None
) -> ChunkStore:
    """Qdrant Edge under data_dir, or the Qdrant server of ``DEJA_QDRANT_URL`` (or ``client``,
    e.g. qdrant-client's local mode), in a collection apart from the cache's."""
    collection = corpus_collection(embedder.model_id, embedder.dim)
    timeout = settings.rag_retrieval_timeout_seconds
    if client is not None:
        return QdrantChunkStore(
            collection=collection,
            dim=embedder.dim,
            client=client,
            timeout=timeout,
            distribution=qdrant_distribution(settings),
        )
    if settings.qdrant_url:
        key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
        return QdrantChunkStore(
            collection=collection,
            dim=embedder.dim,
            url=settings.qdrant_url,
            api_key=key,
            timeout=timeout,
            distribution=qdrant_distribution(settings),
        )
    return EdgeChunkStore(settings.data_dir, collection=collection, dim=embedder.dim)


async def open_corpora(
    stack: AsyncExitStack, settings: Settings, embedder: Embedder | None, metrics: Metrics
) -> Corpora | None:
    """The corpora with their store open and the corpus list read; None when turned off."""
    if not settings.corpora_enabled or embedder is None:
        return None
    client = None
    if settings.qdrant_url == QDRANT_LOCAL_MEMORY:
        client = AsyncQdrantClient(location=":memory:")
        stack.push_async_callback(client.close)
    store = chunk_store(settings, embedder, client)
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
    rag = RagSettings(
        system_prompt=settings.rag_system_prompt,
        top_k=settings.rag_top_k,
        timeout=settings.rag_retrieval_timeout_seconds,
        order=settings.rag_context_order,
    )
    return RetrieveStep(corpora, embedder.embed, rag, metrics)


def read_files(paths: list[str], root: Path) -> list[SourceFile]:
    """The files under ``paths`` as ``SourceFile``s (paths missing are logged and skipped)."""
    files: list[SourceFile] = []
    for path in paths:
        try:
            found = collect([Path(path)], root)
        except FileNotFoundError as exc:
            log.warning("corpus preload: %s", exc)
            continue
        for document, file in found:
            try:
                data = file.read_bytes()
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
        files = await asyncio.to_thread(read_files, paths, base)
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
