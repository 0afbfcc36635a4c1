"""Corpora without a real store where the store's failures are the point: retrieval's version
filter, timeout and error mapping; names, fingerprints and file collection."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from deja.corpus.base import Chunk, RetrievedChunk, newest_only
from deja.corpus.files import collect, content_type_for, document_id
from deja.corpus.ingest import fingerprint
from deja.corpus.names import check_corpus_name, check_document_id, check_metadata
from deja.corpus.reports import SourceFile
from deja.corpus.service import Corpora, CorpusSettings
from deja.errors import InvalidRequestError, RetrievalError, VectorStoreError


def hit(document: str, version: int, index: int, score: float) -> RetrievedChunk:
    chunk = Chunk("t", "c", document, version, index, f"{document}@{version}#{index}")
    return RetrievedChunk(chunk, score)


class SearchOnlyStore:
    """Answers searches with canned hits, after ``delay`` seconds, or fails."""

    name = "fake"
    collection = "fake"
    shared = False

    def __init__(self, hits: list[RetrievedChunk], delay: float = 0.0, error: bool = False) -> None:
        self.hits = hits
        self.delay = delay
        self.error = error
        self.limits: list[int] = []

    async def search(self, vector: list[float], tenant: str, corpus: str, **kw: Any) -> Any:
        self.limits.append(kw["limit"])
        await asyncio.sleep(self.delay)
        if self.error:
            raise VectorStoreError("qdrant search on 'x' failed: connection refused")
        return self.hits[: kw["limit"]]


class NoEmbedder:
    model_id = "fake-embedder"
    dim = 4


def corpora(store: SearchOnlyStore, timeout: float = 1.0) -> Corpora:
    settings = CorpusSettings(retrieval_timeout=timeout)
    return Corpora(store, NoEmbedder(), settings=settings, counter=("words", len))  # type: ignore[arg-type]


def test_newest_only_drops_an_older_version_seen_next_to_a_newer_one() -> None:
    hits = [hit("a", 1, 0, 0.9), hit("a", 2, 0, 0.8), hit("b", 1, 0, 0.7), hit("a", 1, 1, 0.6)]
    assert newest_only(hits) == [hits[1], hits[2]]
    only_old = [hit("a", 1, 0, 0.9), hit("a", 1, 1, 0.8)]
    assert newest_only(only_old) == only_old  # a whole older version is still one version


async def test_retrieve_over_fetches_and_keeps_one_version_per_document() -> None:
    hits = [
        hit("a", 1, 0, 0.95),
        hit("a", 2, 0, 0.9),
        hit("b", 3, 0, 0.85),
        hit("a", 1, 1, 0.8),
        hit("a", 2, 1, 0.75),
        hit("c", 1, 0, 0.7),
    ]
    store = SearchOnlyStore(hits)
    got = await corpora(store).retrieve("t", "c", [0.0] * 4, limit=3)
    assert [(r.chunk.document, r.chunk.version, r.chunk.index) for r in got] == [
        ("a", 2, 0),
        ("b", 3, 0),
        ("a", 2, 1),
    ]
    assert store.limits == [3 + 4]
    await corpora(store).retrieve("t", "c", [0.0] * 4, limit=10)
    assert store.limits[-1] == 20
    assert await corpora(store).retrieve("t", "c", [0.0] * 4, limit=0) == []


async def test_retrieve_failure_and_timeout_raise_retrieval_error() -> None:
    with pytest.raises(RetrievalError, match="connection refused"):
        await corpora(SearchOnlyStore([], error=True)).retrieve("t", "c", [0.0], limit=2)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(RetrievalError, match=r"timed out after 0\.05s"):
        await corpora(SearchOnlyStore([], delay=5), timeout=0.05).retrieve("t", "c", [0.0], limit=2)
    assert loop.time() - started < 1.0


async def test_retrieve_refuses_a_metadata_filter_key_that_is_not_a_name() -> None:
    with pytest.raises(InvalidRequestError):
        await corpora(SearchOnlyStore([])).retrieve("t", "c", [0.0], limit=2, where={"a.b": "x"})


def test_names_and_document_ids() -> None:
    assert check_corpus_name("deja-docs") == "deja-docs"
    assert check_document_id("docs/architecture.md") == "docs/architecture.md"
    for bad in ("", "-x", "a b", "x" * 65, "a/b"):
        with pytest.raises(InvalidRequestError):
            check_corpus_name(bad)
    for bad in ("", "/etc/passwd", "a/../b", "./a", "a//b", "a\\b", "a\nb", "x" * 513):
        with pytest.raises(InvalidRequestError):
            check_document_id(bad)
    with pytest.raises(InvalidRequestError):
        check_metadata({"a.b": "x"})


def test_fingerprint_covers_bytes_metadata_and_chunking_recipe() -> None:
    base = fingerprint(SourceFile("a.md", b"text", metadata={"k": "v"}), "r1")
    assert base == fingerprint(SourceFile("a.md", b"text", "text/plain", {"k": "v"}), "r1")
    assert base != fingerprint(SourceFile("a.md", b"text!", metadata={"k": "v"}), "r1")
    assert base != fingerprint(SourceFile("a.md", b"text", metadata={"k": "w"}), "r1")
    assert base != fingerprint(SourceFile("a.md", b"text", metadata={"k": "v"}), "r2")


def test_collect_walks_folders_for_supported_files_with_ids_from_the_root(
    tmp_path: Path,
) -> None:
    root = tmp_path / "repo"
    (root / "docs" / "sub").mkdir(parents=True)
    (root / "docs" / ".hidden").mkdir()
    for name in ("docs/a.md", "docs/sub/b.HTML", "docs/c.pdf", "docs/skip.py", "README.md"):
        (root / name).write_text("x")
    (root / "docs" / ".hidden" / "h.md").write_text("x")
    (root / "docs" / ".dot.md").write_text("x")
    outside = tmp_path / "elsewhere" / "manual"
    outside.mkdir(parents=True)
    (outside / "m.txt").write_text("x")
    found = collect(
        [root / "docs", root / "README.md", outside, root / "docs" / "skip.py"], root
    ).files
    assert [doc for doc, _ in found] == [
        "README.md",
        "docs/a.md",
        "docs/c.pdf",
        "docs/skip.py",  # named on its own: sent, and refused by the gateway if unsupported
        "docs/sub/b.HTML",
        "manual/m.txt",
    ]
    assert document_id(root / "docs" / "a.md", root, root / "docs") == "docs/a.md"
    with pytest.raises(FileNotFoundError):
        collect([root / "missing"], root)
    assert content_type_for("x/y.PDF") == "application/pdf"
    assert content_type_for("y.bin") == "application/octet-stream"


def test_corpus_preload_setting_from_the_environment_form() -> None:
    from config.settings import ConfigError, Settings, load_settings

    settings = Settings(corpus_preload="deja-docs=docs,README.md; faq = faq.md ")
    assert settings.corpus_preload == {"deja-docs": ["docs", "README.md"], "faq": ["faq.md"]}
    assert Settings(corpus_preload={"x": ["a"]}).corpus_preload == {"x": ["a"]}
    with pytest.raises(ConfigError, match="name=path"):
        load_settings(corpus_preload="just-a-path")
    with pytest.raises(ConfigError, match="at most half"):
        load_settings(corpus_chunk_tokens=64, corpus_chunk_overlap=40)
