"""Metric names and labels after real traffic: an exact hit, a semantic hit, a miss, a bypass."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sim.runner import SimCluster
from tests.support import SIM_MODEL

pytestmark = pytest.mark.e2e


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(
    metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return sum(
        v
        for (n, ls), v in metrics.items()
        if n == name and all(dict(ls).get(k) == val for k, val in labels.items())
    )


async def test_metrics_after_exact_semantic_miss_and_bypass(
    sims: SimCluster, make_gateway: Any
) -> None:
    tag = uuid.uuid4().hex[:6]
    async with (
        make_gateway(
            replicas=sims.urls,
            semantic_enabled=True,
            semantic_threshold=0.8,
            semantic_shadow_rate=0.0,
        ) as (url, app),
        httpx.AsyncClient(base_url=url, timeout=15) as http,
    ):

        async def ask(question: str) -> str:
            body = {"model": SIM_MODEL, "messages": [{"role": "user", "content": question}]}
            resp = await http.post("/v1/chat/completions", json=body)
            await app.state.gateway.pipeline.drain()
            return resp.headers["x-deja-cache"]

        assert await ask(f"How do I reset my password? {tag}") == "miss"
        assert await ask(f"How do I reset my password? {tag}") == "exact"
        assert await ask(f"How can I reset my password? {tag}") == "semantic"
        assert await ask("What changed in the latest release?") == "bypass"
        resp = await http.get("/metrics")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    m = samples(resp.text)
    for outcome in ("exact", "semantic", "miss", "bypass"):
        assert value(m, "deja_requests_total", route="chat", cache=outcome) >= 1, outcome
        assert value(m, "deja_request_duration_seconds_count", route="chat", cache=outcome) >= 1
    assert value(m, "deja_cache_lookup_duration_seconds_count", layer="exact") >= 3
    assert value(m, "deja_cache_lookup_duration_seconds_count", layer="semantic") >= 2
    assert value(m, "deja_embedding_duration_seconds_count") >= 2
    assert value(m, "deja_semantic_similarity_count") >= 1
    assert value(m, "deja_semantic_threshold") == 0.8
    assert value(m, "deja_semantic_precision_target") == 0.92
    assert value(m, "deja_verifier_duration_seconds_count") >= 1
    assert value(m, "deja_verifier_score_count") >= 1
    assert value(m, "deja_bypass_total", reason="temporal") == 1
    assert value(m, "deja_upstream_requests_total", status="200") >= 2
    assert value(m, "deja_upstream_ttfb_seconds_count") >= 2
    assert value(m, "deja_routing_decisions_total", policy="prefix") >= 2
    assert value(m, "deja_cached_completion_tokens_total") > 0
    assert value(m, "deja_replica_healthy") == 2  # two healthy simulated replicas
    assert ("deja_replica_in_flight", (("replica", sims.urls[0].split("//")[1]),)) in m
    names = {name for name, _ in m}
    assert all(n.startswith("deja_") for n in names if not n.startswith("python_"))
    for name, labels in m:  # bounded labels: never a prompt, a key or a tenant by default
        assert {k for k, _ in labels} <= {
            "route",
            "cache",
            "layer",
            "replica",
            "status",
            "policy",
            "reason",
            "kind",
            "action",
            "model",  # token histograms: only models a replica served (unknown ones are 404s)
            "le",
        }, name
