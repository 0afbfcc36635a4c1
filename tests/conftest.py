"""The shared fixtures: a real Redis, simulated replicas, and the gateway factory. Helpers they
build on live in ``tests/support.py``."""

from __future__ import annotations

import asyncio
import faulthandler
import os
import sys
import threading
from collections.abc import AsyncIterator, Generator, Iterator
from typing import Any

import pytest

from sim.config import SimConfig
from sim.runner import SimCluster, start_simulators
from tests.rediscluster import LocalRedisCluster, redis_cluster_url_from_env
from tests.support import RedisServer, gateway, redis_url_from_env

#: No test (set-up and teardown included) takes this long; one that does is hung. Its stacks,
#: every asyncio task's included, go to stderr and the run ends (exit 3) instead of waiting
#: for CI's time limit with nothing to show.
HANG_SECONDS = float(os.environ.get("DEJA_TEST_HANG_SECONDS", "300"))
_loops: list[asyncio.AbstractEventLoop] = []


def _hung(item: pytest.Item) -> None:
    capture = item.config.pluginmanager.getplugin("capturemanager")
    if capture is not None:  # to the real stderr, not the test's captured output
        capture.suspend_global_capture(in_=True)
    nodeid = item.nodeid
    print(f"\n*** {nodeid} still running after {HANG_SECONDS:.0f} s: stacks", file=sys.stderr)
    faulthandler.dump_traceback(all_threads=True)
    done = threading.Event()

    def tasks() -> None:
        for task in asyncio.all_tasks():
            print(f"--- {task!r}", file=sys.stderr)
            task.print_stack(file=sys.stderr)
        done.set()

    for loop in _loops:
        if not loop.is_closed():
            loop.call_soon_threadsafe(tasks)
    done.wait(10)
    sys.stderr.flush()
    os._exit(3)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    timer = threading.Timer(HANG_SECONDS, _hung, args=(item,))
    timer.daemon = True
    timer.start()
    try:
        return (yield)
    finally:
        timer.cancel()


@pytest.fixture(scope="session", autouse=True)
async def _watch_loop() -> AsyncIterator[None]:
    """The session's event loop, for the hang report's task stacks."""
    _loops.append(asyncio.get_running_loop())
    yield


@pytest.fixture(scope="session", params=["node", "cluster"])
def redis_url(request: pytest.FixtureRequest) -> str:
    """Every shared-store test runs twice: against one Redis node and against a Redis Cluster
    (three masters, three replicas)."""
    name = "redis_node_url" if request.param == "node" else "redis_cluster_url"
    url: str = request.getfixturevalue(name)
    return url


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[LocalRedisCluster]:
    """A real local Redis Cluster of the session (a test may kill its masters: the failover
    tests start their own)."""
    cluster = LocalRedisCluster()
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def redis_cluster_url(request: pytest.FixtureRequest) -> str:
    """DEJA_TEST_REDIS_CLUSTER_URL if given, else the session's own local cluster."""
    given = redis_cluster_url_from_env()
    if given:
        return given
    cluster: LocalRedisCluster = request.getfixturevalue("redis_cluster")
    return cluster.url


@pytest.fixture(scope="session")
def redis_node_url() -> Iterator[str]:
    """A real Redis: DEJA_TEST_REDIS_URL if given, else our own redis-server on a free port."""
    given = redis_url_from_env()
    if given:
        yield given
        return
    server = RedisServer()
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
async def sims() -> AsyncIterator[SimCluster]:
    """Two simulated replicas with no simulated delay, shared by the session."""
    cluster = await start_simulators(2, SimConfig(speed=0))
    try:
        yield cluster
    finally:
        await cluster.stop()


@pytest.fixture(scope="session")
def make_gateway() -> Any:
    """The one gateway factory: ``async with make_gateway(**settings) as (url, app)`` runs a
    real gateway (uvicorn on a free loopback port, its own data dir)."""
    return gateway
