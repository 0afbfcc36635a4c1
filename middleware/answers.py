"""A replica's answer as the request path handles it: parsed for the cache (from a JSON body,
or from a stream after it ended), its usage read, and the RAG sources added for the client.

Parsing a stream runs after it has ended, off the relay: the relay only appends raw bytes while
it streams, and only a stream that ended with ``data: [DONE]`` yields an answer.
"""

from __future__ import annotations

from typing import Any

import orjson

from deja.cache.entry import NORMAL_FINISH, CachedAnswer, answer_from_json
from deja.cache.keys import Endpoint
from middleware.replay import SOURCES_FIELD
from middleware.sse import Usage, events, json_object


def parse_answer(
    body: bytes, entry_id: str, endpoint: Endpoint, created: float
) -> CachedAnswer | None:
    """The cacheable answer in a replica's JSON body, or None."""
    parsed = json_object(body)
    if parsed is None:
        return None
    return answer_from_json(parsed, entry_id=entry_id, endpoint=endpoint, created_at=created)


def with_sources(body: bytes, sources: list[dict[str, Any]]) -> bytes:
    """A replica's JSON answer with the ``deja_sources`` field added (left as it is when it is
    not a JSON object)."""
    parsed = json_object(body)
    if parsed is None:
        return body
    parsed[SOURCES_FIELD] = sources
    return orjson.dumps(parsed)


def usage_of_json(body: bytes) -> Usage | None:
    """``usage`` of a JSON answer, None when it has none."""
    if b'"usage"' not in body:
        return None
    parsed = json_object(body)
    usage = parsed.get("usage") if parsed is not None else None
    return usage if isinstance(usage, dict) else None


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
    found = [e for e in events(raw) if e.data is not None]
    if not found or not found[-1].done:
        return None
    chat = _ChatState()
    text: list[str] = []
    finish: str | None = None
    model = ""
    usage: dict[str, Any] | None = None
    fingerprint: str | None = None
    for event in found[:-1]:
        chunk = event.json()
        if chunk is None or "error" in chunk:
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
