"""Replica pool state, breakers, metric parsing and routing policies (no I/O)."""

from __future__ import annotations

import collections
import time

import pytest

from config.replicas import parse_replica
from deja.errors import NoHealthyReplicaError
from deja.upstream.health import parse_vllm_metrics
from deja.upstream.pool import Breaker, BreakerState, ReplicaPool
from deja.upstream.router import Router
from deja.upstream.upstream import retry_after

URLS = [f"http://10.0.0.{i}:8000" for i in range(1, 5)]


def pool(specs: list[str] | None = None) -> ReplicaPool:
    return ReplicaPool(specs or URLS, cooldown=10.0, scrape_interval=5.0)


def test_breaker_opens_after_consecutive_failures_and_half_opens_for_one_probe() -> None:
    b = Breaker()
    for _ in range(2):
        b.failure(now=0.0, cooldown=10.0)
    assert b.state is BreakerState.CLOSED and b.available(0.0)
    b.failure(now=0.0, cooldown=10.0)
    assert b.state is BreakerState.OPEN and not b.available(5.0)
    assert b.available(10.0)
    b.begin(10.0)
    assert b.state is BreakerState.HALF_OPEN and not b.available(10.0)  # one probe only
    b.failure(now=10.0, cooldown=10.0)
    assert b.state is BreakerState.OPEN and not b.available(15.0)
    b.begin(20.0)
    b.success()
    assert b.state is BreakerState.CLOSED and b.available(20.0)


def test_immediate_failures_and_retry_after() -> None:
    p = pool()
    r = p.replicas[0]
    p.record_failure(r, "HTTP 429", immediate=True, retry_after=60.0)
    assert r.breaker.state is BreakerState.OPEN
    assert not r.usable(r.breaker.open_until - 1.0) and r.usable(r.breaker.open_until)
    assert r.breaker.open_until - time.monotonic() > 50  # Retry-After (60 s), not the 10 s cooldown


def test_parse_replica_specs() -> None:
    assert parse_replica("http://a:1/") == ("http://a:1", 1.0)
    assert parse_replica("http://a:1;weight=2.5") == ("http://a:1", 2.5)
    for bad in ("http://a:1;weight=0", "http://a:1;color=red", "http://a:1;weight=x"):
        with pytest.raises(ValueError):
            parse_replica(bad)


def test_update_keeps_state_of_replicas_that_stay() -> None:
    p = pool()
    p.replicas[1].in_flight = 7
    p.update([URLS[1], URLS[2] + ";weight=3", "http://new:1"])
    assert [r.url for r in p.replicas] == [URLS[1], URLS[2], "http://new:1"]
    assert p.replicas[0].in_flight == 7 and p.replicas[1].weight == 3.0
    assert set(p.ring.replicas) == {URLS[1], URLS[2], "http://new:1"}


def test_metrics_parsing_accepts_current_and_deprecated_names() -> None:
    text = (
        "# HELP vllm:num_requests_running x\n"
        'vllm:num_requests_running{model_name="a"} 3.0\n'
        'vllm:num_requests_running{model_name="b"} 1.0\n'
        'vllm:num_requests_waiting{model_name="a"} 2.0 1700000000000\n'
        'vllm:gpu_cache_usage_perc{model_name="a"} 0.5\n'
        "vllm:prefix_cache_hits_total 99\n"
    )
    m = parse_vllm_metrics(text, scraped_at=1.0)
    assert (m.running, m.waiting, m.kv_cache_usage) == (4.0, 2.0, 0.5)
    m2 = parse_vllm_metrics('vllm:kv_cache_usage_perc{model_name="a"} 0.25\n', 1.0)
    assert m2.kv_cache_usage == 0.25 and m.num_gpu_blocks is None


