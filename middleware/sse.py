"""The one SSE framer: every stream the gateway relays, re-stamps or reads goes through it.

openai-python's ``_streaming.py`` keeps one decoder and one event type for every stream; so does
deja. :class:`Framer` cuts a byte stream into whole events (a partial event at the end of a
network read waits for its remainder), :func:`events` parses whole events into :class:`Event`,
and what the gateway does to a stream is a function over those events:

- :func:`without_usage` drops the usage-only event the gateway asked the replica for and the
  client did not;
- :func:`restamp` gives a coalesced follower its own ``id`` and ``created``;
- :func:`usage_of_stream` reads the usage event from a stream's last bytes;
- :func:`with_field_on_finish` adds a RAG answer's sources to the chunk that carries the
  ``finish_reason``.

Complete events pass through as the bytes that arrived (no re-encoding) unless a function has a
reason to change them, so relaying costs one ``rfind`` per read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

#: The media type of every SSE response; the one definition in the gateway.
MEDIA_TYPE = "text/event-stream"
#: The event that ends an OpenAI stream.
DONE = b"data: [DONE]\n\n"
#: An event ends at a blank line.
_END = b"\n\n"
#: A chunk whose ``finish_reason`` is a string (not ``null``): the one that ends a choice.
_FINISHED = re.compile(rb'"finish_reason"\s*:\s*"')

Usage = dict[str, Any]
"""An OpenAI ``usage`` object."""


def json_object(data: bytes) -> dict[str, Any] | None:
    """``data`` parsed, when it is a JSON object (None otherwise): the one "parse it, and give
    up unless it is a dict" of the request path, for an event's data and a whole JSON body."""
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def encode(payload: dict[str, Any]) -> bytes:
    """One ``data:`` event carrying ``payload`` as JSON."""
    return b"data: " + orjson.dumps(payload) + _END


@dataclass(frozen=True, slots=True)
class Event:
    """One whole SSE event: its lines as they arrived, and its ``data`` (the ``data:`` lines
    joined by newlines; None when it has none, e.g. a comment)."""

    raw: bytes
    data: bytes | None

    @property
    def done(self) -> bool:
        """The ``data: [DONE]`` that ends an OpenAI stream."""
        return self.data is not None and self.data.strip() == b"[DONE]"

    def json(self) -> dict[str, Any] | None:
        """The event's data as a JSON object, or None."""
        if self.data is None or self.done:
            return None
        return json_object(self.data)

    def wire(self) -> bytes:
        """The event as it is sent: its lines and the blank line that ends it."""
        return self.raw + _END


def parse_event(raw: bytes) -> Event:
    """One event's lines (without the blank line that ends it) → an :class:`Event`."""
    if b"data:" not in raw:
        return Event(raw, None)
    lines = [line[5:].lstrip(b" ") for line in raw.split(b"\n") if line.startswith(b"data:")]
    return Event(raw, b"\n".join(lines) if lines else None)


def events(block: bytes) -> list[Event]:
    """The whole events in ``block`` (CRLF line ends accepted), blank blocks skipped."""
    if b"\r\n" in block:
        block = block.replace(b"\r\n", b"\n")
    return [parse_event(raw) for raw in block.split(_END) if raw.strip()]


class Framer:
    """Cuts a byte stream into whole events: ``feed`` returns the complete events so far (as
    they arrived, each ending with its blank line), keeping a partial one for the next read."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> bytes:
        data = self._pending + chunk if self._pending else chunk
        cut = data.rfind(_END)
        if cut < 0:
            self._pending = data
            return b""
        self._pending = data[cut + 2 :]
        return data[: cut + 2]

    def flush(self) -> bytes:
        """What is left at the end of the stream (an unterminated event), as it arrived."""
        rest, self._pending = self._pending, b""
        return rest


def is_usage_only(event: Event) -> bool:
    """The event that carries only ``usage`` (``"choices": []``), sent when usage was asked."""
    if b'"usage"' not in event.raw or b'"choices"' not in event.raw:
        return False
    chunk = event.json()
    return chunk is not None and chunk.get("choices") == [] and bool(chunk.get("usage"))


def without_usage(block: bytes) -> bytes:
    """Whole events with the usage-only event dropped; the bytes unchanged when there is none
    (the common read: checked with one ``in``)."""
    if b'"usage"' not in block:
        return block
    return b"".join(e.wire() for e in events(block) if not is_usage_only(e))


def restamp(block: bytes, *, id: str, created: int, include_usage: bool) -> bytes:
    """Whole events with ``id`` and ``created`` replaced in every chunk that has them, and the
    usage-only event dropped unless ``include_usage``; anything that is not a JSON chunk
    passes as it arrived."""
    out: list[bytes] = []
    for event in events(block):
        chunk = event.json()
        if chunk is None:
            out.append(DONE if event.done else event.wire())
            continue
        if not include_usage and chunk.get("choices") == [] and chunk.get("usage"):
            continue
        if "id" in chunk:
            chunk["id"] = id
        if "created" in chunk:
            chunk["created"] = created
        out.append(encode(chunk))
    return b"".join(out)


def usage_of_stream(tail: bytes) -> Usage | None:
    """The ``usage`` of a stream from its last bytes (the usage event precedes ``[DONE]``);
    a partial first event in ``tail`` is simply not JSON and is passed over."""
    if b'"usage"' not in tail:
        return None
    for event in reversed(events(tail)):
        if b'"usage"' in event.raw:
            chunk = event.json()
            usage = chunk.get("usage") if chunk is not None else None
            if isinstance(usage, dict):
                return usage
    return None


def with_field_on_finish(block: bytes, field: str, value: Any) -> bytes | None:
    """Whole events with ``field`` set to ``value`` on the first chunk that carries a
    ``finish_reason`` (a streamed RAG answer's ``deja_sources``, as a hit's replay has them;
    the openai SDK keeps the unknown field: ``chunk.model_extra["deja_sources"]``); None when
    no event of ``block`` finishes. Only that event is parsed and re-encoded: the others pass
    as they arrived, and a block without a finish costs one regex search."""
    if not _FINISHED.search(block):
        return None
    out: list[bytes] = []
    stamped = False
    for event in events(block):
        chunk = None if stamped or not _FINISHED.search(event.raw) else event.json()
        if chunk is None:
            out.append(event.wire())
            continue
        chunk[field] = value
        out.append(encode(chunk))
        stamped = True
    return b"".join(out) if stamped else None
