"""The shared fixtures: a real Redis, simulated replicas, and the gateway factory. Helpers they
build on live in ``tests/support.py``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from sim.config import SimConfig
from sim.runner import SimCluster, start_simulators
from tests.support import RedisServer, gateway, redis_url_from_env


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
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
