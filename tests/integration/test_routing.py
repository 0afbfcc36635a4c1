"""Prefix routing over real sockets: stickiness, spill-over under load, a replica dying mid-run,
and failing replicas skipped then recovered."""

from __future__ import annotations

import asyncio
import collections
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from sim.config import SimConfig
from sim.runner import SimCluster, start_simulators
from tests.support import SIM_MODEL, free_port

pytestmark = pytest.mark.integration

UNCACHED = {"cache-control": "no-cache, no-store"}


def chat(system: str, question: str | None = None, **extra: Any) -> dict[str, Any]:
    messages = [
        {"role": "system", "content": system},
        {"role": "user", "content": question or f"q {uuid.uuid4().hex}"},
    ]
    return {"model": SIM_MODEL, "messages": messages, **extra}


async def clusters(n: int, config: SimConfig) -> list[SimCluster]:
    """n single-replica clusters, so a test can stop one replica on its own."""
    return [await start_simulators(1, config) for _ in range(n)]


@pytest.fixture
async def four() -> AsyncIterator[list[SimCluster]]:
    sims = await clusters(4, SimConfig(speed=0))
    try:
        yield sims
    finally:
        for sim in sims:
            await sim.stop()


def urls(sims: list[SimCluster]) -> list[str]:
    return [s.urls[0] for s in sims]


async def post(http: httpx.AsyncClient, url: str, body: dict[str, Any]) -> httpx.Response:
    return await http.post(url + "/v1/chat/completions", json=body, headers=UNCACHED)


async def test_same_system_prompt_always_lands_on_the_same_replica(
    four: list[SimCluster],
    make_gateway: Any,
) -> None:
    async with make_gateway(replicas=urls(four)) as (gw, _), httpx.AsyncClient(timeout=10) as http:
        placements: dict[str, set[str]] = collections.defaultdict(set)
        for round_ in range(4):
            for i in range(12):
                system = f"You are assistant number {i}."
                resp = await post(http, gw, chat(system))
                assert resp.status_code == 200
                placements[system].add(resp.headers["x-deja-replica"])
                assert resp.headers["x-deja-route"] == "home"
                if round_ == 0:
                    assert resp.headers["x-prefix-hash"]
        assert all(len(replicas) == 1 for replicas in placements.values())
        assert len({next(iter(r)) for r in placements.values()}) >= 3  # keys spread out
        # the client's X-Prefix-Hash overrides the computed key
        forced = await http.post(
            gw + "/v1/chat/completions",
            json=chat("You are assistant number 0."),
            headers={**UNCACHED, "x-prefix-hash": "tenant-a-shared-doc"},
        )
        assert forced.headers["x-prefix-hash"] == "tenant-a-shared-doc"


async def test_a_hot_prompt_spills_over_once_its_replica_is_full(make_gateway: Any) -> None:
    sims = await clusters(4, SimConfig(speed=1.0, base_ttft_ms=0, decode_ms_per_token=15))
    try:
        async with (
            make_gateway(replicas=urls(sims), routing_epsilon=0.25) as (gw, app),
            httpx.AsyncClient(timeout=20) as http,
        ):
            hot = chat("You are the hot assistant.")
            cold = await post(http, gw, hot)
            home = cold.headers["x-deja-replica"]
            peak: dict[str, int] = collections.Counter()
            pool = app.state.gateway.upstream.pool

            async def watch() -> None:
                while True:
                    for r in pool.replicas:
                        peak[r.name] = max(peak[r.name], r.in_flight)
                    await asyncio.sleep(0.002)

            watcher = asyncio.create_task(watch())
            responses = await asyncio.gather(*(post(http, gw, hot) for _ in range(16)))
            watcher.cancel()
        assert all(r.status_code == 200 for r in responses)
        by_replica = collections.Counter(r.headers["x-deja-replica"] for r in responses)
        routes = collections.Counter(r.headers["x-deja-route"] for r in responses)
        assert len(by_replica) > 1 and routes["spill"] > 0
        assert by_replica[home] == max(by_replica.values())  # the home replica stays preferred
        assert max(peak.values()) <= 5  # ⌈1.25 × 16 / 4⌉
    finally:
        for sim in sims:
            await sim.stop()


