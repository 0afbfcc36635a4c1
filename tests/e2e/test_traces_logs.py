"""Trace shape (in-memory span exporter) and the one-JSON-line-per-request access log."""

from __future__ import annotations

import io
import json
import uuid
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sim.runner import SimCluster
from tests.support import SIM_MODEL

pytestmark = pytest.mark.e2e

KEY = "dj-should-never-be-logged"


async def test_trace_shape_and_access_log(sims: SimCluster, make_gateway: Any) -> None:
    exporter = InMemorySpanExporter()
    sink = io.BytesIO()
    question = f"How do I configure the agent? {uuid.uuid4().hex[:6]}"
    body = {"model": SIM_MODEL, "messages": [{"role": "user", "content": question}]}
    async with (
        make_gateway(
            replicas=sims.urls, semantic_enabled=True, span_exporter=exporter, access_sink=sink
        ) as (url, app),
        httpx.AsyncClient(base_url=url, headers={"authorization": f"Bearer {KEY}"}) as http,
    ):
        miss = await http.post("/v1/chat/completions", json=body, headers={"x-request-id": "r-1"})
        await app.state.gateway.pipeline.drain()
        hit = await http.post("/v1/chat/completions", json=body)
        app.state.gateway.pipeline.obs.access_log.flush()
    assert (miss.headers["x-deja-cache"], hit.headers["x-deja-cache"]) == ("miss", "exact")
    assert miss.headers["x-request-id"] == "r-1" and hit.headers["x-request-id"]

    spans = exporter.get_finished_spans()
    roots = [s for s in spans if s.name == "deja.request"]
    assert len(roots) == 2
    by_trace: dict[int, set[str]] = {}
    for s in spans:
        by_trace.setdefault(s.context.trace_id, set()).add(s.name)
    miss_root, hit_root = roots
    assert by_trace[miss_root.context.trace_id] >= {
        "deja.request",
        "deja.exact",
        "deja.semantic",
        "deja.embed",
        "deja.route",
        "deja.upstream",
        "deja.store",
    }
    assert by_trace[hit_root.context.trace_id] == {"deja.request", "deja.exact"}
    for s in spans:
        if s.name != "deja.request":
            assert s.parent is not None  # every step is a child span
    attrs = dict(hit_root.attributes or {})
    assert attrs["deja.cache.outcome"] == "exact"
    assert attrs["gen_ai.request.model"] == SIM_MODEL
    # A hit spent no tokens: what it saved is metadata, never gen_ai.usage (Langfuse would cost it).
    assert attrs["deja.cache.tokens_saved"] > 0
    assert not [k for k in attrs if k.startswith("gen_ai.usage.")]
    assert attrs["deja.cache.entry_id"] == hit.headers["x-deja-entry"]
    assert "cache:exact" in attrs["langfuse.trace.tags"]
    assert dict(miss_root.attributes or {})["deja.replica"] == miss.headers["x-deja-replica"]

    lines = [json.loads(raw) for raw in sink.getvalue().splitlines()]
    assert [line["outcome"] for line in lines] == ["miss", "exact"]
    assert lines[0]["request_id"] == "r-1" and lines[0]["replica"]
    for line in lines:
        assert {"request_id", "tenant", "outcome", "similarity", "replica", "latency_ms"} <= set(
            line
        )
    text = sink.getvalue().decode()
    assert question not in text and KEY not in text  # no prompts, never keys


def test_tracing_is_off_without_otel_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    from deja.observability.tracing import Tracing, otel_configured

    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    assert not otel_configured() and not Tracing().enabled
    assert otel_configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert not otel_configured(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}
    )
