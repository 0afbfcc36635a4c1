"""No cross-tenant hit, ever: a hypothesis property test over random interleavings of tenants,
namespaces, and identical and paraphrased questions, against a real gateway with both cache
layers on and a permissive θ (so paraphrases hit often and leaks would show)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deja.tenancy.keyring import key_hash
from sim.config import SimConfig
from sim.runner import start_simulators
from tests.support import SIM_MODEL

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
def threaded_gateway(tmp: Path, make_gateway: Any) -> Iterator[str]:
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
            async with make_gateway(
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
def gw(tmp_path_factory: pytest.TempPathFactory, make_gateway: Any) -> Iterator[str]:
    with threaded_gateway(tmp_path_factory.mktemp("xt"), make_gateway) as url:
        yield url


@dataclass
class Ledger:
    """What the gateway served so far: entry id → (tenant, namespace, answer text) of the miss
    that created it, and how often each outcome occurred. One per module, so any test that
    asks through it checks every hit against every answer created before."""

    origins: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)

    def ask(self, http: httpx.Client, tenant: str, namespace: str, question: str) -> str:
        headers = {"authorization": f"Bearer {TENANTS[tenant]}"}
        if namespace:
            headers["x-deja-namespace"] = namespace
        body = {"model": SIM_MODEL, "messages": [{"role": "user", "content": question}]}
        resp = http.post("/v1/chat/completions", json=body, headers=headers)
        assert resp.status_code == 200
        outcome: str = resp.headers["x-deja-cache"]
        self.outcomes[outcome] += 1
        text = resp.json()["choices"][0]["message"]["content"]
        entry = resp.headers["x-deja-entry"]
        if outcome == "miss":
            self.origins.setdefault(entry, (tenant, namespace, text))
            return outcome
        assert outcome in {"exact", "semantic"}
        # Stores run after the response; an entry served must have been created by a miss of
        # this same tenant and namespace, and carry exactly that miss's answer.
        assert entry in self.origins, "served an entry no request of this test created"
        origin_tenant, origin_ns, origin_text = self.origins[entry]
        assert (origin_tenant, origin_ns) == (tenant, namespace)
        assert text == origin_text
        return outcome


@pytest.fixture(scope="module")
def ledger() -> Ledger:
    return Ledger()


step = st.tuples(
    st.sampled_from(sorted(TENANTS)), st.sampled_from(["", "ns1"]), st.sampled_from(QUESTIONS)
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(step, min_size=1, max_size=12))
def test_no_response_for_one_tenant_is_served_to_another(
    gw: str, ledger: Ledger, steps: list[tuple[str, str, str]]
) -> None:
    with httpx.Client(base_url=gw, timeout=15) as http:
        for tenant, namespace, question in steps:
            ledger.ask(http, tenant, namespace, question)


def test_the_ledger_sees_hits_in_both_layers_and_none_across_tenants(
    gw: str, ledger: Ledger
) -> None:
    """Guards against a vacuous pass: a fixed interleaving, in a namespace of its own, must
    produce an exact and a semantic hit for one tenant, and a miss for the next tenant."""
    namespace = f"fixed-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=gw, timeout=15) as http:
        first = ledger.ask(http, "red", namespace, "How do I reset my password?")
        time.sleep(0.2)  # the store runs after the response
        again = ledger.ask(http, "red", namespace, "How do I reset my password?")
        paraphrase = ledger.ask(http, "red", namespace, "How can I reset my password?")
        other = ledger.ask(http, "blue", namespace, "How do I reset my password?")
    assert (first, again, paraphrase, other) == ("miss", "exact", "semantic", "miss")
