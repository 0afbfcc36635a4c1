"""Retrieval that keeps only what a question depends on, through the gateway with the official
``openai`` SDK on real stores (Qdrant Edge, the on-disk exact store, the ONNX embedder) and
simulated replicas: the relevance floor, provenance that means "depends on", sources in
streams (misses and hits), a question no document bears on, and a removed document's near
questions (issue 21)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from deja.tenancy.keyring import key_hash
from sim.config import SimConfig
from sim.runner import SimCluster, start_simulators
from tests.support import SIM_MODEL, fresh_tag

pytestmark = pytest.mark.e2e

KEY = "dj-acme-relevance"
ADMIN = {"authorization": "Bearer relevance-admin"}
LIGHTHOUSE = (
    "# The lighthouse\n\nThe Point Reyes lighthouse was built in 1870. Its keeper climbs 300 "
    "steps to light the lamp, which can be seen 24 nautical miles out at sea.\n"
)
BAKERY = (
    "# The bakery\n\nThe corner bakery opens at six in the morning. It bakes sourdough bread, "
    "croissants and a rye loaf every day; cakes are made to order.\n"
)
CORPUS = {"X-Deja-Corpus": "town"}
#: Budgets wide enough for a busy shared test machine: these tests are not about timeouts
#: (``test_rag.py`` has the failure policy), and a timed-out lookup would read as a miss.
PATIENT = {"rag_retrieval_timeout_seconds": 10.0, "semantic_timeout_seconds": 10.0}


class Env:
    def __init__(self, url: str, app: Any) -> None:
        self.url = url
        self.app = app
        self.http = httpx.AsyncClient(base_url=url, timeout=60)
        self.client = openai.AsyncOpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0)

    async def ingest(self, document: str, text: str) -> dict[str, Any]:
        reply = await self.http.put(
            f"/admin/corpora/town/documents/{document}",
            params={"tenant": "acme"},
            content=text.encode(),
            headers={**ADMIN, "content-type": "text/markdown"},
        )
        assert reply.status_code == 200, reply.text
        result: dict[str, Any] = reply.json()
        return result

    async def ask(self, question: str, **headers: str) -> Any:
        raw = await self.client.chat.completions.with_raw_response.create(
            model=SIM_MODEL, messages=[{"role": "user", "content": question}], extra_headers=headers
        )
        await self.app.state.gateway.pipeline.drain()
        return raw

    async def stream(self, question: str, **headers: str) -> tuple[Any, list[Any]]:
        async with self.client.chat.completions.with_streaming_response.create(
            model=SIM_MODEL,
            messages=[{"role": "user", "content": question}],
            stream=True,
            extra_headers=headers,
        ) as response:
            chunks = [chunk async for chunk in await response.parse()]
        await self.app.state.gateway.pipeline.drain()
        return response, chunks


def write_keys(path: Path) -> Path:
    path.write_text(yaml.safe_dump({"tenants": {"acme": {"key_hashes": [key_hash(KEY)]}}}))
    return path


@pytest.fixture(scope="module")
async def env(
    sims: SimCluster, tmp_path_factory: pytest.TempPathFactory, make_gateway: Any
) -> AsyncIterator[Env]:
    keys = write_keys(tmp_path_factory.mktemp("relevance-keys") / "keys.yaml")
    async with make_gateway(
        replicas=sims.urls,
        keys_file=keys,
        admin_key="relevance-admin",
        semantic_enabled=True,
        semantic_shadow_rate=0.0,
        corpora_enabled=True,
        rag_top_k=4,
        **PATIENT,
    ) as (url, app):
        env = Env(url, app)
        await env.ingest("lighthouse.md", LIGHTHOUSE)
        await env.ingest("bakery.md", BAKERY)
        yield env
        await env.http.aclose()


async def test_changing_one_document_keeps_the_other_documents_answers(env: Env) -> None:
    bread = f"What bread does the bakery bake? {fresh_tag()}"
    steps = f"How many steps does the lighthouse keeper climb? {fresh_tag()}"
    first = await env.ask(bread, **CORPUS)
    assert first.headers["x-deja-cache"] == "miss"
    assert first.headers["x-deja-sources"] == "bakery.md@1"  # not the lighthouse: top-k 4
    assert first.parse().model_extra["deja_sources"] == [
        {"corpus": "town", "document": "bakery.md", "version": 1}
    ]
    version = (await env.ask(steps, **CORPUS)).headers["x-deja-sources"]
    assert version.startswith("lighthouse.md@") and "bakery" not in version

    changed = LIGHTHOUSE.replace("300 steps", "320 steps")
    report = await env.ingest("lighthouse.md", changed)
    assert report["status"] == "updated" and report["invalidated"] >= 1
    assert (await env.ask(bread, **CORPUS)).headers["x-deja-cache"] == "exact"  # kept
    again = await env.ask(steps, **CORPUS)
    assert again.headers["x-deja-cache"] == "miss"  # its one source changed
    assert again.headers["x-deja-sources"] == f"lighthouse.md@{report['version']}"


@pytest.mark.parametrize("cache_control", ["", "no-store"])
async def test_a_streamed_answer_carries_its_sources_and_a_hit_replays_them(
    env: Env, cache_control: str
) -> None:
    """``no-store`` goes through the direct relay; a storable miss through the single-flight
    producer: both put the sources on the finishing chunk. (Not "when does the bakery
    open?": the temporal classifier calls about one in eight of its suffixed forms volatile,
    and a bypass is no miss.)"""
    question = f"Which breads does the bakery make every day? {fresh_tag()}"
    headers = {**CORPUS, **({"Cache-Control": cache_control} if cache_control else {})}
    expected = [{"corpus": "town", "document": "bakery.md", "version": 1}]
    response, chunks = await env.stream(question, **headers)
    assert response.headers["x-deja-cache"] == "miss"
    tagged = [c for c in chunks if c.model_extra and "deja_sources" in c.model_extra]
    assert len(tagged) == 1 and tagged[0].model_extra["deja_sources"] == expected
    assert tagged[0].choices[0].finish_reason is not None
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    if cache_control:
        return
    hit, replayed = await env.stream(question, **CORPUS)
    assert hit.headers["x-deja-cache"] == "exact"
    again = [c for c in replayed if c.model_extra and "deja_sources" in c.model_extra]
    assert len(again) == 1 and again[0].model_extra["deja_sources"] == expected
    assert again[0].choices[0].finish_reason is not None


async def test_a_question_no_document_bears_on_is_answered_without_context_marked(
    env: Env,
) -> None:
    question = f"What is the boiling point of mercury in kelvin? {fresh_tag()}"
    for _ in range(2):  # answered without context, marked, never cached
        reply = await env.ask(question, **CORPUS)
        assert reply.headers["x-deja-retrieval"] == "empty"
        assert reply.headers["x-deja-cache"] == "miss"
        assert reply.headers["x-deja-sources"] == ""


async def test_refused_when_the_setting_says_so_and_a_removed_documents_near_questions_go(
    sims: SimCluster, tmp_path: Path, make_gateway: Any
) -> None:
    async with make_gateway(
        replicas=sims.urls,
        keys_file=write_keys(tmp_path / "keys.yaml"),
        admin_key="relevance-admin",
        semantic_enabled=True,
        semantic_shadow_rate=0.0,
        corpora_enabled=True,
        rag_on_empty="error",
        rag_invalidate_near=0.5,
        **PATIENT,
    ) as (url, app):
        env = Env(url, app)
        await env.ingest("lighthouse.md", LIGHTHOUSE)
        with pytest.raises(openai.UnprocessableEntityError) as info:
            await env.ask("What is the boiling point of mercury in kelvin?", **CORPUS)
        assert info.value.status_code == 422 and info.value.code == "no_relevant_context"

        # A question asked without the corpus is no answer of the lighthouse document, but it
        # is near its text: removing the document drops it (as adding or changing it would).
        near = "How many steps does the keeper of the Point Reyes lighthouse climb?"
        assert (await env.ask(near)).headers["x-deja-cache"] == "miss"
        assert (await env.ask(near)).headers["x-deja-cache"] == "exact"
        removed = await env.http.delete(
            "/admin/corpora/town/documents/lighthouse.md", params={"tenant": "acme"}, headers=ADMIN
        )
        assert removed.status_code == 200, removed.text
        assert removed.json()["invalidated"] >= 1
        assert (await env.ask(near)).headers["x-deja-cache"] == "miss"
        await env.http.aclose()


@pytest.fixture
async def slow() -> AsyncIterator[SimCluster]:
    """One replica whose answers take about a second, so identical requests all join the
    first one's flight."""
    cluster = await start_simulators(
        1, SimConfig(speed=1, added_latency_ms=1000, decode_ms_per_token=10)
    )
    try:
        yield cluster
    finally:
        await cluster.stop()


