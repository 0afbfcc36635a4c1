"""Every request as a Langfuse trace: a real gateway exports over OTLP/HTTP (protobuf) to a
local receiver that stands in for Langfuse's ``/api/public/otel/v1/traces`` and records what it
gets; the test decodes the ``ExportTraceServiceRequest`` and checks the attributes Langfuse maps
(trace name, tags, metadata, observation type, model), and the Basic auth header."""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from deja.tenancy.keyring import key_hash
from sim.runner import SimCluster
from tests.support import SIM_MODEL

pytestmark = pytest.mark.e2e

KEY = "dj-acme-never-exported"
PUBLIC, SECRET = "pk-lf-test", "sk-lf-never-exported"
QUESTION = "How do I reset my password?"
PARAPHRASE = "How can I reset my password?"
STREAMED = "What is the capital of France?"


@dataclass
class Received:
    """What the receiver got: one entry per export call."""

    posts: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def spans(self) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """(resource attributes, span attributes) of every span received."""
        found = []
        for _, _, body in self.posts:
            request = ExportTraceServiceRequest.FromString(body)
            for resource_spans in request.resource_spans:
                resource = attributes(resource_spans.resource.attributes)
                for scope in resource_spans.scope_spans:
                    for span in scope.spans:
                        found.append((resource, {"name": span.name, **attributes(span.attributes)}))
        return found


def value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: value(kv.value) for kv in pairs}


@pytest.fixture
def receiver() -> Iterator[tuple[str, Received]]:
    """An OTLP/HTTP receiver on 127.0.0.1, in a thread (the exporter posts from its own
    thread, and the gateway's shutdown waits for the last post)."""
    got = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            with got.lock:
                got.posts.append((self.path, dict(self.headers.items()), body))
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", got
    finally:
        server.shutdown()
        server.server_close()


async def test_each_request_is_a_langfuse_trace_with_the_cache_facts(
    sims: SimCluster, tmp_path: Path, make_gateway: Any, receiver: tuple[str, Received]
) -> None:
    host, got = receiver
    keys = tmp_path / "keys.yaml"
    keys.write_text(yaml.safe_dump({"tenants": {"acme": {"key_hashes": [key_hash(KEY)]}}}))
    auth = {"authorization": f"Bearer {KEY}"}

    def chat(question: str, **extra: Any) -> dict[str, Any]:
        return {"model": SIM_MODEL, "messages": [{"role": "user", "content": question}], **extra}

    async with (
        make_gateway(
            replicas=sims.urls,
            keys_file=keys,
            semantic_enabled=True,
            semantic_shadow_rate=0.0,
            langfuse_host=host + "/",
            langfuse_public_key=PUBLIC,
            langfuse_secret_key=SECRET,
        ) as (url, app),
        httpx.AsyncClient(base_url=url, headers=auth, timeout=30) as http,
    ):
        miss = await http.post("/v1/chat/completions", json=chat(QUESTION))
        await app.state.gateway.pipeline.drain()
        exact = await http.post("/v1/chat/completions", json=chat(QUESTION))
        semantic = await http.post("/v1/chat/completions", json=chat(PARAPHRASE))
        async with http.stream(
            "POST", "/v1/chat/completions", json=chat(STREAMED, stream=True)
        ) as streamed:
            await streamed.aread()
    outcomes = [r.headers["x-deja-cache"] for r in (miss, exact, semantic, streamed)]
    assert outcomes == ["miss", "exact", "semantic", "miss"]

    # Sent where Langfuse listens, as protobuf, with Basic base64(public:secret).
    assert got.posts, "nothing was exported"
    for path, headers, _ in got.posts:
        assert path == "/api/public/otel/v1/traces"
        lowered = {k.lower(): v for k, v in headers.items()}
        assert lowered["content-type"] == "application/x-protobuf"
        expected = "Basic " + base64.b64encode(f"{PUBLIC}:{SECRET}".encode()).decode()
        assert lowered["authorization"] == expected
    raw = b"".join(body for _, _, body in got.posts)
    for secret in (QUESTION, PARAPHRASE, STREAMED, KEY, SECRET):  # no prompt, no key
        assert secret.encode() not in raw

    spans = got.spans()
    roots = {
        attrs["langfuse.trace.metadata.request_id"]: (resource, attrs)
        for resource, attrs in spans
        if attrs["name"] == "deja.request"
    }
    assert len(roots) == 4
    by_response = [roots[r.headers["x-request-id"]] for r in (miss, exact, semantic, streamed)]
    for resource, attrs in by_response:
        assert resource["service.name"] == "deja"
        assert attrs["langfuse.trace.name"] == "deja.chat"
        assert attrs["langfuse.trace.metadata.tenant"] == "acme"
        assert attrs["langfuse.trace.metadata.model"] == SIM_MODEL
        assert attrs["gen_ai.request.model"] == SIM_MODEL
        assert "tenant:acme" in attrs["langfuse.trace.tags"]
        assert attrs["langfuse.observation.level"] == "DEFAULT"
    meta = "langfuse.trace.metadata."
    (_, m), (_, e), (_, s), (_, st) = by_response

    # A miss: a generation on a replica, nothing saved.
    assert m[meta + "cache_outcome"] == "miss" and m[meta + "cache_layer"] == "none"
    assert m[meta + "cache_hit"] is False and m[meta + "tokens_saved"] == 0
    assert m["langfuse.observation.type"] == "generation"
    assert m[meta + "replica"] == miss.headers["x-deja-replica"]
    assert m[meta + "entry_id"] == miss.headers["x-deja-entry"]
    assert "cache:miss" in m["langfuse.trace.tags"]

    # An exact hit: a span, not a generation (Langfuse must not cost it), with the tokens saved.
    usage = miss.json()["usage"]
    assert e[meta + "cache_outcome"] == "exact" and e[meta + "cache_layer"] == "exact"
    assert e[meta + "cache_hit"] is True
    assert e[meta + "tokens_saved"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0
    assert e["langfuse.observation.type"] == "span"
    assert not [k for k in e if k.startswith("gen_ai.usage.")]
    assert "cache:exact" in e["langfuse.trace.tags"]

    # A semantic hit: its similarity and verifier score, as the response headers gave them.
    assert s[meta + "cache_outcome"] == "semantic" and s[meta + "cache_layer"] == "semantic"
    assert s[meta + "similarity"] == semantic.headers["x-deja-similarity"]
    assert s[meta + "verifier_score"] == semantic.headers["x-deja-verifier-score"]
    similarity = float(semantic.headers["x-deja-similarity"])
    assert s["deja.cache.similarity"] == pytest.approx(similarity, abs=5e-5)
    assert s[meta + "tokens_saved"] == e[meta + "tokens_saved"]  # the same stored answer
    assert s["langfuse.observation.type"] == "span"

    # A streamed miss: its span ends when the response starts, with the same facts.
    assert st[meta + "cache_outcome"] == "miss" and st[meta + "stream"] is True
    assert st[meta + "replica"] == streamed.headers["x-deja-replica"]
    assert st["langfuse.observation.type"] == "generation"

    # The steps are child observations of the same traces.
    names = {attrs["name"] for _, attrs in spans}
    assert {"deja.exact", "deja.semantic", "deja.embed", "deja.upstream"} <= names
