"""``/v1/embeddings`` through the gateway with the official openai client, on real sockets and
simulated replicas: the replica's vectors, an exact hit on a repeat (same tenant, model and
input), tenants kept apart, the rate limit, metrics and OpenAI-shaped errors."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import yaml

from deja.tenancy.keyring import key_hash
from sim.embeddings import EMBEDDING_DIM, sim_vector
from sim.runner import SimCluster
from tests.support import SIM_MODEL

pytestmark = pytest.mark.e2e

KEYS = {"alpha": "dj-emb-alpha", "beta": "dj-emb-beta", "slow": "dj-emb-slow"}


class Env:
    def __init__(self, url: str, app: Any) -> None:
        self.url = url
        self.app = app

    def client(self, tenant: str) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.url + "/v1", api_key=KEYS[tenant], max_retries=0)

    async def embed(self, tenant: str, text: str | list[str], **kwargs: Any) -> tuple[str, Any]:
        raw = await self.client(tenant).embeddings.with_raw_response.create(
            model=SIM_MODEL, input=text, **kwargs
        )
        await self.app.state.gateway.pipeline.drain()
        return raw.headers["x-deja-cache"], raw.parse()


def write_keys(path: Path) -> Path:
    tenants: dict[str, Any] = {name: {"key_hashes": [key_hash(key)]} for name, key in KEYS.items()}
    tenants["slow"]["rate_limit_rpm"] = 1
    path.write_text(yaml.safe_dump({"tenants": tenants}))
    return path


@pytest.fixture(scope="module")
async def env(
    sims: SimCluster, tmp_path_factory: pytest.TempPathFactory, make_gateway: Any
) -> AsyncIterator[Env]:
    keys = write_keys(tmp_path_factory.mktemp("keys") / "keys.yaml")
    async with make_gateway(replicas=sims.urls, keys_file=keys) as (url, app):
        yield Env(url, app)


def text() -> str:
    return f"an embedding request {uuid.uuid4().hex}"


async def test_the_sdk_gets_the_replicas_vectors_then_an_exact_hit(env: Env) -> None:
    question = text()
    first_outcome, first = await env.embed("alpha", question)
    again_outcome, again = await env.embed("alpha", question)
    assert (first_outcome, again_outcome) == ("miss", "exact")
    expected = sim_vector(SIM_MODEL, question)
    for answer in (first, again):
        vector = np.asarray(answer.data[0].embedding, dtype=np.float32)
        assert vector.shape == (EMBEDDING_DIM,)
        np.testing.assert_allclose(vector, expected, rtol=1e-6)
        assert answer.model == SIM_MODEL and answer.usage.prompt_tokens > 0


async def test_floats_and_batches_keep_their_order(env: Env) -> None:
    texts = [text(), text(), text()]
    outcome, answer = await env.embed("alpha", texts, encoding_format="float")
    assert outcome == "miss"
    assert [d.index for d in answer.data] == [0, 1, 2]
    for item, t in zip(answer.data, texts, strict=True):
        np.testing.assert_allclose(item.embedding, sim_vector(SIM_MODEL, t), rtol=1e-6)
    outcome, again = await env.embed("alpha", texts, encoding_format="float")
    assert outcome == "exact" and [d.embedding for d in again.data] == [
        d.embedding for d in answer.data
    ]
    # Another input, or the same input in another encoding, is never that entry.
    assert (await env.embed("alpha", texts[:2], encoding_format="float"))[0] == "miss"


async def test_one_tenant_never_gets_another_tenants_entry(env: Env) -> None:
    question = text()
    assert (await env.embed("alpha", question))[0] == "miss"
    assert (await env.embed("beta", question))[0] == "miss"
    assert (await env.embed("beta", question))[0] == "exact"


async def test_errors_are_openai_shaped(env: Env) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        await env.client("alpha").embeddings.create(model="no-such-model", input="hi")
    assert missing.value.code == "model_not_found"
    with pytest.raises(openai.AuthenticationError):
        await openai.AsyncOpenAI(
            base_url=env.url + "/v1", api_key="dj-wrong", max_retries=0
        ).embeddings.create(model=SIM_MODEL, input="hi")
    async with httpx.AsyncClient(base_url=env.url, timeout=10) as http:
        auth = {"authorization": f"Bearer {KEYS['alpha']}"}
        for body, param in (
            ({"model": SIM_MODEL}, "input"),
            ({"model": SIM_MODEL, "input": []}, "input"),
            ({"model": SIM_MODEL, "input": [1, "a"]}, "input"),
            ({"input": "x"}, "model"),
            ({"model": SIM_MODEL, "input": "x", "encoding_format": "hex"}, "encoding_format"),
        ):
            response = await http.post("/v1/embeddings", json=body, headers=auth)
            assert response.status_code == 400, body
            assert response.json()["error"]["param"] == param
        broken = await http.post("/v1/embeddings", content=b"{not json", headers=auth)
        assert broken.status_code == 400 and broken.json()["error"]["type"]


async def test_the_tenants_rate_limit_applies(env: Env) -> None:
    await env.embed("slow", text())
    with pytest.raises(openai.RateLimitError):
        await env.embed("slow", text())


async def test_metrics_count_embeddings_by_outcome(env: Env) -> None:
    question = text()
    await env.embed("alpha", question)
    await env.embed("alpha", question)
    async with httpx.AsyncClient(base_url=env.url, timeout=10) as http:
        auth = {"authorization": f"Bearer {KEYS['alpha']}"}
        refused = await http.post("/v1/embeddings", json={"model": SIM_MODEL}, headers=auth)
        assert refused.status_code == 400  # counted as rejected, whatever ran before
        metrics = (await http.get("/metrics")).text
    lines = [
        line
        for line in metrics.splitlines()
        if line.startswith("deja_requests_total{") and 'route="embeddings"' in line
    ]
    outcomes = {line.split('cache="')[1].split('"')[0] for line in lines}
    assert {"miss", "exact", "rejected"} <= outcomes, lines