def spawn_sim(*args: str) -> tuple[subprocess.Popen[bytes], str]:
    """A simulated replica in its own process, so it can really be killed."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "sim", "--port", str(port), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=0.5).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("simulator process did not start")


async def test_a_replica_killed_mid_run_costs_no_requests_and_moves_only_its_keys(
    make_gateway: Any,
) -> None:
    spawned = [
        spawn_sim("--speed", "1", "--base-ttft-ms", "0", "--decode-ms-per-token", "3")
        for _ in range(3)
    ]
    try:
        async with (
            make_gateway(replicas=[url for _, url in spawned]) as (gw, _),
            httpx.AsyncClient(timeout=20) as http,
        ):
            systems = [f"You are helper {i}." for i in range(24)]
            before = {}
            for system in systems:
                resp = await post(http, gw, chat(system))
                before[system] = resp.headers["x-deja-replica"]
            victim_proc, victim_url = spawned[0]
            victim = victim_url.split("//")[1]
            assert victim in before.values()

            async def traffic() -> list[httpx.Response]:
                calls = (post(http, gw, chat(s)) for s in systems * 2)
                return list(await asyncio.gather(*calls))

            running = asyncio.create_task(traffic())
            await asyncio.sleep(0.05)
            victim_proc.kill()  # SIGKILL with requests in flight
            during = await running
            after = {}
            for system in systems:
                resp = await post(http, gw, chat(system))
                after[system] = resp.headers["x-deja-replica"]
        assert [r.status_code for r in during] == [200] * len(during)
        assert any(r.headers["x-deja-route"] == "failover" for r in during)
        for system in systems:
            if before[system] != victim:
                assert after[system] == before[system]  # surviving replicas keep their keys
            else:
                assert after[system] != victim
    finally:
        for proc, _ in spawned:
            proc.kill()
            proc.wait(timeout=10)


async def set_faults(sim: SimCluster, **faults: Any) -> None:
    async with httpx.AsyncClient() as http:
        (await http.put(sim.urls[0] + "/sim/faults", json=faults)).raise_for_status()


@pytest.mark.parametrize("status", [503, 429])
async def test_a_failing_replica_is_skipped_and_recovers_after_the_cooldown(
    four: list[SimCluster], status: int, make_gateway: Any
) -> None:
    sick = four[0]
    sick_name = sick.urls[0].split("//")[1]
    async with (
        make_gateway(replicas=urls(four), replica_cooldown_seconds=0.5, admin_key="adm") as (gw, _),
        httpx.AsyncClient(timeout=10) as http,
    ):
        homed = []
        for i in range(40):
            system = f"You are assistant {i}."
            resp = await post(http, gw, chat(system))
            if resp.headers["x-deja-replica"] == sick_name:
                homed.append(system)
        assert homed
        await set_faults(sick, error_rate=1.0, error_status=status)
        for system in homed:
            resp = await post(http, gw, chat(system))
            assert resp.status_code == 200  # served by the next replica on the ring
            assert resp.headers["x-deja-replica"] != sick_name
        auth = {"authorization": "Bearer adm"}
        report = (await http.get(gw + "/admin/replicas", headers=auth)).json()
        state = {r["name"]: r["breaker"]["state"] for r in report["replicas"]}
        assert state[sick_name] == "open"
        await set_faults(sick, error_rate=0.0)
        await asyncio.sleep(0.6)
        resp = await post(http, gw, chat(homed[0]))
        assert resp.headers["x-deja-replica"] == sick_name  # the half-open probe succeeded
        resp = await post(http, gw, chat(homed[-1]))
        assert (
            resp.headers["x-deja-replica"] == sick_name and resp.headers["x-deja-route"] == "home"
        )


async def test_admin_replicas_report_and_reload(four: list[SimCluster], make_gateway: Any) -> None:
    async with (
        make_gateway(replicas=urls(four)[:2], admin_key="adm") as (gw, _),
        httpx.AsyncClient(timeout=10) as http,
    ):
        assert (await http.get(gw + "/admin/replicas")).status_code == 401
        auth = {"authorization": "Bearer adm"}
        report = (await http.get(gw + "/admin/replicas", headers=auth)).json()
        assert report["policy"] == "prefix" and len(report["replicas"]) == 2
        assert abs(sum(r["share_of_keys"] for r in report["replicas"]) - 1.0) < 1e-6
        resp = await http.put(
            gw + "/admin/replicas",
            json={"replicas": [*urls(four)[:3], urls(four)[3] + ";weight=2"]},
            headers=auth,
        )
        assert resp.status_code == 200
        weights = {r["url"]: r["weight"] for r in resp.json()["replicas"]}
        assert weights[urls(four)[3]] == 2.0 and len(weights) == 4
        bad = await http.put(gw + "/admin/replicas", json={"replicas": ["ftp://x"]}, headers=auth)
        assert bad.status_code == 400
        served = await post(http, gw, chat("You are new."))
        assert served.status_code == 200
