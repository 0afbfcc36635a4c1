"""Responses built with their raw header list directly.

Starlette's ``Response`` normalises headers through ``MutableHeaders`` on every construction;
on an exact hit that was a measurable share of the gateway's own CPU. ``prebuilt`` produces the
same ``Response`` (same ``__call__``) from bytes that are already final.
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.responses import Response

from middleware.sse import MEDIA_TYPE

JSON = b"application/json"
SSE = MEDIA_TYPE.encode()


RawHeaders = list[tuple[bytes, bytes]]


class _Prebuilt(Response):
    def __init__(self, body: bytes, media_type: bytes, raw: RawHeaders, status: int) -> None:
        self.status_code = status
        self.body = body
        self.background = None
        self.raw_headers = [(b"content-length", b"%d" % len(body)), (b"content-type", media_type)]
        self.raw_headers += raw


def prebuilt(
    body: bytes, media_type: bytes, headers: Mapping[str, str], status: int = 200
) -> Response:
    """A complete response; header names must be lower-case."""
    raw = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]
    return _Prebuilt(body, media_type, raw, status)


def prebuilt_raw(body: bytes, media_type: bytes, raw: RawHeaders, status: int = 200) -> Response:
    """A complete response from headers already encoded (lower-case names): the exact-hit
    path, where encoding a dict of headers was a measurable share of the work."""
    return _Prebuilt(body, media_type, raw, status)
