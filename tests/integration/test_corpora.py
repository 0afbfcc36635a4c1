"""``Corpora`` end to end below the HTTP layer: the real ONNX embedder, the real chunk stores
(Qdrant Edge, and qdrant-client's local mode for the server path), real files."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from deja.corpus.base import DocumentChange
from deja.corpus.chunking import chunk_document
from deja.corpus.index import CHUNK_INDEXES, ChunkStore, corpus_collection
from deja.corpus.parsing import parse_document
from deja.corpus.reports import SourceFile
from deja.corpus.service import Corpora, token_counter
from deja.embedding.onnx.embedder import OnnxEmbedder, load_onnx_embedder
from deja.errors import CacheUnavailableError, CorpusNotFoundError
from deja.observability.metrics import Metrics
from deja.vectors.edge import EdgeCollection
from tests.pdfs import encrypt_pdf, make_pdf
from tests.support import BACKENDS, MODEL_DIR, collection_factory

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

RUST = b"""# Rust

## Borrow checker

The borrow checker enforces that a value has either one mutable reference or any number
of shared references at a time, which rules out data races at compile time.
"""
CATS = b"""# Cats

Cats sleep for most of the day and hunt at dawn and dusk. A cat purrs when content.
"""
PARIS = b"""<html><body><nav>Home | Travel</nav><main><h1>Paris</h1>
<p>The Eiffel Tower was completed in 1889 for the World's Fair.</p></main></body></html>"""


@pytest.fixture(scope="module")
async def embedder() -> AsyncIterator[OnnxEmbedder]:
    loaded = load_onnx_embedder(MODEL_DIR)
    yield loaded
    await loaded.close()


class Invalidations:
    """A stand-in for the gateway's provenance invalidation: records what it is told."""

    def __init__(self, answer: int = 0, error: bool = False) -> None:
        self.changes: list[DocumentChange] = []
        self.answer = answer
        self.error = error

    async def __call__(self, changes: list[DocumentChange]) -> int:
        self.changes.extend(changes)
        if self.error:
            raise CacheUnavailableError("redis is down")
        return self.answer


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ChunkStore]:
    async with collection_factory(request.param, tmp_path) as make:
        opened = ChunkStore(make(corpus_collection("test", 384), 384, CHUNK_INDEXES))
        await opened.open()
        yield opened


def edge_store(data_dir: Path) -> ChunkStore:
    return ChunkStore(EdgeCollection(data_dir, collection="c", dim=384, indexes=CHUNK_INDEXES))


def files(**docs: bytes) -> list[SourceFile]:
    return [
        SourceFile(name.replace("__", "/").replace("_", "."), data) for name, data in docs.items()
    ]


async def ask(corpora: Corpora, embedder: OnnxEmbedder, tenant: str, question: str) -> list[str]:
    vector = await embedder.embed(question)
    hits = await corpora.retrieve(tenant, "kb", vector, limit=3)
    return [f"{h.chunk.document}@{h.chunk.version}" for h in hits]