async def test_coalesced_followers_of_a_rag_stream_get_its_sources_too(
    slow: SimCluster, tmp_path: Path, make_gateway: Any
) -> None:
    """The leader's stream is stamped once where the replica's bytes come in, so every
    streamed follower has the sources on its finishing chunk, and a JSON follower's replay of
    the finished stream has them in its body."""
    async with make_gateway(
        replicas=slow.urls,
        keys_file=write_keys(tmp_path / "keys.yaml"),
        admin_key="relevance-admin",
        corpora_enabled=True,
        **PATIENT,
    ) as (url, app):
        env = Env(url, app)
        await env.ingest("bakery.md", BAKERY)
        question = f"Which breads does the bakery make every day? {fresh_tag()}"
        expected = [{"corpus": "town", "document": "bakery.md", "version": 1}]
        streams = [env.stream(question, **CORPUS) for _ in range(4)]
        *streamed, plain = await asyncio.gather(*streams, env.ask(question, **CORPUS))
        outcomes = sorted(r.headers["x-deja-cache"] for r, _ in streamed)
        outcomes = sorted([*outcomes, plain.headers["x-deja-cache"]])
        assert outcomes == ["coalesced"] * 4 + ["miss"]
        for _, chunks in streamed:
            tagged = [c for c in chunks if c.model_extra and "deja_sources" in c.model_extra]
            assert len(tagged) == 1 and tagged[0].model_extra["deja_sources"] == expected
            assert tagged[0].choices[0].finish_reason is not None
        assert plain.parse().model_extra["deja_sources"] == expected
        await env.http.aclose()
