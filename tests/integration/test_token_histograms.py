"""The gateway records prompt/completion token histograms per model from replica answers, and
``deja tune --from-gateway`` turns them into its workload."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from app.cli.main import main
from sim.config import SimConfig
from sim.runner import SimCluster, start_simulators
from tests.support import SIM_MODEL
from tuning.promtext import parse_metrics
from tuning.workload import workload_from_gateway

pytestmark = pytest.mark.integration

UNCACHED = {"cache-control": "no-cache, no-store"}


async def test_token_histograms_and_tune_from_gateway(
    sims: SimCluster, make_gateway: Any, tmp_path: Path
) -> None:
    async with make_gateway(replicas=sims.urls) as (url, _), httpx.AsyncClient() as http:
        usages = []
        for i in range(6):
            body = {"model": SIM_MODEL, "prompt": " ".join(["w"] * (40 + 30 * i)),
                    "max_tokens": 5 + i}  # fmt: skip
            r = await http.post(url + "/v1/completions", json=body, headers=UNCACHED)
            usages.append(r.json()["usage"])
        stream = {"model": SIM_MODEL, "stream": True, "stream_options": {"include_usage": True},
                  "messages": [{"role": "user", "content": "stream me"}]}  # fmt: skip
        streamed = await http.post(url + "/v1/chat/completions", json=stream, headers=UNCACHED)
        assert streamed.status_code == 200
        # Stored answers are counted when they are stored (once per replica call, also when
        # single-flight shares one); a hit afterwards shows the store happened.
        for stream in (False, True):
            hit_body = {"model": SIM_MODEL, "stream": stream,
                        "messages": [{"role": "user", "content": f"cached {stream}"}]}  # fmt: skip
            await http.post(url + "/v1/chat/completions", json=hit_body)
            hit = await http.post(url + "/v1/chat/completions", json=hit_body)
            assert hit.headers["x-deja-cache"] == "exact"
        scrape = parse_metrics((await http.get(url + "/metrics")).text)
        # 6 completions + 1 stream (not stored) + 2 stored misses; the hits reached no replica
        assert scrape.value("deja_prompt_tokens_count", model=SIM_MODEL) == 9
        assert scrape.value("deja_completion_tokens_count", model=SIM_MODEL) == 9
        sent = sum(u["prompt_tokens"] for u in usages)
        assert scrape.value("deja_prompt_tokens_sum", model=SIM_MODEL) > sent
        workload, model = workload_from_gateway(scrape, None, 8, max_model_len=8192)
        assert model == SIM_MODEL and workload.source == f"gateway:{SIM_MODEL}"
        assert workload.output.buckets[0][0] >= 1 and workload.output.buckets[-1][1] <= 64
        out = tmp_path / "t.json"
        args = ["tune", "--in-process", "--from-gateway", url, "--seqs", "4,8", "--tokens", "512",
                "--concurrency", "8", "--requests", "20", "--output", str(out)]  # fmt: skip
        result = await asyncio.to_thread(CliRunner().invoke, main, args)
    assert result.exit_code == 0, result.output
    assert f"workload from the gateway, model {SIM_MODEL}" in result.stderr
    saved = json.loads(out.read_text())
    assert saved["signature"]["workload"]["source"] == f"gateway:{SIM_MODEL}"
    assert saved["signature"]["workload"]["prompt_tokens"].startswith("histogram(")


async def test_a_coalesced_answer_is_counted_once(make_gateway: Any) -> None:
    slow = await start_simulators(1, SimConfig(decode_ms_per_token=20))
    try:
        async with make_gateway(replicas=slow.urls) as (url, _), httpx.AsyncClient() as http:
            body = {"model": SIM_MODEL, "messages": [{"role": "user", "content": "shared"}]}
            first, second = await asyncio.gather(
                *(http.post(url + "/v1/chat/completions", json=body) for _ in range(2))
            )
            outcomes = sorted(r.headers["x-deja-cache"] for r in (first, second))
            assert outcomes == ["coalesced", "miss"]
            again = await http.post(url + "/v1/chat/completions", json=body)
            assert again.headers["x-deja-cache"] == "exact"  # stored, so counted by now
            scrape = parse_metrics((await http.get(url + "/metrics")).text)
        assert scrape.value("deja_completion_tokens_count", model=SIM_MODEL) == 1
    finally:
        await slow.stop()
