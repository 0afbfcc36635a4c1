"""The ONNX embedder on the real installed model (re-quantised once per test session), and the
optional sentence-transformers embedder's clear failure when its extra is missing."""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import math
import os
import sys
import time
import types
from collections.abc import AsyncIterator
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from deja.embedding.base import Embedder
from deja.embedding.onnx import derive as onnx_derive
from deja.embedding.onnx import embedder as embedder_onnx
from deja.embedding.onnx.embedder import (
    DIM,
    DYNINT8_ID,
    INT8_ID,
    OnnxEmbedder,
    derived_model_path,
    load_onnx_embedder,
    load_tokenizer,
    source_model_path,
)
from deja.errors import EmbedderError
from tests.support import int8_weight_range

pytestmark = pytest.mark.integration

TEXTS = [
    "How do I configure the agent?",
    "What is the process for configuring the agent?",
    "What is the capital of France?",
    "Which city is France's capital?",
    "How can I lose weight quickly?",
    "What is the best way to learn Python programming?",
    "hello",
    "Write a haiku about the sea. " * 60,  # past 256 tokens: truncated
]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
async def embedder(cache_dir: Path) -> AsyncIterator[OnnxEmbedder]:
    loaded = load_onnx_embedder(cache_dir)
    yield loaded
    await loaded.close()


def hidden_files(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.startswith(".")]


def cos(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b))


def test_tokenizer_is_bert_base_uncased_wordpiece() -> None:
    tokenizer = load_tokenizer()
    assert tokenizer.encode("Hello World").ids == [101, 7592, 2088, 102]
    assert tokenizer.encode("How do I configure the agent?").tokens == (
        ["[CLS]", "how", "do", "i", "con", "##fi", "##gur", "##e", "the", "agent", "?", "[SEP]"]
    )
    assert len(tokenizer.encode("word " * 1000).ids) == 256
    assert len(tokenizer.encode("a").ids) == 3  # no padding


async def test_shape_identity_and_unit_norm(embedder: OnnxEmbedder) -> None:
    protocol: Embedder = embedder  # checked statically: the Protocol is not runtime-checkable
    assert protocol.model_id == DYNINT8_ID
    assert embedder.model_id == DYNINT8_ID
    assert embedder.dim == DIM == 384
    for text in [*TEXTS, ""]:
        vector = await embedder.embed(text)
        assert len(vector) == DIM
        assert all(isinstance(x, float) for x in vector)
        assert math.isclose(float(np.linalg.norm(vector)), 1.0, abs_tol=1e-5)


async def test_deterministic(embedder: OnnxEmbedder) -> None:
    first = await embedder.embed(TEXTS[0])
    assert await embedder.embed(TEXTS[0]) == first
    assert embedder.embed_batch([TEXTS[0]]) == [first]


async def test_paraphrases_score_higher_than_unrelated(embedder: OnnxEmbedder) -> None:
    agent, agent_para, capital, capital_para, weight, python = [
        await embedder.embed(t) for t in TEXTS[:6]
    ]
    assert cos(agent, agent_para) > 0.8
    assert cos(capital, capital_para) > 0.8
    for unrelated in (capital, weight, python):
        assert cos(agent, unrelated) < 0.3
        assert cos(agent, agent_para) - cos(agent, unrelated) > 0.5


async def test_huge_text_is_cut_before_tokenising(embedder: OnnxEmbedder) -> None:
    huge = "Write a haiku about the sea. " * 40_000  # 1.2 MB; its first 256 tokens are early
    started = time.perf_counter()
    vector = await embedder.embed(huge)
    assert time.perf_counter() - started < 0.5  # the whole text would take about 1 s
    assert vector == await embedder.embed(huge[:5_000])


async def test_batch_equals_single(embedder: OnnxEmbedder) -> None:
    batch = np.array(embedder.embed_batch(TEXTS))
    single = np.array([await embedder.embed(t) for t in TEXTS])
    assert np.abs(batch - single).max() <= 1e-5
    assert embedder.embed_batch([]) == []


@pytest.mark.parametrize("batching", [False, True])
async def test_concurrent_calls_each_get_their_own_vector(
    cache_dir: Path, embedder: OnnxEmbedder, batching: bool
) -> None:
    texts = [f"{TEXTS[i % len(TEXTS)][:200]} #{i}" for i in range(48)]
    expected = np.array(embedder.embed_batch(texts))
    concurrent = load_onnx_embedder(cache_dir, batching=batching, batch_max=8)
    try:
        got = np.array(await asyncio.gather(*(concurrent.embed(t) for t in texts)))
        assert np.abs(got - expected).max() <= 1e-5
        if batching:
            assert concurrent.batcher is not None
            sizes = concurrent.batcher.batch_sizes
            assert 1 < max(sizes) <= 8  # calls were grouped, within the limit
            assert sum(size * n for size, n in sizes.items()) == len(texts)
        else:
            assert concurrent.batcher is None
    finally:
        await concurrent.close()


async def test_cached_model_is_reused(cache_dir: Path, embedder: OnnxEmbedder) -> None:
    derived = derived_model_path(cache_dir, source_model_path())
    assert derived.is_file()
    assert not hidden_files(cache_dir)  # no temporary leftovers
    mtime = derived.stat().st_mtime_ns
    again = load_onnx_embedder(cache_dir, batching=False)
    try:
        assert again.model_id == DYNINT8_ID
        assert again.vectors_id == f"{DYNINT8_ID}-{onnx_derive.RECIPE}"
        assert derived.stat().st_mtime_ns == mtime
        assert await again.embed(TEXTS[2]) == await embedder.embed(TEXTS[2])
    finally:
        await again.close()


