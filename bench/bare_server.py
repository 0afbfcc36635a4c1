"""A bare ASGI server: the floor a Python gateway on uvicorn can reach.

A raw ASGI callable (no framework) served by uvicorn with one worker on uvloop + httptools,
exactly the server stack of ``deja serve``. Every POST is answered with a fixed body and fixed
headers read at start from files, so it returns the same bytes as a gateway exact hit; the
request body is read fully first, as the gateway does. ``GET /healthz`` answers 200.

    python bench/bare_server.py --port 9000 --body body.bin --headers headers.json

``headers.json`` is a JSON list of ``[name, value]`` pairs; ``content-length`` is computed here,
``date`` and ``server`` are added by uvicorn (as for the gateway).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import uvicorn

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_SKIP = {"content-length", "date", "server", "transfer-encoding", "connection"}


def load_headers(path: Path, body: bytes) -> list[tuple[bytes, bytes]]:
    pairs = json.loads(path.read_text())
    headers = [
        (str(name).lower().encode("latin-1"), str(value).encode("latin-1"))
        for name, value in pairs
        if str(name).lower() not in _SKIP
    ]
    headers.append((b"content-length", str(len(body)).encode()))
    return headers


def make_app(body: bytes, headers: list[tuple[bytes, bytes]]) -> ASGIApp:
    start: Message = {"type": "http.response.start", "status": 200, "headers": headers}
    answer: Message = {"type": "http.response.body", "body": body, "more_body": False}
    health_start: Message = {
        "type": "http.response.start",
        "status": 200,
        "headers": [(b"content-type", b"application/json"), (b"content-length", b"15")],
    }
    health_body: Message = {"type": "http.response.body", "body": b'{"status":"ok"}'}
    not_found: Message = {
        "type": "http.response.start",
        "status": 404,
        "headers": [(b"content-length", b"0")],
    }
    empty: Message = {"type": "http.response.body", "body": b""}

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if kind != "http":
            return
        method = scope["method"]
        if method == "POST":
            # Read the whole request body, as the gateway must before answering.
            more = True
            while more:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                more = message.get("more_body", False)
            await send(start)
            await send(answer)
        elif method == "GET" and scope["path"] == "/healthz":
            await send(health_start)
            await send(health_body)
        else:
            await send(not_found)
            await send(empty)

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--body", type=Path, required=True, help="file with the response body")
    parser.add_argument(
        "--headers", type=Path, required=True, help="JSON list of [name, value] response headers"
    )
    args = parser.parse_args()
    body = args.body.read_bytes()
    app = make_app(body, load_headers(args.headers, body))
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        access_log=False,
        log_level="warning",
        workers=None,
        # Same server settings as `deja serve`, so the comparison is uvicorn against uvicorn.
        proxy_headers=False,
        server_header=False,
    )


if __name__ == "__main__":
    main()
