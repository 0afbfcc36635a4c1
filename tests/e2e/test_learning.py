"""The learning loop through a real gateway (issue 24): shadow re-asks that disagree raise the
entry's cut-off past the score it was served at, and the tenant's target once its live
precision is measured under it. The replicas are SIMULATED: their answer is a function of the
prompt, so a paraphrase's fresh answer never matches the cached one (every shadow check
disagrees) — mechanics only, no quality claim."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest

from sim.runner import SimCluster
from tests.e2e.test_verified_semantic import ADMIN, Env

pytestmark = pytest.mark.e2e

ASKED, SERVED = "How do I reset my password?", "How can I reset my password?"


async def test_disagreeing_shadow_checks_raise_the_entry_cut_off_and_the_tenant_target(
    sims: SimCluster, make_gateway: Any
) -> None:
    async with make_gateway(
        replicas=sims.urls, semantic_enabled=True, admin_key=ADMIN, semantic_shadow_rate=1.0
    ) as (url, app):
        learning = app.state.gateway.learning
        learning.correction.min_verdicts = 3
        scopes = [Env(url, app) for _ in range(3)]
        entries = []
        for env in scopes:  # three conversations: one entry each, one shadowed hit each
            entries.append((await env.ask(ASKED)).headers["x-deja-entry"])
            assert (await env.ask(SERVED)).headers["x-deja-cache"] == "semantic"
        env = scopes[0]
        report = await env.admin("GET", "/admin/semantic/corrections")
        tenant = report["tenants"]["default"]
        assert tenant["raised"] == pytest.approx(0.01) and tenant["moves"][0]["verdicts"] == 3
        entry = await env.admin("GET", f"/admin/cache/entries/{entries[0]}")
        wrong = [v for v in entry["evidence"] if v["source"] == "shadow" and not v["correct"]]
        assert len(wrong) == 1 and wrong[0]["score"] is not None
        assert entry["cutoff"]["tau"] > wrong[0]["score"]
        again = await env.ask(SERVED)  # the score it was wrong at no longer serves it
        assert again.headers["x-deja-cache"] == "miss"
        audit = await env.admin("GET", "/admin/audit", params={"action": "semantic.correction"})
        assert audit["actions"][0]["who"] == "deja"
        metrics = (await env.admin_response("GET", "/metrics")).text
        assert re.search(r"^deja_precision_corrections_total 1\.0$", metrics, re.M)
        pinned = await env.admin(
            "PUT", "/admin/semantic/corrections/default", json={"pinned": True}
        )
        assert pinned["pinned"] is True and pinned["raised"] == pytest.approx(0.01)
        await env.admin("DELETE", "/admin/semantic/corrections/default")
        report = await env.admin("GET", "/admin/semantic/corrections")
        assert report["tenants"]["default"]["raised"] == 0.0


async def test_feedback_is_live_precision_too(sims: SimCluster, make_gateway: Any) -> None:
    async with make_gateway(
        replicas=sims.urls, semantic_enabled=True, admin_key=ADMIN, semantic_shadow_rate=0.0
    ) as (url, app):
        app.state.gateway.learning.correction.min_verdicts = 2
        env = Env(url, app)
        for _ in range(2):
            env.system = f"Session {uuid.uuid4().hex}."
            entry = (await env.ask(ASKED)).headers["x-deja-entry"]
            await env.admin(
                "POST", f"/admin/cache/entries/{entry}/feedback", json={"verdict": "wrong"}
            )
        report = await env.admin("GET", "/admin/semantic/corrections")
        assert report["tenants"]["default"]["raised"] == pytest.approx(0.01)
