"""Ingest's embedding step: a batch split over threads that embed at once, in order, and one
failing file not stopping the others."""

from __future__ import annotations

import threading

import pytest

from deja.corpus.chunking import ChunkText
from deja.corpus.ingest import Pending, embed_pending, embed_texts, split
from deja.corpus.parsing import ParsedDocument
from deja.corpus.reports import SourceFile
from deja.errors import EmbedderError


class RecordingEmbedder:
    """A text's vector is its number; records each call's thread, and (with ``meet``) makes
    every call wait until ``meet`` calls are running at once."""

    model_id = "fake"
    dim = 1

    def __init__(self, meet: int = 1, refuse: str | None = None) -> None:
        self.barrier = threading.Barrier(meet, timeout=5)
        self.refuse = refuse
        self.calls: list[tuple[int, list[str]]] = []
        self.lock = threading.Lock()

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        with self.lock:
            self.calls.append((threading.get_ident(), texts))
        if self.refuse is not None and self.refuse in texts:
            raise EmbedderError(f"cannot embed {self.refuse!r}")
        self.barrier.wait()  # BrokenBarrierError if the other slice is not running meanwhile
        return [[float(t)] for t in texts]


def test_split_keeps_order_and_makes_near_equal_non_empty_slices() -> None:
    texts = [str(i) for i in range(7)]
    for parts in (1, 2, 3, 7, 20):
        slices = split(texts, parts)
        assert [t for s in slices for t in s] == texts
        assert len(slices) == min(parts, 7)
        assert all(s for s in slices)
        assert max(map(len, slices)) - min(map(len, slices)) <= 1
    assert split([], 2) == [[]]


async def test_a_batch_is_embedded_on_two_threads_at_once_and_comes_back_in_order() -> None:
    embedder = RecordingEmbedder(meet=2)
    texts = [str(i) for i in range(10)]
    vectors = await embed_texts(embedder, texts, batch=4, threads=2)  # type: ignore[arg-type]
    assert vectors == [[float(i)] for i in range(10)]
    assert sorted(len(t) for _, t in embedder.calls) == [1, 1, 2, 2, 2, 2]  # 4 + 4 + 2, halved
    assert len({thread for thread, _ in embedder.calls[:2]}) == 2


async def test_one_thread_is_one_call_per_batch() -> None:
    embedder = RecordingEmbedder()
    vectors = await embed_texts(embedder, ["1", "2", "3"], batch=2, threads=1)  # type: ignore[arg-type]
    assert vectors == [[1.0], [2.0], [3.0]]
    assert [t for _, t in embedder.calls] == [["1", "2"], ["3"]]


def pending(document: str, texts: list[str]) -> Pending:
    pieces = [ChunkText(i, document, t) for i, t in enumerate(texts)]
    return Pending(
        SourceFile(document, b""), "h", None, ParsedDocument(document, "text", ()), pieces
    )


async def test_a_file_the_embedder_refuses_fails_alone_with_threads() -> None:
    embedder = RecordingEmbedder(refuse="13")
    items = [pending("a.txt", ["1", "2"]), pending("b.txt", ["13"]), pending("c.txt", ["3"])]
    failed = await embed_pending(embedder, items, batch=8, threads=2)  # type: ignore[arg-type]
    assert list(failed) == ["b.txt"]
    assert "cannot embed '13'" in (failed["b.txt"].reason or "")
    assert items[0].vectors == [[1.0], [2.0]] and items[2].vectors == [[3.0]]
    assert items[1].vectors is None


async def test_every_file_refused_raises() -> None:
    embedder = RecordingEmbedder(refuse="1")
    with pytest.raises(EmbedderError):
        await embed_pending(embedder, [pending("a.txt", ["1"])], batch=8, threads=2)  # type: ignore[arg-type]
