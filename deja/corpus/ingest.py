"""Ingestion in groups of files: what ``Corpora.ingest`` does between reading the stored heads
and writing the chunks.

One-paragraph documents are one chunk each, so embedding and writing file by file runs the
embedder on batches of one and the store on one update per file: 23.6 chunks/s on the 2,328
one-paragraph pages of issue 21. A group of files is checked against the stored versions with
one listing, parsed and chunked file by file (a PDF in its own bounded worker process, the rest
in a thread), embedded in full batches across its files, and written in one upsert;
``bench/corpus.py`` has the rate.

A file that cannot be used (bad id or metadata, unparsable) is reported ``failed`` and the
group goes on. When the embedder fails on a group, its files are embedded again one by one, so
only a file the embedder cannot take fails (a failing store still raises: nothing can be
written).
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import orjson

from deja.corpus.base import Chunk
from deja.corpus.chunking import ChunkText
from deja.corpus.index import ChunkPoint, DocumentHead
from deja.corpus.names import check_document_id, check_metadata
from deja.corpus.parsing import ParsedDocument
from deja.corpus.reports import FileReport, SourceFile
from deja.embedding.base import Embedder
from deja.errors import DocumentError, EmbedderError, InvalidRequestError

#: Files read, parsed and embedded together: enough one-chunk files to fill a few embedder
#: batches, few enough that the progress bar still moves and one upsert stays small.
FILES_PER_GROUP = 64

Parse = Callable[[SourceFile], Awaitable[tuple[ParsedDocument, list[ChunkText]]]]


def fingerprint(file: SourceFile, chunking: str) -> str:
    """What decides whether a re-ingested file changed: its bytes, metadata and the recipe."""
    digest = hashlib.sha256()
    digest.update(chunking.encode())
    digest.update(b"\0" + orjson.dumps(file.metadata, option=orjson.OPT_SORT_KEYS) + b"\0")
    digest.update(file.data)
    return digest.hexdigest()


@dataclass(slots=True)
class Pending:
    """A file of a group that is new or changed: parsed, chunked, and (once embedded) its
    vectors."""

    file: SourceFile
    content_hash: str
    current: DocumentHead | None
    parsed: ParsedDocument
    pieces: list[ChunkText]
    vectors: list[list[float]] | None = None


def groups(files: list[SourceFile], size: int = FILES_PER_GROUP) -> list[list[SourceFile]]:
    return [files[i : i + size] for i in range(0, len(files), size)]


def check_file(file: SourceFile) -> FileReport | None:
    """A ``failed`` line for a file whose id or metadata is refused, else None."""
    try:
        check_document_id(file.document)
        check_metadata(file.metadata)
    except InvalidRequestError as exc:
        return FileReport(file.document, "failed", reason=exc.message)
    return None


async def parse_all(
    parse: Parse, files: list[SourceFile]
) -> list[tuple[ParsedDocument, list[ChunkText]] | DocumentError]:
    """Each file parsed and chunked, or its ``DocumentError``; one after the other, so a
    group's parsing never takes more than one core."""
    found: list[tuple[ParsedDocument, list[ChunkText]] | DocumentError] = []
    for file in files:
        try:
            found.append(await parse(file))
        except DocumentError as exc:
            found.append(exc)
    return found


def split(texts: list[str], parts: int) -> list[list[str]]:
    """``texts`` in at most ``parts`` contiguous, non-empty slices of near-equal length."""
    parts = max(1, min(parts, len(texts)))
    size, extra = divmod(len(texts), parts)
    bounds = [i * size + min(i, extra) for i in range(parts + 1)]
    return [texts[lo:hi] for lo, hi in itertools.pairwise(bounds)]


async def embed_texts(
    embedder: Embedder, texts: list[str], batch: int, threads: int = 1
) -> list[list[float]]:
    """``texts`` embedded in batches of ``batch``; a batch is split over ``threads`` worker
    threads that embed at once (the embedder runs each text on its own, so a text's vector does
    not depend on the split), and request-path embeddings interleave between batches."""
    vectors: list[list[float]] = []
    for start in range(0, len(texts), batch):
        slices = split(texts[start : start + batch], threads)
        done = await asyncio.gather(*(asyncio.to_thread(embedder.embed_batch, s) for s in slices))
        for part in done:
            vectors.extend(part)
    return vectors


async def embed_pending(
    embedder: Embedder, pending: list[Pending], batch: int, threads: int = 1
) -> dict[str, FileReport]:
    """Set every pending file's vectors, in batches across files; the ``failed`` lines of the
    files the embedder refused (by document id) when the group as a whole failed."""
    texts = [p.text for item in pending for p in item.pieces]
    try:
        vectors = await embed_texts(embedder, texts, batch, threads)
    except EmbedderError:
        return await _embed_one_by_one(embedder, pending, batch)
    at = 0
    for item in pending:
        item.vectors = vectors[at : at + len(item.pieces)]
        at += len(item.pieces)
    return {}


async def _embed_one_by_one(
    embedder: Embedder, pending: list[Pending], batch: int
) -> dict[str, FileReport]:
    failed: dict[str, FileReport] = {}
    for item in pending:
        try:
            item.vectors = await embed_texts(embedder, [p.text for p in item.pieces], batch)
        except EmbedderError as exc:
            document = item.file.document
            failed[document] = FileReport(document, "failed", reason=exc.message)
    if len(failed) == len(pending) and pending:
        raise EmbedderError(next(iter(failed.values())).reason or "the embedder failed")
    return failed


def new_head(tenant: str, corpus: str, item: Pending, now: float) -> DocumentHead:
    """The head of a pending file's next version."""
    file = item.file
    return DocumentHead(
        tenant=tenant,
        corpus=corpus,
        document=file.document,
        version=item.current.version + 1 if item.current is not None else 1,
        chunks=len(item.pieces),
        content_hash=item.content_hash,
        title=item.parsed.title,
        source=file.source or file.document,
        format=item.parsed.format,
        bytes=len(file.data),
        ingested_at=now,
        metadata=dict(file.metadata),
    )


def chunk_points(
    head: DocumentHead, pieces: list[ChunkText], vectors: list[list[float]]
) -> list[ChunkPoint]:
    return [
        ChunkPoint(
            chunk=Chunk(
                tenant=head.tenant,
                corpus=head.corpus,
                document=head.document,
                version=head.version,
                index=piece.index,
                text=piece.text,
                title=piece.title,
                metadata=dict(head.metadata),
            ),
            vector=vector,
            content_hash=head.content_hash,
            head=head if piece.index == 0 else None,
        )
        for piece, vector in zip(pieces, vectors, strict=True)
    ]
