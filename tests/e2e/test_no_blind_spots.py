"""Every request is visible: requests refused before the cache (401, 400, 413, 404, 429) are
counted in ``deja_requests_total`` with their status and reason and written to the access log;
a replica's 4xx is logged with its own status; every access-log line has a timestamp."""

from __future__ import annotations

import asyncio
import io
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml

from deja.tenancy.keyring import key_hash
from sim.runner import SimCluster
from tests.support import SIM_MODEL

pytestmark = pytest.mark.e2e

KEY = "dj-visible-key"


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": SIM_MODEL, "messages": [{"role": "user", "content": "hi there"}], **extra}


def requests_total(text: str, **labels: str) -> float:
    """The sum of ``deja_requests_total`` series whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith("deja_requests_total{"):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def test_refused_requests_are_counted_and_logged(
    sims: SimCluster, make_gateway: Any, tmp_path: Path
) -> None:
    keys = tmp_path / "keys.yaml"
    tenant = {"key_hashes": [key_hash(KEY)], "rate_limit_rpm": 1}
    keys.write_text(yaml.safe_dump({"tenants": {"vis": tenant}}))
    sink = io.BytesIO()
    before = time.time()
    async with (
        make_gateway(replicas=sims.urls, keys_file=keys, access_sink=sink, max_body_bytes=2048) as (
            url,
            app,
        ),
        httpx.AsyncClient(base_url=url, timeout=15) as http,
    ):
        auth = {"authorization": f"Bearer {KEY}"}
        assert (await http.post("/v1/chat/completions", json=chat())).status_code == 401
        wrong = {"authorization": "Bearer nope"}
        assert (
            await http.post("/v1/chat/completions", json=chat(), headers=wrong)
        ).status_code == 401
        ok = await http.post("/v1/chat/completions", json=chat(), headers=auth)
        assert ok.status_code == 200
        limited = await http.post("/v1/chat/completions", json=chat(), headers=auth)
        assert limited.status_code == 429
        await asyncio.sleep(0.3)
        app.state.gateway.pipeline.obs.access_log.flush()
        metrics = (await http.get("/metrics")).text
    assert requests_total(metrics, cache="rejected", status="401", reason="invalid_api_key") == 2
    assert (
        requests_total(metrics, cache="rejected", status="429", reason="rate_limit_exceeded") == 1
    )
    assert requests_total(metrics, cache="miss", status="200") == 1
    lines = [orjson.loads(line) for line in sink.getvalue().splitlines()]
    rejected = [line for line in lines if line["outcome"] == "rejected"]
    assert sorted(line["status"] for line in rejected) == [401, 401, 429]
    assert {line["tenant"] for line in rejected} == {"-", "vis"}  # unknown until the key is
    assert all(before <= line["ts"] <= time.time() for line in lines)  # every line is dated
    assert KEY not in sink.getvalue().decode() and "nope" not in sink.getvalue().decode()


async def test_bad_bodies_unknown_models_and_passthrough_errors_keep_their_status(
    sims: SimCluster, make_gateway: Any
) -> None:
    sink = io.BytesIO()
    async with (
        make_gateway(replicas=sims.urls, access_sink=sink, max_body_bytes=2048) as (url, app),
        httpx.AsyncClient(base_url=url, timeout=15) as http,
    ):
        bad = await http.post("/v1/chat/completions", content=b"{not json")
        huge = await http.post("/v1/chat/completions", json=chat(pad="x" * 4096))
        unknown = await http.post("/v1/chat/completions", json={**chat(), "model": "nope"})
        # the replica refuses a completion longer than its context: its own 400 comes back
        passthrough = await http.post("/v1/chat/completions", json=chat(max_tokens=10**7))
        streamed = await http.post("/v1/chat/completions", json=chat(max_tokens=10**7, stream=True))
        assert (bad.status_code, huge.status_code, unknown.status_code) == (400, 413, 404)
        assert passthrough.status_code == streamed.status_code == 400
        await asyncio.sleep(0.3)
        app.state.gateway.pipeline.obs.access_log.flush()
        metrics = (await http.get("/metrics")).text
    assert requests_total(metrics, cache="rejected", status="400") == 1
    assert requests_total(metrics, cache="rejected", status="413", reason="request_too_large") == 1
    assert requests_total(metrics, cache="rejected", status="404", reason="model_not_found") == 1
    lines = [orjson.loads(line) for line in sink.getvalue().splitlines()]
    replica_refused = [line for line in lines if line["outcome"] != "rejected"]
    assert [line["status"] for line in replica_refused] == [400, 400]  # not 502
    assert requests_total(metrics, cache="miss", status="400") == 2