def test_the_kv_cache_size_comes_from_vllms_cache_config_info() -> None:
    info = (
        'vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",'
        'gpu_memory_utilization="0.9",num_gpu_blocks="27000",num_cpu_blocks="None"} 1.0\n'
    )
    assert parse_vllm_metrics(info, 1.0).num_gpu_blocks == 27000
    two_engines = info + info.replace("27000", "3000")  # one series per engine: summed
    assert parse_vllm_metrics(two_engines, 1.0).num_gpu_blocks == 30000
    # another info series' num_gpu_blocks-like label is not the cache's
    other = 'vllm:model_config_info{num_gpu_blocks="5",max_num_seqs="8"} 1.0\n'
    m = parse_vllm_metrics(other, 1.0)
    assert m.num_gpu_blocks is None and m.max_num_seqs == 8


def test_load_combines_in_flight_and_fresh_scrapes() -> None:
    r = pool().replicas[0]
    r.metrics = parse_vllm_metrics("vllm:num_requests_running 5\nvllm:num_requests_waiting 1", 100)
    r.metrics.own_at_scrape = 2  # of the 6 on the replica, 2 were this gateway's
    r.in_flight = 3
    assert r.load(now=101.0, scrape_interval=5.0) == 3 + 4  # ours now + the others' 4
    r.in_flight = 0
    assert r.load(now=101.0, scrape_interval=5.0) == 4  # our finished ones do not linger
    assert r.load(now=200.0, scrape_interval=5.0) == 0  # a stale scrape does not count


def test_round_robin_rotates_and_least_loaded_picks_the_lightest() -> None:
    p = pool()
    rr = Router(p, "round_robin", 0.25)
    firsts = [rr.route("m", "k").order[0].url for _ in range(8)]
    assert firsts == URLS * 2
    p.replicas[0].in_flight, p.replicas[1].in_flight = 5, 0
    p.replicas[2].in_flight, p.replicas[3].in_flight = 3, 1
    ll = Router(p, "least_loaded", 0.25).route("m", "k")
    assert ll.reason == "least_loaded" and [r.url for r in ll.order] == [
        URLS[1],
        URLS[3],
        URLS[2],
        URLS[0],
    ]


def test_prefix_policy_is_sticky_spills_when_full_and_skips_unusable() -> None:
    p = pool()
    router = Router(p, "prefix", 0.25)
    route = router.route("m", "system-prompt-hash")
    home = route.order[0]
    assert route.reason == "home" and len(route.order) == 4
    assert all(router.route("m", "system-prompt-hash").order[0] is home for _ in range(5))
    home.in_flight = 10  # far above ⌈1.25 × 11 / 4⌉
    spilled = router.route("m", "system-prompt-hash")
    assert spilled.reason == "spill" and spilled.order[0] is not home
    home.in_flight = 0
    p.record_failure(home, "refused", immediate=True)
    assert router.route("m", "system-prompt-hash").order[0] is not home
    keyless = router.route("m", None)
    assert keyless.reason == "no_prefix"


def test_prefix_keys_spread_and_models_filter() -> None:
    p = pool()
    router = Router(p, "prefix", 0.25)
    homes = collections.Counter(router.route("m", f"k{i}").order[0].url for i in range(400))
    assert len(homes) == 4 and min(homes.values()) > 40
    p.set_models(p.replicas[0], [{"id": "only-here"}])
    for r in p.replicas[1:]:
        p.set_models(r, [{"id": "m"}])
    assert [r.url for r in router.route("only-here", "x").order] == [URLS[0]]
    for r in p.replicas:
        r.healthy = False
    with pytest.raises(NoHealthyReplicaError):
        router.route("m", "x")


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("5", 5.0),
        ("0", 0.0),
        ("1e9", 60.0),
        ("inf", None),
        ("nan", None),
        ("-3", None),
        ("x", None),
    ],
)
def test_retry_after_is_capped_and_never_trusted_blindly(
    header: str, expected: float | None
) -> None:
    assert retry_after({"retry-after": header}) == expected
