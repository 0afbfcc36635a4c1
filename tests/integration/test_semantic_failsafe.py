"""A semantic lookup that fails or times out is a safe miss (issue 19, finding 5): the temporal
classifier still decides whether the answer may be stored (in the background, before storing),
and a storable answer's question is still indexed. On base-stop17 a timeout dropped the query:
"Is there a queue at the DMV?" (caught only by the classifier) was stored and served as an
exact hit, and the vector store fell behind the exact store (71 vectors for 343 answers)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from deja.temporal.rules import TemporalDetector
from sim.runner import SimCluster
from tests.support import SIM_MODEL

pytestmark = pytest.mark.integration


def chat(text: str) -> dict[str, Any]:
    return {"model": SIM_MODEL, "messages": [{"role": "user", "content": text}]}


#: Time-dependent questions that only the classifier may catch. The classifier's probability for
#: each sits close to its threshold and moves with the CPU's int8 kernels (AVX2 against AVX-512
#: VNNI), and the rules grow (ff4c661 made them catch "delays on the subway"), so the test takes
#: the first that the rules pass and this gateway's classifier flags.
CLASSIFIER_ONLY = (
    "Is there a queue at the DMV?",
    "Are there delays on the subway?",
    "Is there a long wait at the DMV?",
    "How busy is the DMV?",
)


async def classifier_only(gateway: Any) -> str:
    step = gateway.semantic_step
    classifier = step.checks.classifier
    for question in CLASSIFIER_ONLY:
        if TemporalDetector().check(question) is not None:
            continue  # the rules' catch, not the classifier's
        if classifier.volatile(await gateway.semantic.embedder.embed(question)):
            return question
    raise AssertionError(f"the temporal classifier flags none of {CLASSIFIER_ONLY}")


async def test_a_timed_out_lookup_still_classifies_and_indexes(
    sims: SimCluster, make_gateway: Any
) -> None:
    async with (
        make_gateway(
            replicas=sims.urls,
            semantic_enabled=True,
            semantic_timeout_seconds=1e-6,  # every lookup times out at its first await
        ) as (url, app),
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        gateway = app.state.gateway
        question = await classifier_only(gateway)
        volatile = chat(question)
        for _ in range(2):
            reply = await http.post("/v1/chat/completions", json=volatile)
            assert reply.status_code == 200
            assert reply.headers["x-deja-cache"] == "miss"  # never stored, so never exact
            await gateway.pipeline.drain()

        steady = chat("How do I configure the agent?")
        first = await http.post("/v1/chat/completions", json=steady)
        assert first.headers["x-deja-cache"] == "miss"
        await gateway.pipeline.drain()
        second = await http.post("/v1/chat/completions", json=steady)
        assert second.headers["x-deja-cache"] == "exact"
        assert await gateway.semantic.store.count() == 1  # its question was indexed
        metrics = (await http.get("/metrics")).text
        assert 'deja_semantic_errors_total{kind="timeout"}' in metrics
        assert 'deja_bypass_total{reason="temporal"} 2.0' in metrics  # decided at store time
