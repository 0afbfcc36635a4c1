"""A real Prometheus scraping a real gateway: the metrics, the rules and the dashboard's queries.

Starts ``prometheus`` (Debian's package) on a free loopback port with a temporary config that
scrapes a gateway from ``tests.support.gateway`` and the two simulated replicas every second,
loads deploy/prometheus/rules, sends chat requests through deja, and reads the results back
through Prometheus's HTTP API. Prometheus is stopped afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from sim.runner import SimCluster
from tests.deploy.helpers import (
    DEJA_METRICS,
    ROOT,
    RULES_DIR,
    dashboard_exprs,
    grafana_to_promql,
    load_compose,
    load_dashboard,
    require_binary,
)
from tests.support import SIM_MODEL, free_port

pytestmark = pytest.mark.integration

SCRAPE_INTERVAL = "1s"
DEADLINE_S = 30.0


def write_config(directory: Path, gateway_target: str, replica_targets: list[str]) -> Path:
    config = {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
        "rule_files": [str(RULES_DIR / "*.yml")],
        "scrape_configs": [
            {"job_name": "deja", "static_configs": [{"targets": [gateway_target]}]},
            {"job_name": "vllm", "static_configs": [{"targets": replica_targets}]},
        ],
    }
    path = directory / "prometheus.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    (directory / "data").mkdir()
    return path


@contextlib.asynccontextmanager
async def prometheus(config: Path, log: Path) -> AsyncIterator[str]:
    """A prometheus process on 127.0.0.1; yields its base URL; always stopped afterwards."""
    binary = require_binary("prometheus")
    port = free_port()
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={config.parent / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
        )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


async def wait_for(what: str, check: Any, log: Path) -> Any:
    """Poll ``await check()`` until it returns something truthy."""
    deadline = time.monotonic() + DEADLINE_S
    last: Any = None
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            last = await check()
            if last:
                return last
        await asyncio.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}\n{read(log)}")


async def query(client: httpx.AsyncClient, base: str, promql: str) -> dict[str, Any]:
    response = await client.get(f"{base}/api/v1/query", params={"query": promql})
    body: dict[str, Any] = response.json()
    assert body["status"] == "success", f"{promql}: {body}"
    return body


async def test_prometheus_scrapes_deja_and_evaluates_rules_and_dashboard(
    sims: SimCluster, tmp_path: Path, make_gateway: Any
) -> None:
    async with make_gateway(replicas=sims.urls) as (url, _app):
        target = url.removeprefix("http://")
        replicas = [u.removeprefix("http://") for u in sims.urls]
        config = write_config(tmp_path, target, replicas)
        log = tmp_path / "prometheus.log"
        async with prometheus(config, log) as prom, httpx.AsyncClient(timeout=5) as client:

            async def ready() -> bool:
                return (await client.get(f"{prom}/-/ready")).status_code == 200

            await wait_for("prometheus to be ready", ready, log)

            # Two identical chat requests through deja: a miss, then an exact hit.
            body = {"model": SIM_MODEL, "messages": [{"role": "user", "content": "What is deja?"}]}
            outcomes = []
            for _ in range(2):
                response = await client.post(f"{url}/v1/chat/completions", json=body)
                assert response.status_code == 200, response.text
                outcomes.append(response.headers["x-deja-cache"])
            assert outcomes == ["miss", "exact"]

            async def counted() -> dict[str, float]:
                result = (await query(client, prom, "deja_requests_total"))["data"]["result"]
                by_cache = {r["metric"]["cache"]: float(r["value"][1]) for r in result}
                return by_cache if by_cache.get("miss", 0) >= 1 and by_cache.get("exact") else {}

            by_cache = await wait_for("deja_requests_total in Prometheus", counted, log)
            assert sum(by_cache.values()) > 0
            assert by_cache["miss"] >= 1 and by_cache["exact"] >= 1

            # Every target is up, gateway and replicas.
            async def all_up() -> dict[str, str]:
                targets = (await client.get(f"{prom}/api/v1/targets")).json()["data"]
                health = {
                    f"{t['labels']['job']}/{t['labels']['instance']}": t["health"]
                    for t in targets["activeTargets"]
                }
                return health if set(health.values()) == {"up"} else {}

            health = await wait_for("every target to be up", all_up, log)
            assert len(health) == 1 + len(replicas)

            # The simulated replicas export the vLLM names the rules and the dashboard use.
            result = (await query(client, prom, 'count by (__name__) ({job="vllm"})'))["data"]
            exported = {r["metric"]["__name__"] for r in result["result"]}
            for name in (
                "vllm:num_requests_running",
                "vllm:num_requests_waiting",
                "vllm:kv_cache_usage_perc",
                "vllm:prefix_cache_queries_total",
                "vllm:prefix_cache_hits_total",
                "vllm:num_preemptions_total",
                "vllm:time_to_first_token_seconds_bucket",
            ):
                assert name in exported, f"{name} not scraped from the replicas: {exported}"

            # Every alert rule loads and evaluates without error on real series.
            async def rules_evaluated() -> list[dict[str, Any]]:
                groups = (await client.get(f"{prom}/api/v1/rules")).json()["data"]["groups"]
                rules = [rule for group in groups for rule in group["rules"]]
                done = rules and all(r["health"] != "unknown" for r in rules)
                return groups if done else []

            groups = await wait_for("the alert rules to be evaluated", rules_evaluated, log)
            assert {group["name"] for group in groups} == {"deja", "vllm"}
            rules = [rule for group in groups for rule in group["rules"]]
            bad = {r["name"]: r.get("lastError") for r in rules if r["health"] != "ok"}
            assert not bad, bad

            # Every dashboard query runs against the real series without an error.
            for title, expr in dashboard_exprs(load_dashboard()):
                response = await client.get(
                    f"{prom}/api/v1/query", params={"query": grafana_to_promql(expr)}
                )
                assert response.json()["status"] == "success", (title, expr, response.text)


async def test_gateway_exports_every_contract_metric(sims: SimCluster, make_gateway: Any) -> None:
    """The dashboards and rules are written against DEJA_METRICS: the gateway's /metrics
    must declare each of those families with the agreed type."""
    async with make_gateway(replicas=sims.urls) as (url, _app), httpx.AsyncClient() as client:
        response = await client.get(f"{url}/metrics")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        declared = dict(re.findall(r"^# TYPE (\S+) (\S+)$", response.text, re.M))
    for family, metric in DEJA_METRICS.items():
        # The text format names a counter's family after its sample, with _total.
        name = f"{family}_total" if metric.kind == "counter" else family
        assert declared.get(name) == metric.kind, f"{name}: {declared.get(name)}"


def _healthcheck_code(command: list[str]) -> str:
    """The Python source of an exec-form ``[CMD,] python -c CODE`` health check."""
    args = command[1:] if command[0] == "CMD" else command
    assert args[0] in ("python", "python3") and args[1] == "-c", command
    return args[2]


async def _run_python(code: str, port: str) -> int:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        code,
        env={**os.environ, "DEJA_PORT": port},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    return await asyncio.wait_for(proc.wait(), 10)


async def test_container_healthchecks_pass_against_a_running_gateway(
    sims: SimCluster, make_gateway: Any
) -> None:
    """Run the Dockerfile's and compose's HEALTHCHECK code itself against a live gateway (and
    see the image's fail against a port where nothing listens)."""
    dockerfile = read(ROOT / "Dockerfile")
    match = re.search(r"HEALTHCHECK[^\n]*\\\n\s*CMD (\[.*\])", dockerfile)
    assert match, "no exec-form HEALTHCHECK in the Dockerfile"
    image_check = _healthcheck_code(json.loads(match.group(1)))
    compose_check = _healthcheck_code(load_compose()["services"]["deja"]["healthcheck"]["test"])
    assert "127.0.0.1:8080/healthz" in compose_check
    async with make_gateway(replicas=sims.urls) as (url, _app):
        port = url.rsplit(":", 1)[1]
        assert await _run_python(image_check, port) == 0
        assert await _run_python(compose_check.replace(":8080/", f":{port}/"), port) == 0
    assert await _run_python(image_check, str(free_port())) != 0
