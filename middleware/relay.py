"""Rebuild a complete answer from a relayed SSE stream, after the stream has ended.

The relay only appends raw bytes while it streams; this parsing runs afterwards, off the
response path, and yields an answer only for a stream that ended with ``data: [DONE]``.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from deja.cache.entry import NORMAL_FINISH, CachedAnswer
from deja.cache.keys import Endpoint


def iter_sse_data(raw: bytes) -> list[bytes]:
    """The ``data:`` payloads of an SSE byte stream, in order (multi-line data joined by \\n)."""
    payloads: list[bytes] = []
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        lines = [line[5:].lstrip(b" ") for line in block.split(b"\n") if line.startswith(b"data:")]
        if lines:
            payloads.append(b"\n".join(lines))
    return payloads


class _ChatState:
    def __init__(self) -> None:
        self.role = "assistant"
        self.text: dict[str, list[str]] = {}
        self.tool_calls: dict[int, dict[str, Any]] = {}

    def feed(self, delta: dict[str, Any]) -> None:
        role = delta.get("role")
        if isinstance(role, str):
            self.role = role
        for field in ("content", "reasoning_content", "reasoning", "refusal"):
            piece = delta.get(field)
            if isinstance(piece, str):
                self.text.setdefault(field, []).append(piece)
        for call in delta.get("tool_calls") or []:
            if isinstance(call, dict):
                self._merge_tool_call(call)

    def _merge_tool_call(self, call: dict[str, Any]) -> None:
        index = call.get("index", 0)
        slot = self.tool_calls.setdefault(
            index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
        )
        if call.get("id"):
            slot["id"] = call["id"]
        if call.get("type"):
            slot["type"] = call["type"]
        function = call.get("function") or {}
        if function.get("name"):
            slot["function"]["name"] += function["name"]
        if function.get("arguments"):
            slot["function"]["arguments"] += function["arguments"]

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": self.role}
        content = "".join(self.text.get("content", []))
        message["content"] = content if content or not self.tool_calls else None
        for field in ("reasoning_content", "reasoning", "refusal"):
            if field in self.text:
                message[field] = "".join(self.text[field])
        if self.tool_calls:
            message["tool_calls"] = [self.tool_calls[i] for i in sorted(self.tool_calls)]
        return message


def answer_from_sse(
    raw: bytes, *, entry_id: str, endpoint: Endpoint, created_at: float
) -> CachedAnswer | None:
    """The answer a finished stream carried, or None when it is incomplete or not cacheable."""
    payloads = iter_sse_data(raw)
    if not payloads or payloads[-1].strip() != b"[DONE]":
        return None
    chat = _ChatState()
    text: list[str] = []
    finish: str | None = None
    model = ""
    usage: dict[str, Any] | None = None
    fingerprint: str | None = None
    for payload in payloads[:-1]:
        try:
            chunk = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(chunk, dict) or "error" in chunk:
            return None
        model = chunk.get("model") or model
        fingerprint = chunk.get("system_fingerprint") or fingerprint
        if isinstance(chunk.get("usage"), dict):
            usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                return None  # n > 1: never cached
            if endpoint == "chat":
                chat.feed(choice.get("delta") or {})
            elif isinstance(choice.get("text"), str):
                text.append(choice["text"])
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
    if finish not in NORMAL_FINISH:
        return None
    assert finish is not None
    return CachedAnswer(
        entry_id=entry_id,
        endpoint=endpoint,
        model=model,
        finish_reason=finish,
        created_at=created_at,
        message=chat.message() if endpoint == "chat" else None,
        text="".join(text) if endpoint == "completion" else None,
        usage=usage,
        system_fingerprint=fingerprint,
    )


class UsageChunkFilter:
    """Drops the usage-only event (``"choices": []`` with ``usage``) from a relayed stream.

    deja asks the replica for usage on every stream it may store, so that a later replay can
    report usage however it is asked for. When the client did not ask for it, this filter keeps
    the extra event from reaching the client. Complete events pass through as soon as they
    arrive; only a partial event at the end of a network chunk waits for its remainder.
    """

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> bytes:
        data = self._pending + chunk if self._pending else chunk
        cut = data.rfind(b"\n\n")
        if cut < 0:
            self._pending = data
            return b""
        self._pending = data[cut + 2 :]
        events = data[: cut + 2]
        if b'"usage"' not in events:
            return events
        kept = [e for e in events[:-2].split(b"\n\n") if not _is_usage_only(e)]
        return b"".join(e + b"\n\n" for e in kept)

    def flush(self) -> bytes:
        rest, self._pending = self._pending, b""
        return rest


def _is_usage_only(event: bytes) -> bool:
    if b'"usage"' not in event or b'"choices"' not in event:
        return False
    payloads = iter_sse_data(event)
    if len(payloads) != 1:
        return False
    try:
        chunk = orjson.loads(payloads[0])
    except orjson.JSONDecodeError:
        return False
    return isinstance(chunk, dict) and chunk.get("choices") == [] and bool(chunk.get("usage"))


_FINISHED = re.compile(rb'"finish_reason"\s*:\s*"')


class SourcesStamp:
    """Adds a RAG answer's sources to a relayed stream: the ``deja_sources`` field on the chunk
    that carries the ``finish_reason`` (the last content chunk), as a hit's replay does
    (``middleware.replay.replay_sse``). The openai SDK keeps the unknown field:
    ``chunk.model_extra["deja_sources"]``. Only that one event is parsed and re-serialised;
    complete events pass as soon as they arrive, a partial one waits for its remainder."""

    def __init__(self, field: str, sources: list[dict[str, Any]]) -> None:
        self._field = field
        self._sources = sources
        self._pending = b""
        self._done = False

    def feed(self, chunk: bytes) -> bytes:
        data = self._pending + chunk if self._pending else chunk
        if self._done:
            self._pending = b""
            return data
        cut = data.rfind(b"\n\n")
        if cut < 0:
            self._pending = data
            return b""
        self._pending = data[cut + 2 :]
        events = data[: cut + 2]
        if not _FINISHED.search(events):
            return events
        return b"".join(self._stamp(e) + b"\n\n" for e in events[:-2].split(b"\n\n"))

    def flush(self) -> bytes:
        rest, self._pending = self._pending, b""
        return rest

    def _stamp(self, event: bytes) -> bytes:
        if self._done or not _FINISHED.search(event):
            return event
        payloads = iter_sse_data(event)
        try:
            chunk = orjson.loads(payloads[0]) if len(payloads) == 1 else None
        except orjson.JSONDecodeError:
            return event
        if not isinstance(chunk, dict):
            return event
        self._done = True
        chunk[self._field] = self._sources
        return b"data: " + orjson.dumps(chunk)


def with_usage_requested(body: dict[str, Any]) -> bytes:
    """The request body re-serialised with ``stream_options.include_usage`` on."""
    options = body.get("stream_options") or {}
    return orjson.dumps({**body, "stream_options": {**options, "include_usage": True}})
