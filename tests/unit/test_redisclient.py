"""Choosing a node or a cluster client from the URL, and the URLs of single cluster nodes."""

from __future__ import annotations

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from deja.redisclient import cluster_url, connect_redis, node_url


def test_a_plain_url_is_one_node_and_a_cluster_scheme_or_the_setting_a_cluster() -> None:
    assert cluster_url("redis://h:6379/0") is None
    assert cluster_url("rediss://u:p@h:6380") is None
    assert cluster_url("redis+cluster://h:7000") == "redis://h:7000"
    assert cluster_url("rediss+cluster://u:p@h:7000?ssl_cert_reqs=none") == (
        "rediss://u:p@h:7000?ssl_cert_reqs=none"
    )
    assert cluster_url("redis://h:7000", cluster=True) == "redis://h:7000"


async def test_connect_redis_builds_the_matching_client_without_connecting() -> None:
    node = connect_redis("redis://127.0.0.1:1/0", timeout=0.1)
    cluster = connect_redis("redis+cluster://127.0.0.1:1", timeout=0.1)
    try:
        assert isinstance(node, Redis) and not isinstance(node, RedisCluster)
        assert isinstance(cluster, RedisCluster)
    finally:
        await node.aclose()
        await cluster.aclose()


def test_a_node_url_keeps_scheme_credentials_and_options_and_swaps_the_address() -> None:
    seed = "rediss+cluster://user:secret@seed.example:7000/?ssl_cert_reqs=none"
    assert (
        node_url(seed, "10.0.0.7", 7003) == "rediss://user:secret@10.0.0.7:7003?ssl_cert_reqs=none"
    )
    assert node_url("redis://seed:7000", "10.0.0.8", 7001) == "redis://10.0.0.8:7001"
