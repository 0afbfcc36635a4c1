"""Test support: real servers on real sockets (uvicorn in the test loop, redis-server processes)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Generator
from pathlib import Path
from typing import Any

import uvicorn
from qdrant_client import AsyncQdrantClient

from app.main import create_app
from config.settings import Settings
from deja.vectors.collection import Collection, Indexes
from deja.vectors.edge import EdgeCollection
from deja.vectors.qdrant import QdrantCollection

#: The model the simulated replicas serve.
SIM_MODEL = "deja-sim-1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class _QuietServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


@contextlib.asynccontextmanager
async def serve(app: Any) -> AsyncIterator[str]:
    """Serve an ASGI app (lifespan on) on a free loopback port; yields its base URL."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    server = _QuietServer(
        uvicorn.Config(
            app,
            lifespan="on",
            log_level="warning",
            loop="none",
            http="httptools",
            access_log=False,
            timeout_graceful_shutdown=1,
        )
    )
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
            raise RuntimeError("server exited during start-up")
        await asyncio.sleep(0.005)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


#: Derived model files are shared by every gateway a test session starts.
MODEL_DIR = Path(tempfile.gettempdir()) / "deja-test-models"


@contextlib.asynccontextmanager
async def gateway(**settings: Any) -> AsyncIterator[tuple[str, Any]]:
    """A real gateway on a free port, with its own data dir; yields (base URL, app).

    The semantic layer is off unless a test turns it on (``semantic_enabled=True``): tests of
    the exact layer use random questions that a semantic layer could legitimately match. So are
    the corpora (``corpora_enabled=True``), which would load the embedder for every gateway.
    """
    settings.setdefault("semantic_enabled", False)
    settings.setdefault("corpora_enabled", False)
    settings.setdefault("model_dir", MODEL_DIR)
    with tempfile.TemporaryDirectory(prefix="deja-test-") as data_dir:
        settings.setdefault("data_dir", Path(data_dir))
        exporter = settings.pop("span_exporter", None)
        sink = settings.pop("access_sink", None) or io.BytesIO()
        app = create_app(Settings(**settings), span_exporter=exporter, access_sink=sink)
        async with serve(app) as url:
            yield url, app


class RedisServer:
    """A real ``redis-server`` process on a loopback port that a test can stop and restart."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed; `make test` installs it")
        self.proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as conn,
            ):
                conn.sendall(b"PING\r\n")
                if conn.recv(16).startswith(b"+PONG"):
                    return
            time.sleep(0.02)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None


def redis_url_from_env() -> str | None:
    return os.environ.get("DEJA_TEST_REDIS_URL")


#: The two backends every vector contract test runs on: Qdrant Edge in a temporary folder, and
#: the Qdrant server backend on qdrant-client's local mode (same client API; no server binary
#: can be installed here).
BACKENDS = ["edge", "server-local"]
CollectionFactory = Callable[..., Collection]


@contextlib.asynccontextmanager
async def collection_factory(kind: str, data_dir: Path) -> AsyncIterator[CollectionFactory]:
    """A factory of collections of ``kind`` over one backing location (``data_dir`` for Edge;
    for ``server-local`` one local-mode client shared by them all, as one server would be):
    ``make(name, dim, indexes, sparse=False, **server_options)``. Closes them all (and the
    client) at the end."""
    made: list[Collection] = []
    client = AsyncQdrantClient(location=":memory:") if kind == "server-local" else None

    def make(
        name: str, dim: int, indexes: Indexes, *, sparse: bool = False, **server: Any
    ) -> Collection:
        collection: Collection
        if client is None:
            collection = EdgeCollection(
                data_dir, collection=name, dim=dim, indexes=indexes, sparse=sparse
            )
        else:
            collection = QdrantCollection(
                collection=name, dim=dim, indexes=indexes, client=client, sparse=sparse, **server
            )
        made.append(collection)
        return collection

    try:
        yield make
    finally:
        for collection in made:
            await collection.close()
        if client is not None:
            await client.close()


@contextlib.asynccontextmanager
async def labelled_sim(folder: Path, *questions: str) -> AsyncIterator[Any]:
    """One SIMULATED replica that knows ``questions`` as one cluster (``--judge-labels``): one
    answer for all of them, and a "same" from its judge for any two."""
    from sim.config import SimConfig
    from sim.runner import start_simulators

    path = folder / "labels.jsonl"
    path.write_text("".join(json.dumps({"question": q, "cluster": 1}) + "\n" for q in questions))
    cluster = await start_simulators(1, SimConfig(speed=0, judge_labels=str(path)))
    try:
        yield cluster
    finally:
        await cluster.stop()


def fresh_tag() -> str:
    """A suffix that makes a question new to the module's shared cache: a six-digit number,
    so the mismatch check keeps it apart from the same question asked by another test (a hex
    tag without a digit, 0.28% of 20,000 drawn, was served that question's answer)."""
    return f"(ref {100_000 + uuid.uuid4().int % 900_000})"


async def until(condition: Callable[[], bool], within: float = 5.0) -> None:
    """Wait until ``condition()`` holds; fail the test if it does not within ``within`` s."""
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


def int8_weight_range(model: Path) -> tuple[int, int]:
    """The least and greatest quantised weight fed to a ``MatMulInteger`` of an ONNX model.
    Within [-64, 64] (7-bit weights), AVX2's ``vpmaddubsw`` cannot saturate a uint8 × int8 pair
    sum, so CPUs with and without VNNI compute the same integers."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(model)).graph
    weights = {init.name: init for init in graph.initializer}
    arrays = [
        numpy_helper.to_array(weights[node.input[1]])
        for node in graph.node
        if node.op_type == "MatMulInteger" and node.input[1] in weights
    ]
    if not arrays:
        raise AssertionError(f"{model} has no MatMulInteger with a constant weight")
    return min(int(a.min()) for a in arrays), max(int(a.max()) for a in arrays)
