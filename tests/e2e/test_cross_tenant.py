"""No cross-tenant hit, ever: a hypothesis property test over random interleavings of tenants,
namespaces, and identical and paraphrased questions, against a real gateway with both cache
layers on and a permissive θ (so paraphrases hit often and leaks would show)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deja.sim.config import SimConfig
from deja.sim.runner import start_simulators
from deja.tenancy.keyring import key_hash
from tests.conftest import SIM_MODEL
from tests.support import gateway

pytestmark = pytest.mark.e2e

TENANTS = {"red": "dj-red", "green": "dj-green", "blue": "dj-blue"}
QUESTIONS = [
    "How do I configure the agent?",
    "What is the process for configuring the agent?",
    "How can I configure the agent?",
    "How do I reset my password?",
    "How can I reset my password?",
    "What is the capital of France?",
]


@contextlib.contextmanager
def threaded_gateway(tmp: Path) -> Iterator[str]:
    """Simulated replicas and a gateway on their own event loop in a background thread, so a
    synchronous hypothesis test can drive them."""
    keys = tmp / "keys.yaml"
    keys.write_text(
        yaml.safe_dump({"tenants": {t: {"key_hashes": [key_hash(k)]} for t, k in TENANTS.items()}})
    )
    ready: dict[str, Any] = {}
    started = threading.Event()
    loop = asyncio.new_event_loop()

    async def main() -> None:
        sims = await start_simulators(2, SimConfig(speed=0))
        stop = asyncio.Event()
        ready["stop"] = stop
        try:
            async with gateway(
                replicas=sims.urls, keys_file=keys, semantic_enabled=True, semantic_threshold=0.75
            ) as (url, app):
                ready["url"], ready["app"] = url, app
                started.set()
                await stop.wait()
        finally:
            await sims.stop()
            started.set()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    started.wait(60)
    if "url" not in ready:
        raise RuntimeError("gateway did not start")
    try:
        yield ready["url"]
    finally:
        loop.call_soon_threadsafe(ready["stop"].set)
        thread.join(30)


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with threaded_gateway(tmp_path_factory.mktemp("xt")) as url:
        yield url


#: entry id → (tenant, namespace, answer text) of the miss that created it, across examples.
ORIGINS: dict[str, tuple[str, str, str]] = {}
OUTCOMES: collections.Counter[str] = collections.Counter()

step = st.tuples(
    st.sampled_from(sorted(TENANTS)), st.sampled_from(["", "ns1"]), st.sampled_from(QUESTIONS)
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(step, min_size=1, max_size=12))
def test_no_response_for_one_tenant_is_served_to_another(
    gw: str, steps: list[tuple[str, str, str]]
) -> None:
    with httpx.Client(base_url=gw, timeout=15) as http:
        for tenant, namespace, question in steps:
            headers = {"authorization": f"Bearer {TENANTS[tenant]}"}
            if namespace:
                headers["x-deja-namespace"] = namespace
            body = {"model": SIM_MODEL, "messages": [{"role": "user", "content": question}]}
            resp = http.post("/v1/chat/completions", json=body, headers=headers)
            assert resp.status_code == 200
            outcome = resp.headers["x-deja-cache"]
            OUTCOMES[outcome] += 1
            text = resp.json()["choices"][0]["message"]["content"]
            entry = resp.headers["x-deja-entry"]
            if outcome == "miss":
                ORIGINS.setdefault(entry, (tenant, namespace, text))
                continue
            assert outcome in {"exact", "semantic"}
            # Stores run after the response; an entry served must have been created by a miss
            # of this same tenant and namespace, and carry exactly that miss's answer.
            assert entry in ORIGINS, "served an entry no request of this test created"
            origin_tenant, origin_ns, origin_text = ORIGINS[entry]
            assert (origin_tenant, origin_ns) == (tenant, namespace)
            assert text == origin_text


def test_the_property_exercised_both_cache_layers() -> None:
    """Guard against a vacuous pass: the interleavings above must have produced real hits."""
    assert OUTCOMES["exact"] > 0 and OUTCOMES["semantic"] > 0, OUTCOMES