async def test_ingest_retrieve_update_remove(store: ChunkStore, embedder: OnnxEmbedder) -> None:
    metrics = Metrics()
    told = Invalidations(answer=3)
    corpora = Corpora(store, embedder, metrics=metrics, on_change=told)
    first = await corpora.ingest("t1", "kb", files(rust_md=RUST, cats_md=CATS, paris_html=PARIS))
    assert [(f.document, f.status, f.version) for f in first.files] == [
        ("rust.md", "added", 1),
        ("cats.md", "added", 1),
        ("paris.html", "added", 1),
    ]
    assert corpora.has_corpus("t1", "kb") and corpora.corpora("t1") == ["kb"]
    # additions are announced too (near-question invalidation), as having no old version
    assert [(c.document, c.old_version, c.new_version) for c in told.changes] == [
        ("rust.md", None, 1),
        ("cats.md", None, 1),
        ("paris.html", None, 1),
    ]
    assert all(len(c.vectors) >= 1 for c in told.changes)  # the new content's embeddings
    told.changes.clear()
    hits = await ask(corpora, embedder, "t1", "how does Rust prevent data races?")
    assert hits[0] == "rust.md@1"
    paris = await corpora.retrieve(
        "t1", "kb", await embedder.embed("When was the Eiffel Tower built?"), limit=1
    )
    assert paris[0].chunk.title == "Paris" and "Home | Travel" not in paris[0].chunk.text
    chunks_before = await store.count("t1", "kb")

    again = await corpora.ingest("t1", "kb", files(rust_md=RUST, cats_md=CATS, paris_html=PARIS))
    assert {f.status for f in again.files} == {"unchanged"}
    assert await store.count("t1", "kb") == chunks_before and told.changes == []

    rust2 = RUST.replace(b"compile time", b"compile time, long before the program runs")
    changed = await corpora.ingest("t1", "kb", files(rust_md=rust2))
    line = changed.files[0]
    assert (line.status, line.old_version, line.version, line.invalidated) == ("updated", 1, 2, 3)
    assert told.changes == [DocumentChange("t1", "kb", "rust.md", 1, 2)]
    assert [h.version for h in await store.heads("t1", "kb", "rust.md")] == [2]  # v1 is gone
    hits = await ask(corpora, embedder, "t1", "how does Rust prevent data races?")
    assert hits[0] == "rust.md@2" and "rust.md@1" not in hits
    docs = {d.document: d for d in await corpora.documents("t1", "kb")}
    assert (docs["rust.md"].version, docs["cats.md"].version, docs["paris.html"].format) == (
        2,
        1,
        "html",
    )

    removal = await corpora.remove("t1", "kb", "rust.md")
    assert removal is not None and (removal.change.old_version, removal.invalidated) == (2, 3)
    assert told.changes[-1] == DocumentChange("t1", "kb", "rust.md", 2, None)
    assert await corpora.remove("t1", "kb", "rust.md") is None
    assert "rust.md@2" not in await ask(corpora, embedder, "t1", "Rust borrow checker")
    for name in ("cats.md", "paris.html"):
        await corpora.remove("t1", "kb", name)
    assert not corpora.has_corpus("t1", "kb")
    with pytest.raises(CorpusNotFoundError):
        await corpora.documents("t1", "kb")

    sample = metrics.registry.get_sample_value
    assert sample("deja_corpus_documents_total", {"corpus": "kb", "action": "added"}) == 3
    assert sample("deja_corpus_documents_total", {"corpus": "kb", "action": "unchanged"}) == 3
    assert sample("deja_corpus_documents_total", {"corpus": "kb", "action": "removed"}) == 3
    # the fake answers 3 per call: 3 additions, 1 update, 3 removals
    assert sample("deja_corpus_invalidated_total", {"corpus": "kb"}) == 3 * 7
    assert sample("deja_corpus_chunks_ingested_total", {"corpus": "kb"}) == chunks_before + 1


async def test_a_tenant_never_sees_another_tenants_corpus(
    store: ChunkStore, embedder: OnnxEmbedder
) -> None:
    corpora = Corpora(store, embedder)
    await corpora.ingest("alice", "kb", files(rust_md=RUST))
    assert corpora.has_corpus("alice", "kb")
    assert not corpora.has_corpus("bob", "kb") and corpora.corpora("bob") == []
    assert await ask(corpora, embedder, "bob", "Rust borrow checker") == []
    with pytest.raises(CorpusNotFoundError):
        await corpora.documents("bob", "kb")
    with pytest.raises(CorpusNotFoundError):
        await corpora.remove("bob", "kb", "rust.md")
    # Bob's own corpus of the same name and document id is his alone.
    await corpora.ingest("bob", "kb", files(rust_md=CATS))
    assert (await ask(corpora, embedder, "alice", "Rust borrow checker"))[0] == "rust.md@1"
    bob = await corpora.retrieve("bob", "kb", await embedder.embed("Rust"), limit=5)
    assert {h.chunk.tenant for h in bob} == {"bob"} and "Cats" in bob[0].chunk.text


