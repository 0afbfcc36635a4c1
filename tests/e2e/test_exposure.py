"""What the gateway shows, and to whom: a slash redirect never names a host taken from the
request, /readyz keeps replica addresses for the admin key, /metrics and /v1/models can require
a key, and a stream that fails midway says so without internal details."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml

from deja.tenancy.keyring import key_hash
from sim.config import SimConfig
from sim.runner import SimCluster, start_simulators
from tests.support import SIM_MODEL

pytestmark = pytest.mark.e2e


async def test_trailing_slash_redirects_to_a_path_never_a_host(
    sims: SimCluster, make_gateway: Any
) -> None:
    async with (
        make_gateway(replicas=sims.urls, admin_key="adm") as (url, _),
        httpx.AsyncClient(base_url=url) as http,
    ):
        reply = await http.get(
            "/admin/cache/stats/?x=1",
            headers={"host": "evil.example", "authorization": "Bearer adm"},
        )
        assert reply.status_code == 307
        assert reply.headers["location"] == "/admin/cache/stats?x=1"
        missing = await http.get("/no/such/path/", headers={"host": "evil.example"})
        assert missing.status_code == 404 and "location" not in missing.headers
        assert missing.json()["error"]["code"] == "not_found"


async def test_readyz_names_replicas_only_for_the_admin_key(
    sims: SimCluster, make_gateway: Any
) -> None:
    async with (
        make_gateway(replicas=sims.urls, admin_key="adm") as (url, _),
        httpx.AsyncClient(base_url=url) as http,
    ):
        anonymous = await http.get("/readyz")
        admin = await http.get("/readyz", headers={"authorization": "Bearer adm"})
        wrong = await http.get("/readyz", headers={"authorization": "Bearer nope"})
        report = await http.get("/admin/replicas", headers={"authorization": "Bearer adm"})
    # replicas named by URL (not started by --demo) are recognised as deja's simulator
    assert [r["simulated"] for r in report.json()["replicas"]] == [True, True]
    assert anonymous.json()["replicas"] == {"total": 2, "available": 2}
    assert wrong.json()["replicas"] == {"total": 2, "available": 2}
    assert all(u.removeprefix("http://") in admin.json()["replicas"] for u in sims.urls)
    for reply in (anonymous, wrong):
        assert all(u.removeprefix("http://") not in reply.text for u in sims.urls)


async def test_metrics_and_models_can_require_a_key(
    sims: SimCluster, make_gateway: Any, tmp_path: Path
) -> None:
    keys = tmp_path / "keys.yaml"
    keys.write_text(yaml.safe_dump({"tenants": {"t": {"key_hashes": [key_hash("dj-client")]}}}))
    async with (
        make_gateway(
            replicas=sims.urls,
            admin_key="adm",
            metrics_key="scrape-me",
            models_require_key=True,
            keys_file=keys,
        ) as (url, _),
        httpx.AsyncClient(base_url=url) as http,
    ):
        assert (await http.get("/metrics")).status_code == 401
        assert (
            await http.get("/metrics", headers={"authorization": "Bearer x"})
        ).status_code == 401
        scraped = await http.get("/metrics", headers={"authorization": "Bearer scrape-me"})
        assert scraped.status_code == 200 and "deja_requests" in scraped.text
        as_admin = await http.get("/metrics", headers={"authorization": "Bearer adm"})
        assert as_admin.status_code == 200
        anonymous = await http.get("/v1/models")
        assert anonymous.status_code == 401
        assert anonymous.json()["error"]["code"] == "invalid_api_key"
        listed = await http.get("/v1/models", headers={"authorization": "Bearer dj-client"})
        assert listed.status_code == 200 and listed.json()["data"][0]["id"] == SIM_MODEL


async def test_a_stream_failing_midway_ends_with_a_public_message(make_gateway: Any) -> None:
    # a second per token: the gateway's 0.3 s inter-chunk timeout fires mid-answer
    stalls = await start_simulators(1, SimConfig(speed=1, decode_ms_per_token=1000))
    try:
        async with (
            make_gateway(replicas=stalls.urls, upstream_timeout_seconds=0.3) as (url, _),
            httpx.AsyncClient(base_url=url, timeout=30) as http,
        ):
            body = {
                "model": SIM_MODEL,
                "messages": [{"role": "user", "content": "tell me a long story"}],
                "stream": True,
                "max_tokens": 50,
            }
            async with http.stream("POST", "/v1/chat/completions", json=body) as reply:
                assert reply.status_code == 200
                events = [line async for line in reply.aiter_lines() if line.startswith("data: ")]
        errors = [orjson.loads(e[6:]) for e in events if '"error"' in e]
        assert events[-1] == "data: [DONE]" and len(errors) == 1
        message = errors[0]["error"]["message"]
        assert "request deja-" in message or "request " in message
        host = stalls.urls[0].removeprefix("http://")
        assert host not in message and "Timeout" not in message and "aiohttp" not in message
        assert errors[0]["error"]["code"] == "upstream_timeout"
    finally:
        await stalls.stop()
