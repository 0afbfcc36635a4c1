"""Slow clients cannot starve the rest (issue 19, finding 4): ``deja serve``'s protocol closes a
connection that has not sent its headers within the deadline, and at its connection cap a new
connection evicts the one waiting longest for its headers. Real uvicorn, real sockets."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from app.main import create_app
from app.protocol import GuardedProtocol, connection_cap, guarded_protocol
from config.settings import Settings
from sim.runner import SimCluster
from tests.support import MODEL_DIR

pytestmark = pytest.mark.integration

CAP = 32
DEADLINE = 0.6


@contextlib.asynccontextmanager
async def guarded_gateway(replicas: list[str], data_dir: Path) -> AsyncIterator[tuple[str, Any]]:
    settings = Settings(
        replicas=replicas,
        data_dir=data_dir,
        model_dir=MODEL_DIR,
        semantic_enabled=False,
        corpora_enabled=False,
    )
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        create_app(settings),
        lifespan="on",
        loop="none",
        http=guarded_protocol(DEADLINE, CAP),
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        assert not task.done(), "server exited during start-up"
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", server
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


async def slow_client(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # the headers never end
    await writer.drain()
    return reader, writer


async def test_slow_connections_are_cut_and_evicted_so_normal_requests_pass(
    sims: SimCluster, tmp_path: Path
) -> None:
    async with guarded_gateway(sims.urls, tmp_path) as (url, server):
        port = int(url.rsplit(":", 1)[1])
        slow = [await slow_client(port) for _ in range(3 * CAP)]  # three times the cap
        held = len(server.server_state.connections)
        assert held <= CAP + 1, held  # never more than the cap (+ the one being decided)
        latencies = []
        for _ in range(40):  # each on a new connection, while slow ones keep arriving
            slow.append(await slow_client(port))
            started = time.perf_counter()
            async with httpx.AsyncClient(timeout=5) as http:
                reply = await http.get(url + "/healthz")
            latencies.append(time.perf_counter() - started)
            assert reply.status_code == 200
        assert all(isinstance(p, GuardedProtocol) for p in server.server_state.connections)
        await asyncio.sleep(DEADLINE + 0.5)
        closed = 0
        for reader, writer in slow:
            with contextlib.suppress(ConnectionError):
                data = await asyncio.wait_for(reader.read(1), 1.0)
                closed += data == b""
            writer.close()
        assert closed == len(slow)  # every slow connection was closed by the server
        assert len(server.server_state.connections) <= 1


def test_the_cap_stays_below_the_open_file_limit() -> None:
    assert connection_cap(10_000, 1024) == 1024 - 256
    assert connection_cap(500, 65536) == 500
