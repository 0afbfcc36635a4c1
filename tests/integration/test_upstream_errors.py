"""What a client reads when a replica fails (issue 19, finding 11): a JSON 502 never names the
replica's host:port, and an answer cut mid-generation says so (not "while connecting")."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from tests.support import SIM_MODEL

pytestmark = pytest.mark.integration

MODELS = orjson.dumps({"object": "list", "data": [{"id": SIM_MODEL, "object": "model"}]})


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A replica that answers /health, /v1/models and /metrics, and cuts every completion
    after its status line and a few bytes of a 4 KB body."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            line = head.split(b"\r\n", 1)[0].decode()
            length = 0
            for header in head.split(b"\r\n")[1:]:
                if header.lower().startswith(b"content-length:"):
                    length = int(header.split(b":", 1)[1])
            if length:
                await reader.readexactly(length)
            if line.startswith("POST"):
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b'content-length: 4096\r\n\r\n{"id":"cmpl-1","choices":[{"mess'
                )
                await writer.drain()
                writer.close()
                return
            body = MODELS if "/v1/models" in line else b"{}" if "/health" in line else b""
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                + f"content-length: {len(body)}\r\n\r\n".encode()
                + body
            )
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


@pytest.fixture
async def cutting_replica() -> AsyncIterator[str]:
    server = await asyncio.start_server(_handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()


async def test_a_cut_answer_is_a_502_that_says_so_and_names_no_replica(
    cutting_replica: str, make_gateway: Any
) -> None:
    async with (
        make_gateway(replicas=[cutting_replica]) as (url, _),
        httpx.AsyncClient(base_url=url, timeout=10) as http,
    ):
        body = {"model": SIM_MODEL, "messages": [{"role": "user", "content": "Hello?"}]}
        reply = await http.post("/v1/chat/completions", json=body)
        assert reply.status_code == 502, reply.text
        error = reply.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        host_port = cutting_replica.removeprefix("http://")
        assert host_port not in reply.text
        assert "connecting" not in error["message"]
        assert "mid-answer" in error["message"]
