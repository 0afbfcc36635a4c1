"""The one SSE framer (middleware/sse.py): whole events across any read boundaries, and the
functions over its events (usage filtering, re-stamping, usage extraction)."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from middleware import sse

USAGE = {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}


def event(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def content(text: str, finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": {"content": text}, "finish_reason": finish}
    return event({"id": "chatcmpl-1", "created": 1, "model": "m", "choices": [choice]})


USAGE_EVENT = event({"id": "chatcmpl-1", "created": 1, "choices": [], "usage": USAGE})
STREAM = content("hel") + content("lo", "stop") + USAGE_EVENT + sse.DONE


def framed(stream: bytes, size: int, edit: Any = None) -> bytes:
    """``stream`` fed to a Framer in reads of ``size`` bytes, each whole block through ``edit``."""
    framer = sse.Framer()
    out = b""
    for i in range(0, len(stream), size):
        block = framer.feed(stream[i : i + size])
        out += edit(block) if edit is not None and block else block
    return out + framer.flush()


@given(st.integers(1, len(STREAM)))
def test_the_framer_returns_whole_events_and_loses_nothing(size: int) -> None:
    framer = sse.Framer()
    pieces = [framer.feed(STREAM[i : i + size]) for i in range(0, len(STREAM), size)]
    assert all(p == b"" or p.endswith(b"\n\n") for p in pieces)  # never half an event
    assert b"".join(pieces) + framer.flush() == STREAM


def test_an_unterminated_tail_comes_back_from_flush() -> None:
    framer = sse.Framer()
    assert framer.feed(b"data: {}\n\ndata: par") == b"data: {}\n\n"
    assert framer.flush() == b"data: par" and framer.flush() == b""


def test_events_parse_data_lines_comments_and_crlf() -> None:
    found = sse.events(b": keep-alive\r\n\r\ndata: a\r\ndata: b\r\n\r\ndata: [DONE]\r\n\r\n")
    assert [e.data for e in found] == [None, b"a\nb", b"[DONE]"]
    assert found[2].done and not found[1].done
    assert found[1].json() is None  # not JSON
    assert sse.parse_event(b'data: {"x": 1}').json() == {"x": 1}
    assert sse.parse_event(b"data: [1, 2]").json() is None  # JSON, but not an object


def test_json_object_is_none_unless_a_dict() -> None:
    assert sse.json_object(b'{"a": 1}') == {"a": 1}
    assert sse.json_object(b"[1]") is None
    assert sse.json_object(b"{nope") is None


@given(st.integers(1, len(STREAM)))
def test_without_usage_drops_only_the_usage_event(size: int) -> None:
    assert framed(STREAM, size, sse.without_usage) == content("hel") + content("lo", "stop") + (
        sse.DONE
    )


def test_without_usage_passes_a_block_without_usage_untouched() -> None:
    block = content("a") + content("b")
    assert sse.without_usage(block) is block


def test_restamp_gives_each_follower_its_own_id_and_hides_usage() -> None:
    def one(block: bytes) -> bytes:
        return sse.restamp(block, id="chatcmpl-new", created=42, include_usage=False)

    out = framed(STREAM, 7, one)  # fed in awkward pieces: events are only emitted whole
    chunks = [e.json() for e in sse.events(out) if not e.done]
    assert [c["id"] for c in chunks] == ["chatcmpl-new"] * 2
    assert all(c["created"] == 42 for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["content"] == "hel"
    assert b"usage" not in out and out.endswith(sse.DONE)
    kept = sse.restamp(STREAM, id="x", created=1, include_usage=True)
    assert orjson.loads(sse.events(kept)[2].data or b"")["usage"] == USAGE


def test_restamp_passes_what_is_not_a_json_chunk_as_it_came() -> None:
    odd = b": comment\n\ndata: not json\n\n"
    assert sse.restamp(odd + sse.DONE, id="x", created=1, include_usage=False) == odd + sse.DONE


def test_usage_of_stream_reads_the_last_usage_event_from_a_tail() -> None:
    assert sse.usage_of_stream(STREAM) == USAGE
    assert sse.usage_of_stream(STREAM[len(STREAM) // 2 :]) == USAGE  # a cut first event is skipped
    assert sse.usage_of_stream(content("a") + sse.DONE) is None
    nulls = event({"choices": [], "usage": None}) + sse.DONE
    assert sse.usage_of_stream(nulls) is None


def test_encode_is_one_data_event() -> None:
    assert sse.events(sse.encode({"a": 1})) == [sse.Event(b'data: {"a":1}', b'{"a":1}')]


SOURCES = [{"corpus": "c", "document": "d", "version": 2}]


@given(st.integers(1, len(STREAM)))
def test_sources_go_on_the_finishing_chunk_once_whatever_the_reads(size: int) -> None:
    pending: list[dict[str, Any]] = SOURCES

    def stamp(block: bytes) -> bytes:  # as ProduceStep.streamed applies it
        nonlocal pending
        if pending and (out := sse.with_field_on_finish(block, "deja_sources", pending)):
            pending = []
            return out
        return block

    out = framed(STREAM + content("late", "length"), size, stamp)
    chunks = [e.json() for e in sse.events(out)]
    assert [c.get("deja_sources") if c else None for c in chunks] == [
        None,
        SOURCES,
        None,
        None,
        None,
    ]
    assert chunks[1] is not None and chunks[1]["choices"][0]["finish_reason"] == "stop"
    assert sse.events(out)[3].done


def test_with_field_on_finish_leaves_a_block_without_a_finish_alone() -> None:
    assert sse.with_field_on_finish(content("hel") + USAGE_EVENT, "f", 1) is None
    block = content("a") + content("b", "stop")
    out = sse.with_field_on_finish(block, "f", [1])
    assert out is not None and out.startswith(content("a"))  # untouched events pass as they came
    assert sse.events(out)[1].json() == {**orjson.loads(content("b", "stop")[6:]), "f": [1]}
