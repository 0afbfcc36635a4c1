"""The chat template: how a list of chat messages becomes one prompt.

``<|role name=.. tool_call_id=..|>\\n{content}\\n`` per message, text parts joined by newlines,
other parts as ``[type]``, assistant ``tool_calls`` appended as ``[tool_calls {json}]``, then
the generation prompt ``<|assistant|>\\n``. An earlier turn's rendering (without that trailing
tag) is a token-level prefix of a later turn's, which is what makes prefix caching work.

The simulator renders prompts with ``render_chat``; the gateway's prefix key (``deja.upstream.
prefix``) walks the same segments with ``chat_segments``, so a prefix key covers exactly the
tokens a simulated replica caches. A real vLLM replica uses its model's own template; the prefix
key then approximates it by this one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import orjson

#: A piece of the rendered prompt, with the content part it stands for when that part is not
#: text (an image: its text is only ``[image_url]``, so a caller may hash the part itself).
Segment = tuple[str, Mapping[str, Any] | None]


class PromptError(ValueError):
    """Messages of a shape the template cannot render (strict rendering only)."""


def canonical(value: Any) -> bytes:
    """Sorted-key JSON; falls back to the stdlib for what orjson refuses (ints over 64 bits)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr).encode()


def _tag(message: Mapping[str, Any], strict: bool) -> str:
    role = message.get("role")
    if strict and (not isinstance(role, str) or not role):
        raise PromptError("each message needs a string 'role'")
    tag = str(role)
    name = message.get("name")
    if isinstance(name, str) and name:
        tag = f"{tag} name={name}"
    tool_call_id = message.get("tool_call_id")
    if isinstance(tool_call_id, str) and tool_call_id:
        tag = f"{tag} tool_call_id={tool_call_id}"
    return tag


def _part(part: Any, strict: bool) -> Segment | None:
    if isinstance(part, str):
        return part, None
    if not isinstance(part, Mapping):
        if strict:
            raise PromptError("each content part must be an object")
        return None
    kind = part.get("type")
    if strict and not isinstance(kind, str):
        raise PromptError("each content part needs a string 'type'")
    if kind != "text":
        return f"[{kind}]", part
    text = part.get("text")
    if strict and not isinstance(text, str):
        raise PromptError("a text content part needs a string 'text'")
    return str(text or ""), None


def _content(content: Any, strict: bool) -> Iterator[Segment]:
    if isinstance(content, str):
        yield content, None
    elif isinstance(content, list):
        for index, part in enumerate(content):
            if index:
                yield "\n", None
            segment = _part(part, strict)
            if segment is not None:
                yield segment
    elif strict and content is not None:
        raise PromptError("message content must be a string, null or a list of parts")


#: The generation prompt that ends every rendered chat.
GENERATION_PROMPT = "<|assistant|>\n"


def message_segments(message: Any, *, strict: bool = False) -> Iterator[Segment]:
    """One message's pieces of the rendered prompt (see :func:`chat_segments`)."""
    if not isinstance(message, Mapping):
        if strict:
            raise PromptError("each message must be an object")
        return
    yield f"<|{_tag(message, strict)}|>\n", None
    yield from _content(message.get("content"), strict)
    tool_calls = message.get("tool_calls")
    if tool_calls:
        yield f"[tool_calls {canonical(tool_calls).decode()}]", None
    yield "\n", None


def chat_segments(messages: list[Any], *, strict: bool = False) -> Iterator[Segment]:
    """The rendered prompt, piece by piece. Lenient by default (what is not a message or a
    part is skipped: the gateway keys requests it has not fully validated); ``strict`` raises
    ``PromptError`` instead."""
    for message in messages:
        yield from message_segments(message, strict=strict)
    yield GENERATION_PROMPT, None


def render_message(message: Any) -> str:
    """One message as :func:`render_chat` renders it (strict), without the generation prompt:
    a chat's rendering is its messages' renderings then ``GENERATION_PROMPT``, which lets the
    KV router tokenize a conversation message by message and memoise each."""
    return "".join(text for text, _ in message_segments(message, strict=True))


def render_chat(messages: Any) -> str:
    """Render chat messages to one prompt string (strict: raises ``PromptError`` for shapes
    it cannot render, an empty list included)."""
    if not isinstance(messages, list) or not messages:
        raise PromptError("'messages' must be a non-empty list")
    return "".join(text for text, _ in chat_segments(messages, strict=True))
