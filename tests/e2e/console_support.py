"""Helpers shared by the console's API and browser tests: a gateway with the semantic layer on
(the shipped verifier, ONNX embedder, Qdrant Edge) in front of simulated replicas."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import Any

import httpx

from tests.support import SIM_MODEL

ADMIN_KEY = "console-admin-key"
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}
#: The gateway settings the console tests run with (a fast timeline, no shadow traffic).
SETTINGS: dict[str, Any] = {
    "semantic_enabled": True,
    "admin_key": ADMIN_KEY,
    "semantic_shadow_rate": 0.0,
    "console_sample_seconds": 0.25,
    "health_check_interval_seconds": 0.25,
    # These tests are about what the console shows, not the lookup budget: a loaded test
    # machine must not turn a semantic hit into a timed-out miss.
    "semantic_timeout_seconds": 5.0,
}

#: A cached question, and close ones the shipped verifier rejects at the default target.
#: Which of them lands within the near-miss margin under some cut-off depends on the CPU: the
#: int8 verifier's and embedder's scores move with the instruction set (AVX2 against
#: AVX-512 VNNI), so ``make_near_miss`` takes the first that does.
CACHED = "How do I sort a list in ascending order?"
CLOSE_CANDIDATES = (
    "How do I sort a list in ascending order quickly?",
    "How do I sort a list into ascending order?",
    "How to sort a list ascending?",
    "What is the best way to sort a list in ascending order?",
)


class Env:
    """One gateway; each test talks in its own conversation scope (a unique system prompt)."""

    def __init__(self, url: str, app: Any) -> None:
        self.url = url
        self.app = app
        self.http = httpx.AsyncClient(base_url=url, timeout=30)

    def scope(self) -> str:
        return f"You are a helpful assistant. Session {uuid.uuid4().hex}."

    async def ask(
        self,
        question: str,
        system: str,
        *,
        namespace: str = "",
        no_store: bool = False,
    ) -> httpx.Response:
        headers: dict[str, str] = {}
        if namespace:
            headers["x-deja-namespace"] = namespace
        if no_store:
            headers["cache-control"] = "no-store"
        body = {
            "model": SIM_MODEL,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": question},
            ],
        }
        resp = await self.http.post("/v1/chat/completions", json=body, headers=headers)
        assert resp.status_code == 200, resp.text
        await self.app.state.gateway.pipeline.drain()
        return resp

    async def admin(self, method: str, path: str, **kwargs: Any) -> Any:
        resp = await self.http.request(method, path, headers=ADMIN, **kwargs)
        assert resp.status_code == 200, resp.text
        return resp.json()

    async def next_point(self) -> None:
        """Wait until the timeline has taken a point after now (every 0.25 s here)."""
        now = time.time()
        deadline = now + 10
        while True:
            points = (await self.admin("GET", "/admin/timeline"))["points"]
            if points and points[-1]["at"] > now:
                return
            assert time.time() < deadline, "the timeline took no new point"
            await asyncio.sleep(0.05)

    async def close(self) -> None:
        await self.http.aclose()


@dataclass(frozen=True)
class NearMiss:
    question: str
    score: float
    tau: float


async def make_near_miss(env: Env, system: str) -> NearMiss:
    """Cache ``CACHED``, then ask close questions (not stored) until one scores a miss with a
    cut-off of the table just above it (within 0.1), and set the precision target of that
    cut-off: a near miss against τ, made with the real verifier and calibration table. The
    caller restores the target with ``restore_precision``."""
    await env.ask(CACHED, system)
    semantic = await env.admin("GET", "/admin/semantic")
    rows = [r for r in semantic["calibration"]["table"] if r["tau"] is not None]
    scores = {}
    for question in CLOSE_CANDIDATES:
        probe = await env.ask(question, system, no_store=True)
        assert probe.headers["x-deja-cache"] == "miss"
        score = scores[question] = float(probe.headers["x-deja-verifier-score"])
        above = [(r["tau"], r["precision"]) for r in rows if r["tau"] > score]
        if above and min(above)[0] - score < 0.1:
            tau, target = min(above)
            break
    else:
        raise AssertionError(f"no close question within 0.1 under a cut-off: {scores}")
    await env.admin("PUT", "/admin/threshold", json={"precision": {"global": target}})
    again = await env.ask(question, system, no_store=True)
    assert again.headers["x-deja-cache"] == "miss"
    return NearMiss(question, score, tau)


async def stricter_target(env: Env, score: float) -> float:
    """The least precision target of the live table whose τ is above ``score``: a live target
    at which a hit of that score stops being served (read from the table, not assumed, so a
    refitted table keeps the test meaningful)."""
    table = (await env.admin("GET", "/admin/semantic"))["calibration"]["table"]
    above = [r["precision"] for r in table if r["tau"] is not None and r["tau"] > score]
    assert above, f"no target of the table stops a hit scoring {score}"
    return float(min(above))


async def table_floor(env: Env) -> float:
    """The live table's cosine floor: θ's default, as the console shows it."""
    return float((await env.admin("GET", "/admin/semantic"))["calibration"]["cosine_floor"])


async def restore_precision(env: Env, value: float = 0.92) -> None:
    await env.admin("PUT", "/admin/threshold", json={"precision": {"global": value}})
