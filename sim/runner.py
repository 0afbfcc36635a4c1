"""Run simulated vLLM replicas as real uvicorn servers.

:func:`start_simulators` embeds servers in the running event loop (for tests and
benchmarks); :func:`run_simulator` blocks and serves one replica (for ``deja sim``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import socket
from collections.abc import Generator
from dataclasses import dataclass, field
from types import TracebackType

import uvicorn
from starlette.applications import Starlette

from sim.config import SimConfig
from sim.server import create_sim_app

__all__ = ["SimCluster", "run_simulator", "start_simulators"]

logger = logging.getLogger("sim")

_STOP_TIMEOUT_S = 5.0


#: The asyncio task name of an embedded replica's server (``deja-sim-0``, ...).
TASK_PREFIX = "deja-sim-"


class _SimServerLogs(logging.Filter):
    """Names the simulated replica in uvicorn's own lines ("Started server process [pid]")
    when they come from an embedded replica's task, so a demo's log tells the gateway's
    server from the simulators' (all share one process and uvicorn's one logger)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            task = asyncio.current_task()
        except RuntimeError:
            return True
        if task is not None and task.get_name().startswith(TASK_PREFIX):
            replica = task.get_name().removeprefix(TASK_PREFIX)
            record.msg = f"simulated replica sim-{replica} (deja sim): {record.msg}"
            if hasattr(record, "color_message"):
                del record.color_message
        return True


def _name_sim_logs() -> None:
    target = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _SimServerLogs) for f in target.filters):
        target.addFilter(_SimServerLogs())


class _EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves the host process's signal handlers alone."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


@dataclass
class SimCluster:
    """Simulated replicas served in the current event loop; ``urls[i]`` serves ``apps[i]``.

    Use ``await cluster.stop()`` (or ``async with``) to shut them down.
    """

    urls: list[str]
    apps: list[Starlette]
    servers: list[uvicorn.Server] = field(repr=False)
    tasks: list[asyncio.Task[None]] = field(repr=False)

    async def stop(self) -> None:
        """Stop all servers (in-flight requests get a short grace period)."""
        for server in self.servers:
            server.should_exit = True
        if not self.tasks:
            return
        _, pending = await asyncio.wait(self.tasks, timeout=_STOP_TIMEOUT_S)
        for task in pending:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def __aenter__(self) -> SimCluster:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


def _bind(host: str) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    sock.setblocking(False)
    return sock


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def start_simulators(n: int, config: SimConfig, host: str = "127.0.0.1") -> SimCluster:
    """Start ``n`` simulated replicas as uvicorn servers in the current event loop.

    Each listens on its own free port of ``host`` and is named
    ``f"{config.replica_name}-{i}"`` (``sim-0``, ``sim-1``, … by default); otherwise they
    share ``config``. Returns once every server has started.
    """
    cluster = SimCluster(urls=[], apps=[], servers=[], tasks=[])
    _name_sim_logs()
    try:
        for i in range(n):
            app = create_sim_app(
                config.model_copy(update={"replica_name": f"{config.replica_name}-{i}"})
            )
            sock = _bind(host)
            server = _EmbeddedServer(
                uvicorn.Config(
                    app,
                    # No log_level: uvicorn would set it on its shared loggers and silence the
                    # host process's own "Uvicorn running on ..." lines.
                    log_config=None,
                    lifespan="off",
                    loop="none",
                    http="h11" if importlib.util.find_spec("httptools") is None else "httptools",
                    ws="none",
                    access_log=False,
                    timeout_graceful_shutdown=1,
                )
            )
            task = asyncio.create_task(server.serve(sockets=[sock]), name=f"{TASK_PREFIX}{i}")
            cluster.apps.append(app)
            cluster.servers.append(server)
            cluster.tasks.append(task)
            cluster.urls.append(_url(host, sock.getsockname()[1]))
        for started, task in zip(cluster.servers, cluster.tasks, strict=True):
            while not started.started:
                if task.done():
                    task.result()
                    raise RuntimeError("simulator server exited during startup")
                await asyncio.sleep(0.005)
    except BaseException:
        await cluster.stop()
        raise
    return cluster


def run_simulator(config: SimConfig, host: str, port: int) -> None:
    """Serve one simulated replica on ``host:port`` until interrupted (blocking)."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s:     %(message)s")
    logger.setLevel(logging.INFO)
    loop = "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"
    http = "httptools" if importlib.util.find_spec("httptools") is not None else "h11"
    logger.warning(
        "SIMULATED vLLM replica %r serving model %r on %s - for tests and demos only, "
        "not a real model (block_size=%d kv_blocks=%d max_num_seqs=%d speed=%g)",
        config.replica_name,
        config.model,
        _url(host, port),
        config.block_size,
        config.kv_blocks,
        config.max_num_seqs,
        config.speed,
    )
    uvicorn.run(
        create_sim_app(config),
        host=host,
        port=port,
        loop=loop,
        http=http,
        lifespan="off",
        log_level="info",
        access_log=False,
    )
