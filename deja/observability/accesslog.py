"""The access log: one JSON line per request, written in batches off the request path.

Formatting a line costs one ``orjson.dumps``; the request only appends it to a buffer, and a
background task writes the buffer to the sink (stderr by default) every ``FLUSH_SECONDS`` in one
write. Lines hold ids, tenant, outcome, similarity, replica and latency: never prompts or keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from typing import Any, BinaryIO

import orjson

FLUSH_SECONDS = 0.2
#: Flush early when this many lines are waiting.
MAX_PENDING = 1024


class AccessLog:
    """Buffered JSON-lines writer."""

    def __init__(self, sink: BinaryIO | None = None) -> None:
        self._sink = sink if sink is not None else sys.stderr.buffer
        self._pending: list[bytes] = []

    def write(self, line: dict[str, Any]) -> None:
        self._pending.append(orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE))
        if len(self._pending) >= MAX_PENDING:
            self.flush()

    def request(
        self,
        *,
        request_id: str,
        tenant: str,
        route: str,
        outcome: str,
        status: int,
        seconds: float,
        reason: str = "",
        model: str | None = None,
        similarity: float | None = None,
        entry: str | None = None,
        replica: str | None = None,
    ) -> None:
        """One request's line, the same keys on every route (null where a route has no such
        thing: a rejected request has no model yet), then ``reason`` when there is one."""
        line: dict[str, Any] = {
            "ts": round(time.time(), 3),
            "request_id": request_id,
            "tenant": tenant,
            "route": route,
            "model": model,
            "outcome": outcome,
            "similarity": similarity,
            "entry": entry,
            "replica": replica,
            "status": status,
            "latency_ms": round(seconds * 1000, 3),
        }
        if reason:
            line["reason"] = reason
        self.write(line)

    def flush(self) -> None:
        if not self._pending:
            return
        data, self._pending = b"".join(self._pending), []
        with contextlib.suppress(OSError, ValueError):
            self._sink.write(data)
            self._sink.flush()

    async def run_forever(self) -> None:
        try:
            while True:
                await asyncio.sleep(FLUSH_SECONDS)
                self.flush()
        finally:
            self.flush()
