"""Trusted semantic hits end to end, through the official openai client: a real gateway with the
shipped verifier, the ONNX embedder and Qdrant Edge, and simulated replicas (whose answers are a
function of the prompt, so a test can tell whose answer it got; they say nothing of quality)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from deja.semantic.crossencoder import SHIPPED_DIR
from deja.semantic.cutoffs import CALIBRATION_FILE
from sim.config import SimConfig
from sim.runner import SimCluster, start_simulators
from tests.support import SIM_MODEL

pytestmark = pytest.mark.e2e

ADMIN = "admin-key-for-tests"


class Env:
    def __init__(self, url: str, app: Any) -> None:
        self.url = url
        self.app = app
        self.client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
        self.system = f"You are helpful. Session {uuid.uuid4().hex}."
        self.seconds = 0.0

    async def ask(self, content: Any, **extra: Any) -> Any:
        messages = [
            {"role": "system", "content": self.system},
            {"role": "user", "content": content},
        ]
        started = time.perf_counter()
        raw = await self.client.chat.completions.with_raw_response.create(
            model=SIM_MODEL, messages=messages, **extra
        )
        self.seconds = time.perf_counter() - started  # the response, not the work after it
        await self.app.state.gateway.pipeline.drain()
        return raw

    async def admin_response(self, method: str, path: str, **kw: Any) -> httpx.Response:
        async with httpx.AsyncClient(base_url=self.url) as http:
            return await http.request(
                method, path, headers={"authorization": f"Bearer {ADMIN}"}, **kw
            )

    async def admin(self, method: str, path: str, **kw: Any) -> Any:
        resp = await self.admin_response(method, path, **kw)
        assert resp.status_code == 200, resp.text
        return resp.json()


@pytest.fixture
async def env(sims: SimCluster, make_gateway: Any) -> AsyncIterator[Env]:
    async with make_gateway(
        replicas=sims.urls, semantic_enabled=True, admin_key=ADMIN, semantic_shadow_rate=0.0
    ) as (url, app):
        yield Env(url, app)


async def test_a_paraphrase_is_a_verified_hit_with_its_scores(env: Env) -> None:
    first = await env.ask("How do I reset my password?")
    second = await env.ask("How can I reset my password?")
    assert first.headers["x-deja-cache"] == "miss"
    assert second.headers["x-deja-cache"] == "semantic"
    assert second.headers["x-deja-entry"] == first.headers["x-deja-entry"]
    assert 0.0 <= float(second.headers["x-deja-verifier-score"]) <= 1.0
    assert float(second.headers["x-deja-similarity"]) > 0.7
    text = first.parse().choices[0].message.content
    assert second.parse().choices[0].message.content == text


@pytest.mark.parametrize(
    ("cached", "asked"),
    [
        ("Is it safe to eat raw eggs?", "Is it not safe to eat raw eggs?"),
        ("How do I sort a list in ascending order?", "How do I sort a list in descending order?"),
    ],
)
async def test_close_but_different_questions_are_misses(env: Env, cached: str, asked: str) -> None:
    await env.ask(cached)
    got = await env.ask(asked)
    assert got.headers["x-deja-cache"] == "miss"
    assert float(got.headers["x-deja-similarity"]) > 0.9  # cosine alone would have served it


def image(data: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}


async def test_the_same_question_about_another_image_is_a_miss(env: Env) -> None:
    text = {"type": "text", "text": "What animal is in this picture?"}
    first = await env.ask([text, image("Y2F0")])
    other = await env.ask([text, image("ZG9n")])
    same = await env.ask([text, image("Y2F0")])
    assert first.headers["x-deja-cache"] == "miss"
    assert other.headers["x-deja-cache"] == "miss"
    assert same.headers["x-deja-cache"] == "exact"


@pytest.mark.parametrize(
    "question",
    [
        "When is the next full moon?",
        "¿Cuándo es el próximo partido del Betis?",
        "Has the new iPhone been released yet?",
        "¿Ya salió el nuevo álbum de Rosalía?",
        "What time is it in Tokyo?",
        "¿Qué hora es en Buenos Aires?",
        "What day is it?",
        "How much has the euro moved since last week?",
        "¿Cuánto ha subido el precio desde el lunes?",
        "Is Twitter working?",  # no rule matches: the classifier on the query embedding does
    ],
)
async def test_time_dependent_questions_of_each_new_kind_bypass(env: Env, question: str) -> None:
    for _ in range(2):
        got = await env.ask(question)
        assert got.headers["x-deja-cache"] == "bypass", question


async def test_precision_target_is_live_and_shown_by_the_admin_api(env: Env) -> None:
    report = await env.admin("GET", "/admin/semantic")
    assert report["verifier"]["model_id"].startswith("minilm-ce-")
    assert report["precision"]["global"] == 0.92
    assert report["calibration"]["table"] and report["calibration"]["k"] >= 1
    await env.ask("How do I reset my password?")
    # A target the table never reached is refused (it would switch semantic hits off unseen).
    refused = await env.admin_response(
        "PUT", "/admin/threshold", json={"precision": {"global": 0.999}}
    )
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "global"
    assert (await env.admin("GET", "/admin/semantic"))["precision"]["global"] == 0.92
    # The highest target it covers is live: the paraphrase is still answered or missed, never
    # an error, and the admin API shows the new target.
    high = report["calibration"]["targets"]["high"]
    await env.admin("PUT", "/admin/threshold", json={"precision": {"global": high}})
    got = await env.ask("How can I reset my password?")
    assert got.headers["x-deja-cache"] in ("semantic", "miss")
    report = await env.admin("GET", "/admin/semantic")
    assert report["precision"]["global"] == high


async def test_judge_sync_decides_the_grey_zone_against_the_simulator(
    sims: SimCluster, make_gateway: Any, tmp_path: Path
) -> None:
    """The simulator answers judge prompts by word overlap (Jaccard ≥ 0.6): mechanics only."""
    table = json.loads((SHIPPED_DIR / CALIBRATION_FILE).read_text())
    for row in table["table"]:  # nothing clears the default target's cut-off: the grey zone
        if row["precision"] >= 0.9:  # (from the judge floor's τ up to it) goes to the judge
            row["tau"] = 1.0
    unreachable = tmp_path / "calibration.json"
    unreachable.write_text(json.dumps(table))
    async with make_gateway(
        replicas=sims.urls,
        semantic_enabled=True,
        admin_key=ADMIN,
        semantic_shadow_rate=0.0,
        semantic_judge="sync",
        semantic_calibration_file=unreachable,
        semantic_judge_floor=0.5,
    ) as (url, app):
        env = Env(url, app)
        await env.ask("How do I reset my password?")
        got = await env.ask("How do I reset my password please?")  # overlap 5/6: "yes"
        report = await env.admin("GET", "/admin/semantic")
        assert got.headers["x-deja-cache"] == "semantic"
        assert report["judge"]["calls"] == 1 and report["judge"]["tokens"] > 0


async def test_shadow_checks_do_not_delay_the_served_hit(make_gateway: Any) -> None:
    slow = await start_simulators(1, SimConfig(speed=1.0, decode_ms_per_token=40))
    try:
        async with make_gateway(
            replicas=slow.urls, semantic_enabled=True, admin_key=ADMIN, semantic_shadow_rate=1.0
        ) as (url, app):
            env = Env(url, app)
            await env.ask("How do I reset my password?")
            miss_seconds = env.seconds
            hit = await env.ask("How can I reset my password?")  # drains the re-ask too
            assert hit.headers["x-deja-cache"] == "semantic"
            assert env.seconds < miss_seconds / 3  # the re-ask ran after the response
            stats = await env.admin("GET", "/admin/cache/stats")
            assert stats["live_precision"]["checked"] == 1
    finally:
        await slow.stop()
