"""Replay a cached answer in the shape the request asks for: a JSON body or an SSE stream.

A replay always carries a fresh ``id`` and ``created``. ``usage`` is the usage of the request
that first produced the answer, unchanged; the ``X-Deja-Cache`` header says it cost no model time.
A streamed replay is sent as one body holding every event: it is a complete, valid SSE stream and
costs one write instead of one per chunk.
"""

from __future__ import annotations

import itertools
import re
import secrets
import time
from typing import Any

import orjson

from deja.cache.entry import CachedAnswer
from middleware.sse import DONE, encode

#: The extra response field that lists a RAG answer's sources (the SDK keeps unknown fields:
#: ``completion.model_extra["deja_sources"]``).
SOURCES_FIELD = "deja_sources"
#: Roughly how many characters one replayed ``delta.content`` chunk carries.
REPLAY_CHUNK_CHARS = 48

_WORDS = re.compile(r"\S+\s*|\s+")


def split_for_replay(text: str, size: int = REPLAY_CHUNK_CHARS) -> list[str]:
    """Split text at word boundaries into pieces of about ``size`` chars; joins back exactly."""
    pieces: list[str] = []
    current = ""
    for word in _WORDS.findall(text):
        current += word
        if len(current) >= size:
            pieces.append(current)
            current = ""
    if current:
        pieces.append(current)
    return pieces


_ID_PREFIX = secrets.token_hex(6)
_ID_COUNTER = itertools.count(1)


def fresh_id(endpoint: str) -> str:
    """Unique per process start and request, without a syscall per request."""
    prefix = "chatcmpl" if endpoint == "chat" else "cmpl"
    return f"{prefix}-deja{_ID_PREFIX}{next(_ID_COUNTER):08x}"


def replay_json(answer: CachedAnswer, *, model: str) -> bytes:
    """The answer as a non-streamed OpenAI response body."""
    return _json_head(answer) + _json_tail(answer, model)


def _json_head(answer: CachedAnswer) -> bytes:
    """``{"id":…,"object":…,"created":…,`` — the part that changes with every replay."""
    kind = b"chat.completion" if answer.endpoint == "chat" else b"text_completion"
    fresh = fresh_id(answer.endpoint).encode()
    return b'{"id":"%s","object":"%s","created":%d,' % (fresh, kind, int(time.time()))


def _json_tail(answer: CachedAnswer, model: str) -> bytes:
    """``"model":…,"choices":[…],"usage":…}`` — fixed for one answer and model."""
    body: dict[str, Any] = {"model": model}
    if answer.endpoint == "chat":
        choice: dict[str, Any] = {"index": 0, "message": answer.message, "logprobs": None}
    else:
        choice = {"index": 0, "text": answer.text, "logprobs": None}
    choice["finish_reason"] = answer.finish_reason
    body["choices"] = [choice]
    if answer.usage is not None:
        body["usage"] = answer.usage
    if answer.system_fingerprint is not None:
        body["system_fingerprint"] = answer.system_fingerprint
    if answer.sources is not None:
        body[SOURCES_FIELD] = answer.sources
    return orjson.dumps(body)[1:]


class JsonReplay:
    """``replay_json`` that serialises the fixed part of a body once per answer and model.

    An answer served from an in-process tier is the same object hit after hit, so its tail is
    kept (with the object, so its ``id()`` cannot be reused) for the ``max_entries`` answers
    replayed most recently; only the id and timestamp are written per hit.
    """

    def __init__(self, max_entries: int = 1024) -> None:
        self.max_entries = max_entries
        self._tails: dict[tuple[int, str], tuple[CachedAnswer, bytes]] = {}

    def __call__(self, answer: CachedAnswer, *, model: str) -> bytes:
        key = (id(answer), model)
        found = self._tails.get(key)
        if found is not None and found[0] is answer:
            return _json_head(answer) + found[1]
        tail = _json_tail(answer, model)
        if len(self._tails) >= self.max_entries:
            del self._tails[next(iter(self._tails))]
        self._tails[key] = (answer, tail)
        return _json_head(answer) + tail


def _chat_deltas(message: dict[str, Any]) -> list[dict[str, Any]]:
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    for field in ("reasoning_content", "reasoning"):
        reasoning = message.get(field)
        if isinstance(reasoning, str) and reasoning:
            deltas.extend({field: piece} for piece in split_for_replay(reasoning))
    content = message.get("content")
    if isinstance(content, str):
        deltas.extend({"content": piece} for piece in split_for_replay(content))
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:
        deltas.append({"refusal": refusal})
    tool_calls = message.get("tool_calls")
    if isinstance(tool_calls, list) and tool_calls:
        deltas.append({"tool_calls": [dict(call, index=i) for i, call in enumerate(tool_calls)]})
    return deltas


def replay_sse(answer: CachedAnswer, *, model: str, include_usage: bool) -> bytes:
    """The answer as a complete SSE stream of chunk objects ending in ``data: [DONE]``."""
    base: dict[str, Any] = {
        "id": fresh_id(answer.endpoint),
        "object": "chat.completion.chunk" if answer.endpoint == "chat" else "text_completion",
        "created": int(time.time()),
        "model": model,
    }
    if answer.system_fingerprint is not None:
        base["system_fingerprint"] = answer.system_fingerprint
    events: list[bytes] = []
    if answer.endpoint == "chat":
        for delta in _chat_deltas(answer.message or {}):
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
            events.append(encode({**base, "choices": [choice]}))
        last = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": answer.finish_reason}
    else:
        for piece in split_for_replay(answer.text or ""):
            choice = {"index": 0, "text": piece, "logprobs": None, "finish_reason": None}
            events.append(encode({**base, "choices": [choice]}))
        last = {"index": 0, "text": "", "logprobs": None, "finish_reason": answer.finish_reason}
    final: dict[str, Any] = {**base, "choices": [last]}
    if answer.sources is not None:  # as a streamed miss carries them (sse.with_sources)
        final[SOURCES_FIELD] = answer.sources
    events.append(encode(final))
    if include_usage and answer.usage is not None:
        events.append(encode({**base, "choices": [], "usage": answer.usage}))
    events.append(DONE)
    return b"".join(events)
