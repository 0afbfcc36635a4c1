"""Feedback on served entries (``POST /v1/feedback`` and the admin twin) against a running
gateway with tenants, through httpx and the official openai client; simulated replicas."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from deja.tenancy.keyring import key_hash
from sim.runner import SimCluster
from tests.support import SIM_MODEL

pytestmark = pytest.mark.e2e

KEYS = {"alpha": "dj-fb-alpha", "beta": "dj-fb-beta", "slow": "dj-fb-slow"}
ADMIN = {"authorization": "Bearer fb-admin"}


class Env:
    def __init__(self, url: str, app: Any) -> None:
        self.url = url
        self.app = app
        self.http = httpx.AsyncClient(base_url=url, timeout=15)

    async def ask(self, tenant: str, question: str) -> httpx.Response:
        body = {"model": SIM_MODEL, "messages": [{"role": "user", "content": question}]}
        headers = {"authorization": f"Bearer {KEYS[tenant]}"}
        resp = await self.http.post("/v1/chat/completions", json=body, headers=headers)
        await self.app.state.gateway.pipeline.drain()
        assert resp.status_code == 200, resp.text
        return resp

    async def cached(self, tenant: str) -> str:
        """A new question, asked twice: the entry id of its exact hit."""
        question = f"What does the feedback test ask, {uuid.uuid4().hex[:8]}?"
        await self.ask(tenant, question)
        hit = await self.ask(tenant, question)
        assert hit.headers["x-deja-cache"] == "exact"
        return hit.headers["x-deja-entry"]

    async def feedback(self, tenant: str | None, body: Any) -> httpx.Response:
        headers = {"authorization": f"Bearer {KEYS[tenant]}"} if tenant else {}
        if isinstance(body, bytes):
            return await self.http.post("/v1/feedback", content=body, headers=headers)
        return await self.http.post("/v1/feedback", json=body, headers=headers)


@pytest.fixture(scope="module")
async def env(
    sims: SimCluster, tmp_path_factory: pytest.TempPathFactory, make_gateway: Any
) -> AsyncIterator[Env]:
    tenants: dict[str, Any] = {name: {"key_hashes": [key_hash(key)]} for name, key in KEYS.items()}
    tenants["slow"]["rate_limit_rpm"] = 2
    keys = tmp_path_factory.mktemp("keys") / "keys.yaml"
    keys.write_text(yaml.safe_dump({"tenants": tenants}))
    async with make_gateway(
        replicas=sims.urls, keys_file=Path(keys), admin_key="fb-admin", semantic_enabled=True
    ) as (url, app):
        env = Env(url, app)
        yield env
        await env.http.aclose()


async def test_wrong_removes_the_entry_and_right_keeps_it(env: Env) -> None:
    entry = await env.cached("alpha")
    right = await env.feedback("alpha", {"entry_id": entry, "verdict": "right"})
    assert right.status_code == 200
    assert right.json() == {
        "object": "deja.feedback",
        "entry_id": entry,
        "verdict": "right",
        "removed": False,
    }
    question_hit = await env.http.get(f"/admin/cache/entries/{entry}", headers=ADMIN)
    assert question_hit.status_code == 200
    question = question_hit.json()["question"]
    assert (await env.ask("alpha", question)).headers["x-deja-cache"] == "exact"

    wrong = await env.feedback("alpha", {"entry_id": entry, "verdict": "wrong", "note": "stale"})
    assert wrong.status_code == 200 and wrong.json()["removed"] is True
    gone = await env.http.get(f"/admin/cache/entries/{entry}", headers=ADMIN)
    assert gone.status_code == 404
    again = await env.ask("alpha", question)
    assert again.headers["x-deja-cache"] == "miss"  # neither exact nor semantic
    trail = await env.http.get("/admin/audit?action=cache.feedback", headers=ADMIN)
    mine = [r for r in trail.json()["actions"] if r.get("id") == entry]
    assert {r["verdict"] for r in mine} == {"right", "wrong"}
    assert all(r["who"].startswith("key:") for r in mine)
    assert any(r.get("note") == "stale" for r in mine)
    metrics = (await env.http.get("/metrics")).text
    assert 'deja_feedback_total{source="app",verdict="wrong"}' in metrics
    assert 'deja_feedback_total{source="app",verdict="right"}' in metrics


async def test_another_tenants_entry_is_the_same_404_as_an_unknown_one(env: Env) -> None:
    entry = await env.cached("alpha")
    theirs = await env.feedback("beta", {"entry_id": entry, "verdict": "wrong"})
    unknown = await env.feedback("beta", {"entry_id": "0" * len(entry), "verdict": "wrong"})
    malformed = await env.feedback("beta", {"entry_id": "../x", "verdict": "wrong"})
    for resp in (theirs, unknown, malformed):
        assert resp.status_code == 404
        assert resp.json()["error"]["param"] == "entry_id"
    assert theirs.json()["error"]["message"] == f"no cache entry {entry}"
    assert (await env.ask("alpha", await _question(env, entry))).headers["x-deja-cache"] == "exact"


async def _question(env: Env, entry: str) -> str:
    found = await env.http.get(f"/admin/cache/entries/{entry}", headers=ADMIN)
    assert found.status_code == 200
    return str(found.json()["question"])


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"entry_id": "abc"}, "verdict"),
        ({"entry_id": "abc", "verdict": "maybe"}, "verdict"),
        ({"verdict": "wrong"}, "entry_id"),
        ({"entry_id": "abc", "verdict": "wrong", "score": 1}, "score"),
        ({"entry_id": "abc", "verdict": "wrong", "note": "x" * 501}, "note"),
        (b"not json", None),
        (b"[1, 2]", None),
    ],
)
async def test_bad_feedback_is_a_400_naming_the_field(env: Env, body: Any, param: str) -> None:
    resp = await env.feedback("alpha", body)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param


async def test_feedback_needs_a_key_and_takes_the_rate_limit(env: Env) -> None:
    missing = await env.feedback(None, {"entry_id": "abc", "verdict": "right"})
    assert missing.status_code == 401
    codes = [
        (await env.feedback("slow", {"entry_id": "0" * 32, "verdict": "right"})).status_code
        for _ in range(3)
    ]
    assert codes[:2] == [404, 404] and codes[2] == 429


async def test_the_openai_sdk_can_send_feedback(env: Env) -> None:
    entry = await env.cached("beta")
    client = openai.AsyncOpenAI(base_url=env.url + "/v1", api_key=KEYS["beta"], max_retries=0)
    raw = await client.post(
        "/feedback", cast_to=httpx.Response, body={"entry_id": entry, "verdict": "wrong"}
    )
    assert raw.json()["removed"] is True
    with pytest.raises(openai.NotFoundError):
        await client.post(
            "/feedback", cast_to=httpx.Response, body={"entry_id": entry, "verdict": "wrong"}
        )


async def test_admins_give_feedback_on_any_tenants_entry(env: Env) -> None:
    entry = await env.cached("beta")
    path = f"/admin/cache/entries/{entry}/feedback"
    client_key = {"authorization": f"Bearer {KEYS['beta']}"}
    refused = await env.http.post(path, json={"verdict": "wrong"}, headers=client_key)
    assert refused.status_code == 403
    bad = await env.http.post(path, json={"verdict": "meh"}, headers=ADMIN)
    assert bad.status_code == 422  # the admin API's validation status (FastAPI's)
    assert "verdict" in str(bad.json()["error"]["param"])
    done = await env.http.post(path, json={"verdict": "wrong"}, headers=ADMIN)
    assert done.status_code == 200 and done.json()["removed"] is True
    again = await env.http.post(path, json={"verdict": "wrong"}, headers=ADMIN)
    assert again.status_code == 404
    metrics = (await env.http.get("/metrics")).text
    assert 'deja_feedback_total{source="admin",verdict="wrong"}' in metrics