async def test_bad_files_are_reported_and_the_rest_ingested(
    tmp_path: Path, embedder: OnnxEmbedder
) -> None:
    store = edge_store(tmp_path)
    await store.open()
    try:
        corpora = Corpora(store, embedder)
        report = await corpora.ingest(
            "t1",
            "kb",
            [
                SourceFile("locked.pdf", encrypt_pdf(make_pdf([["secret"]]), "pw")),
                SourceFile("empty.md", b""),
                SourceFile("doc.docx", b"PK\x03\x04"),
                SourceFile("../escape.md", CATS),
                SourceFile("ok.pdf", make_pdf([["Cats purr when content."]], title="Cat facts")),
            ],
        )
        reasons = {f.document: f.reason for f in report.failed}
        assert set(reasons) == {"locked.pdf", "empty.md", "doc.docx", "../escape.md"}
        assert "encrypted" in str(reasons["locked.pdf"]) and "empty" in str(reasons["empty.md"])
        assert report.counts() == {"added": 1, "updated": 0, "unchanged": 0, "failed": 4}
        (doc,) = await corpora.documents("t1", "kb")
        assert (doc.document, doc.title, doc.format) == ("ok.pdf", "Cat facts", "pdf")
    finally:
        await store.close()


async def test_a_failing_invalidation_is_reported_not_hidden(
    tmp_path: Path, embedder: OnnxEmbedder
) -> None:
    store = edge_store(tmp_path)
    await store.open()
    try:
        corpora = Corpora(store, embedder, on_change=Invalidations(error=True))
        await corpora.ingest("t1", "kb", files(cats_md=CATS))
        report = await corpora.ingest("t1", "kb", files(cats_md=CATS + b"\nCats also climb.\n"))
        line = report.files[0]
        assert line.status == "updated" and line.invalidation_error == "redis is down"
    finally:
        await store.close()


async def test_metadata_filter_and_persistence_across_a_restart(
    tmp_path: Path, embedder: OnnxEmbedder
) -> None:
    store = edge_store(tmp_path)
    await store.open()
    corpora = Corpora(store, embedder)
    await corpora.ingest(
        "t1",
        "kb",
        [
            SourceFile("en.md", CATS, metadata={"lang": "en"}),
            SourceFile("rust.md", RUST, metadata={"lang": "xx"}),
        ],
    )
    vector = await embedder.embed("Do cats purr?")
    hits = await corpora.retrieve("t1", "kb", vector, limit=5, where={"lang": "xx"})
    assert {h.chunk.document for h in hits} == {"rust.md"}
    await store.close()
    reopened = edge_store(tmp_path)
    await reopened.open()
    try:
        fresh = Corpora(reopened, embedder)
        await fresh.refresh()
        assert fresh.has_corpus("t1", "kb")
        report = await fresh.ingest(
            "t1", "kb", [SourceFile("en.md", CATS, metadata={"lang": "en"})]
        )
        assert report.files[0].status == "unchanged"
    finally:
        await reopened.close()


def test_chunks_of_the_project_docs_fit_minilm_by_its_own_tokenizer() -> None:
    name, count = token_counter("all-MiniLM-L6-v2-dynint8")
    assert name == "minilm-wordpiece"
    for path in (ROOT / "README.md", ROOT / "docs" / "architecture.md"):
        doc = parse_document(path.name, path.read_bytes(), max_bytes=10**7)
        chunks = chunk_document(doc, max_tokens=200, overlap=32, count=count)
        assert len(chunks) > 20
        assert max(count(c.text) for c in chunks) <= 200  # + [CLS]/[SEP]: within MiniLM's 256
        assert all(c.text.startswith(c.title) for c in chunks)
    assert token_counter("some-other-model")[0] == "words"
