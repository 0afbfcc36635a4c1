"""The shared fixtures: a real Redis, simulated replicas, and the gateway factory. Helpers they
build on live in ``tests/support.py``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from sim.config import SimConfig
from sim.runner import SimCluster, start_simulators
from tests.rediscluster import LocalRedisCluster, redis_cluster_url_from_env
from tests.support import RedisServer, gateway, redis_url_from_env


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
