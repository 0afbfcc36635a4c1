"""Routing by resident prefix over real sockets: simulated replicas publishing vLLM KV events
on real ZMQ sockets, the gateway subscribed; residency, multi-turn, tenant salts, lost events,
a silent publisher and a cleared cache."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml

from deja.tenancy.keyring import key_hash
from sim.config import SimConfig
from sim.runner import SimCluster, start_simulators
from tests.kvsupport import TOKENIZER
from tests.support import SIM_MODEL, free_port

pytestmark = pytest.mark.integration

ADMIN = {"authorization": "Bearer adm"}
UNCACHED = {"cache-control": "no-cache, no-store"}
KEYS = {"alpha": "key-alpha-0001", "beta": "key-beta-0002"}


def system_prompt(i: int) -> str:
    return f"You are assistant {i}. " + " ".join(f"rule {i}-{n} is important." for n in range(80))


async def start(n: int) -> tuple[list[SimCluster], dict[str, Any]]:
    sims, events = [], {}
    for _ in range(n):
        pub, replay = free_port(), free_port()
        config = SimConfig(
            speed=0,
            tokenizer=TOKENIZER,
            hash_seed="0",
            kv_events_config=orjson.dumps(
                {
                    "enable_kv_cache_events": True,
                    "publisher": "zmq",
                    "endpoint": f"tcp://*:{pub}",
                    "replay_endpoint": f"tcp://*:{replay}",
                }
            ).decode(),
        )
        cluster = await start_simulators(1, config)
        sims.append(cluster)
        events[cluster.urls[0]] = {
            "endpoint": f"tcp://127.0.0.1:{pub}",
            "replay_endpoint": f"tcp://127.0.0.1:{replay}",
        }
    return sims, events


@pytest.fixture
async def cluster() -> AsyncIterator[tuple[list[SimCluster], dict[str, Any]]]:
    sims, events = await start(2)
    try:
        yield sims, events
    finally:
        for sim in sims:
            await sim.stop()


def settings(sims: list[SimCluster], events: dict[str, Any], keys: Path, **extra: Any) -> Any:
    return {
        "replicas": [s.urls[0] for s in sims],
        "admin_key": "adm",
        "keys_file": keys,
        "cache_enabled": False,
        "health_check_interval_seconds": 0.2,
        "kv_models": {
            SIM_MODEL: {"tokenizer": TOKENIZER, "chat_template": "sim", "hash_seed": "0"}
        },
        "kv_events": events,
        **extra,
    }


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    tenants = {name: {"key_hashes": [key_hash(k)]} for name, k in KEYS.items()}
    path = tmp_path / "keys.yaml"
    path.write_text(yaml.safe_dump({"tenants": tenants}))
    return path


def auth(tenant: str) -> dict[str, str]:
    return {**UNCACHED, "authorization": f"Bearer {KEYS[tenant]}"}


async def ask(
    http: httpx.AsyncClient, gw: str, messages: list[dict[str, str]], tenant: str = "alpha"
) -> httpx.Response:
    body = {"model": SIM_MODEL, "messages": messages, "max_tokens": 8}
    resp = await http.post(gw + "/v1/chat/completions", json=body, headers=auth(tenant))
    assert resp.status_code == 200, resp.text
    return resp


async def index_of(http: httpx.AsyncClient, gw: str, url: str) -> dict[str, Any]:
    doc = (await http.get(gw + "/admin/replicas", headers=ADMIN)).json()
    return next(r["kv_index"] for r in doc["replicas"] if r["url"] == url)


async def until(check: Any, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


def replica_url(resp: httpx.Response, sims: list[SimCluster]) -> str:
    name = resp.headers["x-deja-replica"]
    return next(s.urls[0] for s in sims if s.urls[0].endswith(name))


async def test_resident_prefix_and_the_conversation_are_followed(
    cluster: tuple[list[SimCluster], dict[str, Any]], keys: Path, make_gateway: Any
) -> None:
    sims, events = cluster
    async with (
        make_gateway(**settings(sims, events, keys)) as (gw, _),
        httpx.AsyncClient(timeout=10) as http,
    ):
        convo = [
            {"role": "system", "content": system_prompt(1)},
            {"role": "user", "content": "hi"},
        ]
        first = await ask(http, gw, convo)
        assert first.headers["x-deja-route"] in ("home", "spill", "least_loaded")
        holder = replica_url(first, sims)

        async def indexed() -> bool:
            return (await index_of(http, gw, holder))["resident_blocks"] > 0

        await until(indexed)
        answer = first.json()["choices"][0]["message"]["content"]
        convo += [
            {"role": "assistant", "content": answer},
            {"role": "user", "content": "and then?"},
        ]
        second = await ask(http, gw, convo)
        route = second.headers["x-deja-route"]
        assert route.startswith("resident;tokens="), route
        assert int(route.split("=")[1]) >= 16 * 10
        assert replica_url(second, sims) == holder
        assert second.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
        state = await index_of(http, gw, holder)
        assert state["state"] == "live" and state["drops"] == 0


async def test_two_tenants_with_one_system_prompt_share_no_blocks(
    cluster: tuple[list[SimCluster], dict[str, Any]], keys: Path, make_gateway: Any
) -> None:
    sims, events = cluster
    async with (
        make_gateway(**settings(sims, events, keys)) as (gw, _),
        httpx.AsyncClient(timeout=10) as http,
    ):
        system = {"role": "system", "content": system_prompt(2)}
        a = await ask(http, gw, [system, {"role": "user", "content": "q1"}], "alpha")
        await asyncio.sleep(0.3)
        b = await ask(http, gw, [system, {"role": "user", "content": "q2"}], "beta")
        # beta's salted keys are resident nowhere
        assert b.headers["x-deja-route"] in ("home", "spill", "least_loaded")
        assert b.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        await asyncio.sleep(0.3)
        a2 = await ask(http, gw, [system, {"role": "user", "content": "q3"}], "alpha")
        assert a2.headers["x-deja-route"].startswith("resident")
        assert replica_url(a2, sims) == replica_url(a, sims)
        assert a2.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 0


async def test_lost_events_are_replayed_silence_goes_stale_and_a_clear_empties(
    cluster: tuple[list[SimCluster], dict[str, Any]], keys: Path, make_gateway: Any
) -> None:
    sims, events = cluster
    url = sims[0].urls[0]
    gw_settings = settings(sims, events, keys, kv_stale_tokens=64, replicas=[url])
    async with make_gateway(**gw_settings) as (gw, _), httpx.AsyncClient(timeout=10) as http:
        await ask(http, gw, [{"role": "user", "content": system_prompt(3)}])

        async def seen(n: int) -> Any:
            async def check() -> bool:
                return (await index_of(http, gw, url))["batches"] >= n

            return check

        await until(await seen(1))
        before = (await index_of(http, gw, url))["batches"]
        # one batch left off the PUB socket: the next batch shows the gap, replay recovers it
        await http.put(url + "/sim/faults", json={"kv_events_drop": 1})
        await ask(http, gw, [{"role": "user", "content": system_prompt(4)}])
        await ask(http, gw, [{"role": "user", "content": system_prompt(5)}])
        await until(await seen(before + 2))
        state = await index_of(http, gw, url)
        assert state["drops"] == 0 and state["state"] == "live", state
        # a publisher that goes silent while the replica serves: stale within a scrape interval
        await http.put(url + "/sim/faults", json={"kv_events_paused": True})
        started = time.monotonic()
        for i in range(3):  # never blocked: every request is answered at once
            await ask(http, gw, [{"role": "user", "content": system_prompt(10 + i)}])

        async def stale() -> bool:
            return (await index_of(http, gw, url))["state"] == "stale"

        await until(stale, within=3.0)
        assert time.monotonic() - started < 2.0  # health interval 0.2 s (+ scrape lag)
        resp = await ask(http, gw, [{"role": "user", "content": system_prompt(3)}])
        assert not resp.headers["x-deja-route"].startswith("resident")  # not trusted while stale
        # publishing again: the gap cannot be replayed (paused batches were never buffered)
        await http.put(url + "/sim/faults", json={"kv_events_paused": False})
        await ask(http, gw, [{"role": "user", "content": system_prompt(20)}])

        async def dropped() -> bool:
            doc = await index_of(http, gw, url)
            return bool(doc["drops"] >= 1 and doc["state"] == "partial")

        await until(dropped)
        # the replica clears its cache (as after a restart): AllBlocksCleared empties the index
        assert (await http.post(url + "/reset_prefix_cache")).status_code == 200

        async def empty() -> bool:
            return (await index_of(http, gw, url))["resident_blocks"] == 0

        await until(empty)
        resp = await ask(http, gw, [{"role": "user", "content": system_prompt(20)}])
        assert not resp.headers["x-deja-route"].startswith("resident")  # held nowhere now
        metrics = (await http.get(gw + "/metrics")).text
        assert "deja_kv_index_drops_total" in metrics and "deja_kv_index_resident_blocks" in metrics
