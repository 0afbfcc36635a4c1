"""What a new user and an ops engineer meet in the first hour, against running gateways on
real sockets: a precision target the calibration table cannot serve is refused on every surface
(admin API, its preview, the CLI) instead of switching semantic hits off; a gateway with no
replica says so and how to add one; ``/docs`` and ``/openapi.json`` follow one setting."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from app.cli.main import main as deja
from deja.semantic.crossencoder import SHIPPED_DIR
from deja.semantic.cutoffs import load_table
from sim.runner import SimCluster
from tests.support import SIM_MODEL

pytestmark = pytest.mark.e2e

ADMIN = "first-hour-admin"
#: The targets the shipped calibration table covers (0.99 is above them).
LOW, HIGH = load_table(SHIPPED_DIR / "calibration.json").targets


@pytest.fixture(scope="module")
async def semantic_gw(sims: SimCluster, make_gateway: Any) -> AsyncIterator[str]:
    async with make_gateway(
        replicas=sims.urls, admin_key=ADMIN, semantic_enabled=True, semantic_shadow_rate=0.0
    ) as (url, _app):
        yield url


async def test_an_unreachable_precision_target_is_refused_by_the_admin_api(
    semantic_gw: str,
) -> None:
    auth = {"authorization": f"Bearer {ADMIN}"}
    async with httpx.AsyncClient(base_url=semantic_gw, headers=auth, timeout=30) as http:
        before = (await http.get("/admin/semantic")).json()["calibration"]
        for path, method in (("/admin/threshold", "PUT"), ("/admin/threshold/preview", "POST")):
            refused = await http.request(method, path, json={"precision": {"global": 0.99}})
            assert refused.status_code == 400, refused.text
            error = refused.json()["error"]
            assert f"covers targets up to {HIGH:.2f}" in error["message"]
            assert error["param"] == "global"
        after = (await http.get("/admin/semantic")).json()["calibration"]
    assert after["active_tau"] == before["active_tau"] is not None
    assert after["targets"] == {"low": LOW, "high": HIGH} and HIGH < 0.99


async def test_the_cli_refuses_it_too(semantic_gw: str) -> None:
    env = {"DEJA_ADMIN_URL": semantic_gw, "DEJA_ADMIN_KEY": ADMIN}

    def cli(*args: str) -> Any:  # in a thread: the gateway runs on this test's event loop
        return asyncio.to_thread(CliRunner(env=env).invoke, deja, list(args))

    result = await cli("threshold", "set", "--precision", "0.99")
    assert result.exit_code == 1
    assert f"covers targets up to {HIGH:.2f}" in result.output
    ok = await cli("threshold", "set", "--precision", "0.95")
    assert ok.exit_code == 0, ok.output


async def test_no_replica_configured_says_so_and_how(make_gateway: Any) -> None:
    async with make_gateway(replicas=[]) as (url, _app), httpx.AsyncClient(base_url=url) as http:
        body = {"model": SIM_MODEL, "messages": [{"role": "user", "content": "hi"}]}
        response = await http.post("/v1/chat/completions", json=body)
    assert response.status_code == 503
    message = response.json()["error"]["message"]
    assert "no replicas are configured" in message
    assert "DEJA_REPLICAS" in message and "--demo" in message


@pytest.mark.parametrize("enabled", [False, True])
async def test_docs_and_openapi_follow_one_setting(
    sims: SimCluster, make_gateway: Any, enabled: bool
) -> None:
    async with (
        make_gateway(replicas=sims.urls, api_docs=enabled) as (url, _app),
        httpx.AsyncClient(base_url=url) as http,
    ):
        docs, schema = await http.get("/docs"), await http.get("/openapi.json")
    if enabled:
        assert (docs.status_code, schema.status_code) == (200, 200)
        assert "/admin/replicas" in schema.json()["paths"] and "swagger" in docs.text
        paths = schema.json()["paths"].values()
        ids = [op["operationId"] for path in paths for op in path.values()]
        assert len(ids) == len(set(ids))  # HEAD twins of GET routes stay out of the schema
    else:
        assert (docs.status_code, schema.status_code) == (404, 404)
        assert "DEJA_API_DOCS=true" in docs.json()["error"]["message"]
        assert schema.json() == docs.json()
