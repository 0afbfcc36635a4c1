"""Replay chunking and the stream <-> answer round trip."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from deja.cache.entry import CachedAnswer, answer_from_json
from middleware import sse
from middleware.answers import answer_from_sse
from middleware.replay import replay_json, replay_sse, split_for_replay

USAGE = {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}


def chat_answer(
    content: str | None = "Hello there, general Kenobi.", **message: Any
) -> CachedAnswer:
    return CachedAnswer(
        entry_id="e1",
        endpoint="chat",
        model="m",
        finish_reason="stop",
        created_at=1.0,
        message={"role": "assistant", "content": content, **message},
        usage=USAGE,
    )


@given(st.text(max_size=400), st.integers(1, 80))
def test_split_joins_back_exactly(text: str, size: int) -> None:
    pieces = split_for_replay(text, size)
    assert "".join(pieces) == text
    assert all(pieces)


def test_split_cuts_at_word_boundaries() -> None:
    pieces = split_for_replay("alpha beta gamma delta epsilon", 10)
    assert pieces == ["alpha beta ", "gamma delta ", "epsilon"]


def test_json_replay_has_fresh_id_and_openai_shape() -> None:
    first = orjson.loads(replay_json(chat_answer(), model="m"))
    second = orjson.loads(replay_json(chat_answer(), model="m"))
    assert first["id"] != second["id"] and first["id"].startswith("chatcmpl-")
    assert first["object"] == "chat.completion"
    assert first["choices"][0]["message"]["content"] == "Hello there, general Kenobi."
    assert first["choices"][0]["finish_reason"] == "stop"
    assert first["usage"] == USAGE


def events(raw: bytes) -> list[Any]:
    return [e.json() for e in sse.events(raw) if not e.done]


def test_sse_replay_ends_with_done_and_chunks_content() -> None:
    long = "word " * 60
    raw = replay_sse(chat_answer(long), model="m", include_usage=False)
    assert raw.endswith(b"data: [DONE]\n\n")
    chunks = events(raw)
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    contents = [c["choices"][0]["delta"].get("content", "") for c in chunks]
    assert "".join(contents) == long
    assert len(contents) > 3  # really chunked
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert all("usage" not in c for c in chunks)


def test_sse_replay_usage_chunk_only_when_asked() -> None:
    chunks = events(replay_sse(chat_answer(), model="m", include_usage=True))
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == USAGE


@given(st.text(max_size=300))
def test_chat_stream_round_trip(content: str) -> None:
    answer = chat_answer(content)
    rebuilt = answer_from_sse(
        replay_sse(answer, model="m", include_usage=True),
        entry_id="e1",
        endpoint="chat",
        created_at=1.0,
    )
    assert rebuilt == answer


def test_completion_stream_round_trip() -> None:
    answer = CachedAnswer(
        entry_id="e",
        endpoint="completion",
        model="m",
        finish_reason="length",
        created_at=2.0,
        text="once upon a time " * 10,
        usage=USAGE,
    )
    raw = replay_sse(answer, model="m", include_usage=True)
    assert events(raw)[0]["object"] == "text_completion"
    assert answer_from_sse(raw, entry_id="e", endpoint="completion", created_at=2.0) == answer
    body = orjson.loads(replay_json(answer, model="m"))
    assert body["choices"][0]["text"] == answer.text and body["object"] == "text_completion"


def test_tool_calls_round_trip_through_a_stream() -> None:
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}]
    answer = dataclasses.replace(chat_answer(None, tool_calls=calls), finish_reason="tool_calls")
    raw = replay_sse(answer, model="m", include_usage=False)
    rebuilt = answer_from_sse(raw, entry_id="e1", endpoint="chat", created_at=1.0)
    assert rebuilt is not None
    assert rebuilt.message == {"role": "assistant", "content": None, "tool_calls": calls}


def _stream(*chunks: dict[str, Any], done: bool = True) -> bytes:
    raw = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks)
    return raw + (b"data: [DONE]\n\n" if done else b"")


def _delta(content: str, finish: str | None = None, index: int = 0) -> dict[str, Any]:
    choice = {"index": index, "delta": {"content": content}, "finish_reason": finish}
    return {"model": "m", "choices": [choice]}


def test_incomplete_or_abnormal_streams_are_not_cacheable() -> None:
    kw: dict[str, Any] = {"entry_id": "e", "endpoint": "chat", "created_at": 0.0}
    ok = _stream(_delta("a"), _delta("", "stop"))
    assert answer_from_sse(ok, **kw) is not None
    assert answer_from_sse(_stream(_delta("a"), _delta("", "stop"), done=False), **kw) is None
    assert answer_from_sse(_stream(_delta("a")), **kw) is None  # no finish reason
    assert answer_from_sse(_stream(_delta("a"), _delta("", "content_filter")), **kw) is None
    assert answer_from_sse(_stream(_delta("a"), _delta("b", "stop", index=1)), **kw) is None
    assert answer_from_sse(_stream(_delta("a"), {"error": {"message": "x"}}), **kw) is None
    # CRLF framing and split network chunks do not matter
    assert answer_from_sse(ok.replace(b"\n", b"\r\n"), **kw) is not None


def test_answer_from_json_accepts_only_single_normal_choices() -> None:
    kw: dict[str, Any] = {"entry_id": "e", "endpoint": "chat", "created_at": 0.0}
    msg = {"role": "assistant", "content": "x"}
    one = {"model": "m", "choices": [{"index": 0, "message": msg, "finish_reason": "stop"}]}
    assert answer_from_json(one, **kw) is not None
    two = {"model": "m", "choices": one["choices"] * 2}
    assert answer_from_json(two, **kw) is None
    bad = {
        "model": "m",
        "choices": [{"index": 0, "message": msg, "finish_reason": "content_filter"}],
    }
    assert answer_from_json(bad, **kw) is None


def test_json_replay_reuses_the_fixed_part_and_equals_replay_json() -> None:
    from middleware.replay import JsonReplay

    answer = chat_answer()
    replay = JsonReplay(max_entries=1)
    first, again = replay(answer, model="m"), replay(answer, model="m")
    plain = replay_json(answer, model="m")
    bodies = [orjson.loads(b) for b in (first, again, plain)]
    assert len({b["id"] for b in bodies}) == 3  # fresh ids every time
    for body in bodies:
        body.pop("id")
    assert bodies[0] == bodies[1] == bodies[2]
    assert first.split(b'"model"')[1] == plain.split(b'"model"')[1]  # byte for byte
    other = chat_answer(content="something else")
    assert orjson.loads(replay(other, model="m"))["choices"][0]["message"]["content"] == (
        "something else"
    )
    assert orjson.loads(replay(answer, model="m2"))["model"] == "m2"
