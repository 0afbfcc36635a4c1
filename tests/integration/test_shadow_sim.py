"""Shadow checks against real simulated replicas over HTTP, through a real ``Upstream`` (built as
``app.wiring.replicas.Replicas.open`` builds it) and compared with the real ONNX embedder.

The simulator's answer is a deterministic function of the prompt, so a cached answer that holds
the simulator's own answer to the same request must agree, and a made-up one must disagree.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
import orjson
import pytest

from deja.cache.entry import CachedAnswer, answer_from_json
from deja.cache.exact.memory import MemoryExactStore
from deja.cache.keys import Endpoint
from deja.embedding.onnx.embedder import OnnxEmbedder, load_onnx_embedder
from deja.observability.metrics import Metrics
from deja.request import CachePolicy, GatewayRequest
from deja.semantic.shadow import ShadowChecks
from deja.upstream.discovery import ModelDiscovery
from deja.upstream.pool import ReplicaPool
from deja.upstream.router import Router
from deja.upstream.upstream import Upstream, build_session
from middleware.tasks import BackgroundTasks
from middleware.validate import validate
from sim.config import SimConfig
from sim.runner import start_simulators
from tests.support import MODEL_DIR, SIM_MODEL

pytestmark = pytest.mark.integration

ENTRY = "5" * 64
MADE_UP = "Bananas are an excellent source of potassium and ripen faster in a paper bag."


@dataclass
class Side:
    """The upstream side of a gateway over one simulated replica."""

    url: str
    session: aiohttp.ClientSession
    upstream: Upstream
    metrics: Metrics


@pytest.fixture(scope="module")
async def side() -> AsyncIterator[Side]:
    cluster = await start_simulators(1, SimConfig(speed=0))
    session = build_session(connect_timeout=2.0, read_timeout=10.0, max_connections=16)
    try:
        pool = ReplicaPool(cluster.urls, cooldown=5.0, scrape_interval=5.0, simulated=True)
        metrics = Metrics()
        metrics.watch_replicas(pool.samples)
        await ModelDiscovery(pool, session, timeout=2.0).refresh()
        assert SIM_MODEL in pool.known_models()
        upstream = Upstream(Router(pool, "prefix", 0.1), session, None, metrics)
        yield Side(cluster.urls[0], session, upstream, metrics)
    finally:
        await session.close()
        await cluster.stop()


@pytest.fixture(scope="module")
async def embedder() -> AsyncIterator[OnnxEmbedder]:
    loaded = load_onnx_embedder(MODEL_DIR)
    yield loaded
    await loaded.close()


def request(endpoint: Endpoint, question: str, *, stream: bool = True) -> GatewayRequest:
    body: dict[str, Any] = {"model": SIM_MODEL, "stream": stream, "max_tokens": 40}
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": question}]
    else:
        body["prompt"] = question
    if stream:
        body["stream_options"] = {"include_usage": True}
    return validate(endpoint, orjson.dumps(body), tenant="acme", policy=CachePolicy())


async def sim_answer(side: Side, req: GatewayRequest) -> CachedAnswer:
    """The simulator's own answer to ``req``, asked directly (not through ``Upstream``), as the
    cache would have stored it."""
    body = {k: v for k, v in req.body.items() if k != "stream_options"}
    body["stream"] = False
    async with side.session.post(side.url + req.path, data=orjson.dumps(body)) as response:
        assert response.status == 200
        parsed = orjson.loads(await response.read())
    answer = answer_from_json(parsed, entry_id=ENTRY, endpoint=req.endpoint, created_at=0.0)
    assert answer is not None
    return answer


def made_up(answer: CachedAnswer, text: str) -> CachedAnswer:
    if answer.endpoint == "chat":
        return replace(answer, message={"role": "assistant", "content": text})
    return replace(answer, text=text)


def checks(side: Side, embedder: OnnxEmbedder, **options: Any) -> ShadowChecks:
    options.setdefault("exact", MemoryExactStore(max_entries=100, max_bytes=1_000_000))
    return ShadowChecks(
        upstream=side.upstream,
        embedder=embedder,
        metrics=side.metrics,
        spawn=options.pop("spawn", BackgroundTasks().spawn),
        **{"rate": 1.0, **options},
    )


@pytest.mark.parametrize("endpoint", ["chat", "completion"])
async def test_the_sims_own_answer_agrees_and_a_made_up_one_disagrees(
    side: Side, embedder: OnnxEmbedder, endpoint: Endpoint
) -> None:
    req = request(endpoint, "How do I configure the agent on a new host?")
    own = await sim_answer(side, req)
    shadow = checks(side, embedder)
    assert await shadow.check(req, own, 0.93) == "agree"
    assert await shadow.check(req, made_up(own, MADE_UP), 0.93) == "disagree"
    assert shadow.stats()["bands"]["0.90-0.95"] == {
        "agree": 1,
        "disagree": 1,
        "error": 0,
        "estimated_precision": 0.5,
    }


async def test_a_near_copy_agrees_through_the_real_embedder(
    side: Side, embedder: OnnxEmbedder
) -> None:
    """Not identical, so the verdict comes from the embeddings: the sim's answer with its last
    word dropped is still the same answer."""
    req = request("chat", "How do I configure the agent on a new host?")
    own = await sim_answer(side, req)
    assert own.message is not None
    words = own.message["content"].split()
    assert len(words) > 8
    near = made_up(own, " ".join(words[:-1]))
    assert await checks(side, embedder).check(req, near, 0.88) == "agree"


async def test_sampled_hits_are_checked_in_the_background_and_disagreement_invalidates(
    side: Side, embedder: OnnxEmbedder
) -> None:
    exact = MemoryExactStore(max_entries=100, max_bytes=1_000_000)
    req = request("chat", "Which city is France's capital?", stream=False)
    own = await sim_answer(side, req)
    wrong = made_up(own, MADE_UP)
    await exact.set(ENTRY, wrong, ttl=600)
    tasks = BackgroundTasks()
    shadow = checks(side, embedder, exact=exact, invalidate=True, spawn=tasks.spawn)
    before = side.metrics.registry.get_sample_value("deja_shadow_invalidations_total") or 0.0

    assert shadow.maybe_check(req, wrong, 0.97) is True
    await tasks.drain()

    assert await exact.get(ENTRY) is None
    after = side.metrics.registry.get_sample_value("deja_shadow_invalidations_total")
    assert after == before + 1
    stats = shadow.stats()
    assert stats["checked"] == 1
    assert stats["tenants"]["acme"]["disagree"] == 1
    assert stats["bands"]["≥0.95"]["estimated_precision"] == 0.0
