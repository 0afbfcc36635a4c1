"""Promotion (issue 24): a grey-zone paraphrase the judge calls the same becomes an alias of the
entry, through a real gateway (ONNX embedder and verifier, Qdrant Edge) and simulated replicas.

The simulator knows the two questions as one cluster (``--judge-labels``): one answer for both,
and a "same" from its judge; unlabelled, it says "same" by word overlap and answers each prompt
its own way. Both are SIMULATED: mechanics only, no quality claim. The calibration table is
edited so that no candidate clears the default target's cut-off: every candidate over the judge
floor's cut-off goes to the judge."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from deja.semantic.crossencoder import SHIPPED_DIR
from deja.semantic.cutoffs import CALIBRATION_FILE
from deja.tenancy.keyring import key_hash
from sim.runner import SimCluster
from tests.e2e.test_verified_semantic import ADMIN, Env
from tests.support import labelled_sim

pytestmark = pytest.mark.e2e

ASKED = "How do I reset my password?"
PARAPHRASE = "How do I reset my password please?"  # word overlap 5/6: the simulator says "same"


@pytest.fixture(scope="module")
def grey_table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    table = json.loads((SHIPPED_DIR / CALIBRATION_FILE).read_text())
    for row in table["table"]:
        if row["precision"] >= 0.9:
            row["tau"] = 1.0
    path = tmp_path_factory.mktemp("grey") / "calibration.json"
    path.write_text(json.dumps(table))
    return path


@pytest.fixture(scope="module")
async def labelled(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[SimCluster]:
    """A simulator that knows ASKED and PARAPHRASE as one cluster: one answer for both, and a
    right "same" (SIMULATED, as the word-overlap rule is)."""
    async with labelled_sim(tmp_path_factory.mktemp("labels"), ASKED, PARAPHRASE) as cluster:
        yield cluster


@pytest.fixture
def judged(labelled: SimCluster, grey_table: Path) -> dict[str, Any]:
    return {
        "replicas": labelled.urls,
        "semantic_enabled": True,
        "admin_key": ADMIN,
        "semantic_shadow_rate": 0.0,
        "semantic_calibration_file": grey_table,
        "semantic_judge_floor": 0.5,
    }


def promotions(metrics: str, outcome: str) -> float:
    found = re.search(rf'deja_promotions_total{{outcome="{outcome}"}} (\S+)', metrics)
    return float(found.group(1)) if found else 0.0


async def metrics_text(env: Env) -> str:
    return (await env.admin_response("GET", "/metrics")).text


@pytest.fixture
async def sync_env(make_gateway: Any, judged: dict[str, Any]) -> AsyncIterator[Env]:
    async with make_gateway(semantic_judge="sync", **judged) as (url, app):
        yield Env(url, app)


async def test_a_judged_paraphrase_becomes_an_exact_alias(sync_env: Env) -> None:
    env = sync_env
    first = await env.ask(ASKED)
    entry = first.headers["x-deja-entry"]
    judged = await env.ask(PARAPHRASE)  # sync judge: served, then promoted in the background
    assert judged.headers["x-deja-cache"] == "semantic"
    again = await env.ask(PARAPHRASE)
    assert again.headers["x-deja-cache"] == "exact"
    alias = again.headers["x-deja-entry"]
    assert alias != entry and again.headers["x-deja-alias-of"] == entry
    assert "x-deja-alias-of" not in first.headers
    assert again.parse().choices[0].message.content == first.parse().choices[0].message.content
    listed = await env.admin("GET", f"/admin/cache/entries/{entry}")
    assert [a["id"] for a in listed["aliases"]] == [alias]
    assert listed["aliases"][0]["question"] == PARAPHRASE and listed["alias_count"] == 1
    record = await env.admin("GET", f"/admin/cache/entries/{alias}")
    assert record["alias_of"] == entry and record["expires_at"] == listed["expires_at"]
    rows = (await env.admin("GET", "/admin/cache/entries"))["entries"]
    assert [r["id"] for r in rows] == [entry]  # the alias is listed with its entry
    assert promotions(await metrics_text(env), "promoted") == 1


async def test_wrong_feedback_on_an_alias_removes_the_alias_alone(sync_env: Env) -> None:
    env = sync_env
    entry = (await env.ask(ASKED)).headers["x-deja-entry"]
    await env.ask(PARAPHRASE)
    alias = (await env.ask(PARAPHRASE)).headers["x-deja-entry"]
    verdict = await env.admin(
        "POST", f"/admin/cache/entries/{alias}/feedback", json={"verdict": "wrong"}
    )
    assert verdict["removed"] is True
    assert (await env.ask(ASKED)).headers["x-deja-cache"] == "exact"
    after = await env.ask(PARAPHRASE)  # the verdict is remembered: a semantic hit, no alias
    assert after.headers["x-deja-cache"] == "semantic"
    assert (await env.admin("GET", f"/admin/cache/entries/{entry}"))["aliases"] == []


async def test_deleting_the_entry_takes_the_alias_from_both_layers(sync_env: Env) -> None:
    env = sync_env
    entry = (await env.ask(ASKED)).headers["x-deja-entry"]
    await env.ask(PARAPHRASE)
    await env.ask(PARAPHRASE)
    await env.admin("DELETE", f"/admin/cache/entries/{entry}")
    gateway = env.app.state.gateway
    assert await gateway.semantic.store.count() == 0  # the entry's vector and the alias's
    assert (await env.ask(PARAPHRASE)).headers["x-deja-cache"] == "miss"


async def test_a_tenant_can_turn_promotion_off(
    make_gateway: Any, judged: dict[str, Any], tmp_path: Path
) -> None:
    keys = tmp_path / "keys.yaml"
    tenants = {
        "learns": {"key_hashes": [key_hash("k")]},
        "fixed": {"key_hashes": [key_hash("k2")], "promote": False},
    }
    keys.write_text(yaml.safe_dump({"tenants": tenants}))
    async with make_gateway(semantic_judge="sync", keys_file=keys, **judged) as (url, app):
        fixed = Env(url, app)
        fixed.client = fixed.client.with_options(api_key="k2")
        await fixed.ask(ASKED)
        assert (await fixed.ask(PARAPHRASE)).headers["x-deja-cache"] == "semantic"
        assert (await fixed.ask(PARAPHRASE)).headers["x-deja-cache"] == "semantic"  # no alias
        assert promotions(await metrics_text(fixed), "promoted") == 0
        learns = Env(url, app)
        learns.client = learns.client.with_options(api_key="k")
        await learns.ask(ASKED)
        await learns.ask(PARAPHRASE)
        assert (await learns.ask(PARAPHRASE)).headers["x-deja-cache"] == "exact"


async def test_async_judge_promotes_once_the_answers_agree_and_the_alias_stays(
    make_gateway: Any, judged: dict[str, Any], labelled: SimCluster
) -> None:
    async with make_gateway(semantic_judge="async", **{**judged, "replicas": labelled.urls}) as (
        url,
        app,
    ):
        env = Env(url, app)
        entry = (await env.ask(ASKED)).headers["x-deja-entry"]
        first = await env.ask(PARAPHRASE)  # a miss now; the verdict and promotion after it
        assert first.headers["x-deja-cache"] == "miss"
        again = await env.ask(PARAPHRASE)
        assert again.headers["x-deja-cache"] == "exact"
        assert again.headers["x-deja-alias-of"] == entry  # the entry's answer, not the miss's
        assert promotions(await metrics_text(env), "promoted") == 1


async def test_async_judge_does_not_promote_over_answers_that_disagree(
    make_gateway: Any, judged: dict[str, Any], sims: SimCluster
) -> None:
    """The word-overlap judge says "same", but the simulator answers each prompt its own way:
    the miss's answer disagrees with the entry's, so no alias, and the entry learns it."""
    unlabelled = {**judged, "replicas": sims.urls}
    async with make_gateway(semantic_judge="async", **unlabelled) as (url, app):
        env = Env(url, app)
        entry = (await env.ask(ASKED)).headers["x-deja-entry"]
        await env.ask(PARAPHRASE)
        again = await env.ask(PARAPHRASE)
        assert again.headers["x-deja-cache"] == "exact"  # its own answer, stored by the miss
        assert "x-deja-alias-of" not in again.headers
        assert promotions(await metrics_text(env), "disagreed") == 1
        record = await env.admin("GET", f"/admin/cache/entries/{entry}")
        sources = {(v["source"], v["correct"]) for v in record["evidence"]}
        assert sources == {("judge", True), ("shadow", False)}


async def test_sync_judge_promotes_only_what_a_re_ask_confirms(
    make_gateway: Any, judged: dict[str, Any], sims: SimCluster
) -> None:
    """Sync mode served the entry's answer: its second opinion is a re-ask (a shadow check).
    The unlabelled simulator answers the paraphrase its own way, so nothing is promoted."""
    unlabelled = {**judged, "replicas": sims.urls}
    async with make_gateway(semantic_judge="sync", **unlabelled) as (url, app):
        env = Env(url, app)
        await env.ask(ASKED)
        assert (await env.ask(PARAPHRASE)).headers["x-deja-cache"] == "semantic"
        assert (await env.ask(PARAPHRASE)).headers["x-deja-cache"] == "semantic"  # no alias
        shadow = (await env.admin("GET", "/admin/semantic"))["shadow"]
        assert shadow["checked"] == 1 and shadow["tenants"]["default"]["disagree"] == 1


async def test_with_promotion_off_the_gateway_behaves_as_before(
    make_gateway: Any, judged: dict[str, Any]
) -> None:
    async with make_gateway(semantic_judge="sync", semantic_promote=False, **judged) as (
        url,
        app,
    ):
        env = Env(url, app)
        await env.ask(ASKED)
        assert (await env.ask(PARAPHRASE)).headers["x-deja-cache"] == "semantic"
        assert (await env.ask(PARAPHRASE)).headers["x-deja-cache"] == "semantic"
        assert promotions(await metrics_text(env), "promoted") == 0