async def test_falls_back_to_the_shipped_model_when_deriving_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: object) -> float:
        raise embedder_onnx.DerivationError("no quantiser today")

    monkeypatch.setattr(onnx_derive, "derive_dynint8", broken)
    # A corrupt cached file must not be used either.
    derived_model_path(tmp_path, source_model_path()).write_bytes(b"not an onnx model")
    with caplog.at_level(logging.WARNING, logger="deja.embedder"):
        fallback = load_onnx_embedder(tmp_path, batching=False)
    try:
        assert fallback.model_id == fallback.vectors_id == INT8_ID
        assert "no quantiser today" in caplog.text
        vector = await fallback.embed(TEXTS[0])
        assert math.isclose(float(np.linalg.norm(vector)), 1.0, abs_tol=1e-5)
        assert cos(vector, await fallback.embed(TEXTS[1])) > 0.8
    finally:
        await fallback.close()


@pytest.mark.parametrize("batching", [False, True])
async def test_close(cache_dir: Path, batching: bool) -> None:
    embedder = load_onnx_embedder(cache_dir, batching=batching)
    pending = [asyncio.create_task(embedder.embed(t)) for t in TEXTS]
    await asyncio.sleep(0)
    await embedder.close()
    outcomes = await asyncio.gather(*pending, return_exceptions=True)
    # A text already running finishes; queued ones finish or fail cleanly, never hang.
    assert all(isinstance(o, list | EmbedderError) for o in outcomes)
    with pytest.raises(EmbedderError):
        await embedder.embed("after close")
    with pytest.raises(EmbedderError):
        embedder.embed_batch(["after close"])
    await embedder.close()  # idempotent


def test_missing_model_file_is_an_embedder_error(tmp_path: Path) -> None:
    with pytest.raises(EmbedderError, match="missing"):
        load_onnx_embedder(tmp_path, model_path=tmp_path / "nope.onnx")


@pytest.mark.skipif(
    importlib.util.find_spec("sentence_transformers") is not None,
    reason="sentence-transformers is installed",
)
def test_st_embedder_without_its_extra_says_how_to_install() -> None:
    from deja.embedding.st import load_st_embedder

    with pytest.raises(EmbedderError, match=r"deja\[st\]"):
        load_st_embedder("sentence-transformers/all-MiniLM-L6-v2")
    with pytest.raises(EmbedderError, match="embedder_model"):
        load_st_embedder(None)


class FakeSentenceTransformer:
    """Stands in for sentence_transformers.SentenceTransformer: records how it was built."""

    built: ClassVar[list[tuple[str, dict[str, object]]]] = []

    def __init__(self, source: str, **kwargs: object) -> None:
        self.built.append((source, kwargs))

    def get_sentence_embedding_dimension(self) -> int:
        return 3

    def encode(self, texts: list[str], **kwargs: object) -> np.ndarray:
        assert kwargs["normalize_embeddings"] is True
        return np.tile(np.array([1.0, 0.0, 0.0]), (len(texts), 1))


async def test_st_embedder_loads_offline_and_runs_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from deja.embedding.st import load_st_embedder

    fake = types.ModuleType("sentence_transformers")
    fake.SentenceTransformer = FakeSentenceTransformer  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sentence_transformers", fake)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    model_dir = tmp_path / "my-model"
    model_dir.mkdir()
    embedder = load_st_embedder(str(model_dir))
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert FakeSentenceTransformer.built[-1] == (
        str(model_dir),
        {"device": "cpu", "local_files_only": True},
    )
    assert (embedder.model_id, embedder.dim) == ("st-my-model", 3)
    assert await embedder.embed("abc") == [1.0, 0.0, 0.0]
    assert embedder.embed_batch(["a", "bb"]) == [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
    await embedder.close()
    with pytest.raises(EmbedderError):
        await embedder.embed("abc")


def test_derived_model_has_7_bit_weights(cache_dir: Path, embedder: OnnxEmbedder) -> None:
    """So that CPUs with and without VNNI give the same vectors (see ``int8_weight_range``)."""
    low, high = int8_weight_range(derived_model_path(cache_dir, source_model_path()))
    assert low >= -64 and high <= 64, (low, high)
    assert high - low > 100


def test_derived_model_drops_the_nan_guards_and_keeps_every_vector(
    cache_dir: Path, embedder: OnnxEmbedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The softmax NaN guards are gone from the derived graph, and a model derived with them
    gives the same vectors bit for bit (texts of one token to past 256)."""
    import onnx

    derived = onnx.load(str(derived_model_path(cache_dir, source_model_path())))
    assert not [n for n in derived.graph.node if n.op_type == "IsNaN"]
    monkeypatch.setattr(onnx_derive, "drop_nan_guards", lambda graph: 0)
    guarded_path = tmp_path / "guarded.onnx"
    tokenizer = load_tokenizer()
    onnx_derive.derive_dynint8(source_model_path(), guarded_path, tokenizer)
    guarded = onnx.load(str(guarded_path))
    assert len([n for n in guarded.graph.node if n.op_type == "IsNaN"]) == 6  # one per layer
    with_guards = onnx_derive.Encoder(onnx_derive.make_session(guarded_path), tokenizer)
    assert np.array_equal(
        with_guards.each([*TEXTS, ""]), np.asarray(embedder.embed_batch([*TEXTS, ""]))
    )
