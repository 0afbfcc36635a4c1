"""The relevance floor and the stream's sources stamp (issue 21)."""

from __future__ import annotations

import orjson

from deja.corpus.base import Chunk, RetrievedChunk
from deja.corpus.relevance import Floor
from middleware.relay import SourcesStamp, iter_sse_data


def ranked(*scores: float) -> list[RetrievedChunk]:
    return [RetrievedChunk(Chunk("t", "c", f"d{i}", 1, 0, "x"), s) for i, s in enumerate(scores)]


def docs(chunks: list[RetrievedChunk]) -> list[str]:
    return [c.chunk.document for c in chunks]


def test_the_floor_keeps_chunks_near_enough_to_the_best_in_ranked_order() -> None:
    chunks = ranked(0.55, 0.62, 0.50, 0.20)  # hybrid order need not be cosine order
    assert docs(Floor(0.3, 0.1).keep(chunks, 4)) == ["d0", "d1"]  # 0.50 < 0.62 - 0.1
    assert docs(Floor(0.3, None).keep(chunks, 4)) == ["d0", "d1", "d2"]
    assert docs(Floor(0.3, None).keep(chunks, 2)) == ["d0", "d1"]  # top-k is the most
    assert Floor(0.7, None).keep(chunks, 4) == []  # nothing relevant: possibly none
    assert Floor(0.3, 0.1).keep([], 4) == []


def _event(payload: dict[str, object]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def test_sources_go_on_the_finishing_chunk_even_when_it_arrives_in_pieces() -> None:
    sources = [{"corpus": "c", "document": "d", "version": 2}]
    stream = (
        _event({"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]})
        + _event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        + _event({"choices": [], "usage": {"total_tokens": 3}})
        + b"data: [DONE]\n\n"
    )
    stamp = SourcesStamp("deja_sources", sources)
    out = b"".join(stamp.feed(stream[i : i + 7]) for i in range(0, len(stream), 7))
    out += stamp.flush()
    chunks = [orjson.loads(p) for p in iter_sse_data(out)[:-1]]
    assert [c.get("deja_sources") for c in chunks] == [None, sources, None]
    assert chunks[1]["choices"][0]["finish_reason"] == "stop"
    assert out.endswith(b"data: [DONE]\n\n")
