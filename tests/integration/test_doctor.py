"""``deja doctor``: each rule of the matrix, triggered by driving a simulated replica (real
sockets, real /metrics) into that condition, and left silent on a healthy one."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import Any

import httpx
import pytest

from app.cli.doctor import run_doctor
from sim.config import SimConfig
from sim.runner import SimCluster, start_simulators
from tests.support import SIM_MODEL, free_port
from tuning.doctor import Finding
from tuning.drive import prompt_text

pytestmark = pytest.mark.integration


async def send(
    http: httpx.AsyncClient, url: str, index: int, prompt: int, tokens: int
) -> httpx.Response:
    body = {"model": SIM_MODEL, "prompt": prompt_text(index, prompt), "max_tokens": tokens,
            "ignore_eos": True}  # fmt: skip
    response = await http.post(url + "/v1/completions", json=body)
    assert response.status_code == 200, response.text
    return response


async def diagnose_while(
    url: str, traffic: Awaitable[Any], *, window: float = 1.5, gateway: str | None = None
) -> list[Finding]:
    """Watch ``url`` for ``window`` seconds while ``traffic`` runs (it starts 0.2 s in)."""

    async def later() -> None:
        await asyncio.sleep(0.2)
        await traffic

    doctor = run_doctor([url], gateway, window=window, interval=0.02,
                        scrape_timeout=2.0)  # fmt: skip
    (observation, findings), _ = await asyncio.gather(doctor, later())
    assert observation.replicas[0].error is None
    return findings


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30) as client:
        yield client


async def sim(**config: Any) -> SimCluster:
    return await start_simulators(1, SimConfig(**config))


def rules(findings: list[Finding]) -> set[str]:
    return {f.rule for f in findings}


async def test_spec_decoding_acceptance(http: httpx.AsyncClient) -> None:
    bad, good = (
        await sim(speed=0, spec_tokens=4, spec_acceptance=0.3),
        await sim(speed=0, spec_tokens=4, spec_acceptance=0.97),
    )
    try:
        for cluster, expected in ((bad, True), (good, False)):
            url = cluster.urls[0]
            traffic = asyncio.gather(*(send(http, url, i, 20, 80) for i in range(6)))
            findings = await diagnose_while(url, traffic, window=0.8)
            assert ("spec_acceptance" in rules(findings)) is expected
        text = (await http.get(bad.urls[0] + "/metrics")).text
        assert "vllm:spec_decode_num_draft_tokens_total" in text
    finally:
        await bad.stop()
        await good.stop()


async def test_spec_finding_carries_its_numbers(http: httpx.AsyncClient) -> None:
    cluster = await sim(speed=0, spec_tokens=4, spec_acceptance=0.3)
    try:
        url = cluster.urls[0]
        traffic = asyncio.gather(*(send(http, url, i, 20, 80) for i in range(6)))
        [finding] = await diagnose_while(url, traffic, window=0.8)
        assert finding.rule == "spec_acceptance" and finding.replica == url
        assert finding.numbers["acceptance"] < 0.6 and finding.numbers["draft_tokens"] > 0
        assert "drafter" in finding.change
    finally:
        await cluster.stop()


async def test_kv_full_with_preemptions(http: httpx.AsyncClient) -> None:
    # 40 blocks of 16 tokens; each request grows to 100 + 60 tokens = 10 blocks: at most four
    # fit to the end, yet prompts (7 blocks) are admitted while they fit now.
    cluster = await sim(kv_blocks=40, max_num_seqs=16, base_ttft_ms=0, prefill_ms_per_token=0,
                        decode_ms_per_token=3)  # fmt: skip
    try:
        url = cluster.urls[0]
        traffic = asyncio.gather(*(send(http, url, i, 100, 60) for i in range(12)))
        findings = await diagnose_while(url, traffic, window=2.0)
        [kv] = [f for f in findings if f.rule == "kv_full_preempting"]
        assert kv.numbers["kv_usage_max"] >= 0.95 and kv.numbers["preemptions"] > 0
        assert "--max-num-seqs" in kv.change and "fp8" in kv.change
    finally:
        await cluster.stop()


async def test_queue_with_free_kv(http: httpx.AsyncClient) -> None:
    cluster = await sim(max_num_seqs=2, base_ttft_ms=0, prefill_ms_per_token=0,
                        decode_ms_per_token=4)  # fmt: skip
    try:
        url = cluster.urls[0]
        traffic = asyncio.gather(*(send(http, url, i, 20, 20) for i in range(16)))
        findings = await diagnose_while(url, traffic, window=1.2)
        # 16 requests in waves of 2: wave k waits k decodes, so TTFT spreads by design, and on
        # a loaded machine its p99/p50 can reach the spread rule's 3 (the same advice)
        assert "queue_with_free_kv" in rules(findings)
        assert rules(findings) <= {"queue_with_free_kv", "ttft_spread"}
        [queue] = [f for f in findings if f.rule == "queue_with_free_kv"]
        assert queue.numbers["waiting_max"] >= 5 and queue.numbers["kv_usage_max"] < 0.7
        assert "--max-num-batched-tokens" in queue.change
    finally:
        await cluster.stop()


async def test_ttft_spread(http: httpx.AsyncClient) -> None:
    # 64 tokens per step: a 400-token prompt needs 7 steps of ~34 ms; short ones need one.
    cluster = await sim(max_num_batched_tokens=64, max_num_seqs=64, base_ttft_ms=0,
                        prefill_ms_per_token=0.5, decode_ms_per_token=2)  # fmt: skip
    try:
        url = cluster.urls[0]

        async def traffic() -> None:
            for i in range(20):
                await send(http, url, i, 10, 2)
            await asyncio.gather(*(send(http, url, 100 + i, 400, 2) for i in range(3)))

        findings = await diagnose_while(url, traffic(), window=2.0)
        [spread] = [f for f in findings if f.rule == "ttft_spread"]
        assert spread.numbers["ratio"] >= 3 and spread.numbers["requests"] >= 20
        assert "--max-num-batched-tokens" in spread.change
    finally:
        await cluster.stop()


async def test_slow_first_token_with_low_prefix_hits_names_the_prefix_key(
    http: httpx.AsyncClient, make_gateway: Any
) -> None:
    # Unique prompts (no shared prefix), 1 ms per prefilled token: TTFT ~ 0.7 s.
    cluster = await sim(base_ttft_ms=0, prefill_ms_per_token=1.0, decode_ms_per_token=1,
                        max_num_seqs=64)  # fmt: skip
    try:
        async with make_gateway(replicas=cluster.urls) as (gw, _):
            headers = {"cache-control": "no-cache, no-store"}

            async def ask(i: int) -> None:
                body = {"model": SIM_MODEL, "max_tokens": 2,
                        "messages": [{"role": "user", "content": prompt_text(i, 55)}]}  # fmt: skip
                r = await http.post(gw + "/v1/chat/completions", json=body, headers=headers)
                assert r.status_code == 200

            traffic = asyncio.gather(*(ask(i) for i in range(12)))
            findings = await diagnose_while(cluster.urls[0], traffic, window=1.5, gateway=gw)
        [slow] = [f for f in findings if f.rule == "slow_prefill_low_hits"]
        assert slow.numbers["ttft_p50_s"] > 0.5 and slow.numbers["prefix_hit_rate"] < 0.3
        assert slow.numbers["prefill_p50_s"] > 0.5  # the simulator's vLLM prefill histogram
        assert slow.numbers["gateway_no_prefix_share"] == 1.0  # no system prompt: no prefix key
        assert "prefix key" in slow.change and "system prompt" in slow.change
    finally:
        await cluster.stop()


async def test_healthy_replica_has_no_finding(http: httpx.AsyncClient) -> None:
    cluster = await sim(speed=0)
    try:
        url = cluster.urls[0]
        traffic = asyncio.gather(*(send(http, url, i, 30, 10) for i in range(12)))
        assert await diagnose_while(url, traffic, window=0.6) == []
    finally:
        await cluster.stop()


@contextlib.contextmanager
def sim_process() -> Iterator[str]:
    """``deja sim`` as its own process on a free port, ready; yields its URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "sim", "--port", str(port), "--speed", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        live = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                if httpx.get(live + "/health", timeout=0.5).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        yield live
    finally:
        proc.terminate()
        proc.wait(10)


def test_cli_reports_an_unreachable_replica_and_checks_the_others() -> None:
    dead = free_port()
    with sim_process() as live:
        result = subprocess.run(
            [sys.executable, "-m", "app", "doctor", "--replica", f"http://127.0.0.1:{dead}",
             "--replica", live, "--window", "0.5s", "--interval", "0.1s", "--json"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert result.returncode == 3
    assert f"127.0.0.1:{dead}" in result.stderr and "unreachable" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    report = json.loads(result.stdout)
    dead_report, live_report = report["replicas"]
    assert dead_report["error"] and live_report["error"] is None and report["findings"] == []


def test_no_traffic_in_the_window_is_not_healthy() -> None:
    """A replica nobody sent a request to gives no finding: that must not read as healthy."""
    with sim_process() as live:
        result = subprocess.run(
            [sys.executable, "-m", "app", "doctor", "--replica", live, "--window", "0.5s",
             "--interval", "0.1s"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert result.returncode == 5, result.stdout + result.stderr
    assert "no traffic in the window" in result.stdout and "no finding" not in result.stdout
