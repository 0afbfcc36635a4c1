"""The console's server side through a real gateway (uvicorn on a socket, simulated replicas,
the shipped verifier): the page and its assets, and the admin endpoints it draws from."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from importlib import resources

import pytest

from deja.semantic.crossencoder import SHIPPED_DIR as _SHIPPED
from deja.semantic.cutoffs import CALIBRATION_FILE as _CAL
from deja.semantic.cutoffs import load_table as _load_table
from tests.e2e.console_support import (
    ADMIN,
    CACHED,
    Env,
    make_near_miss,
    restore_precision,
    stricter_target,
)

#: θ defaults to the shipped table's cosine floor.
FLOOR = _load_table(_SHIPPED / _CAL).cosine_floor

pytestmark = pytest.mark.e2e


async def until(check: Callable[[], Awaitable[bool]], seconds: float = 10.0) -> None:
    """Poll ``check`` until it holds (background sampling and scrapes run on intervals)."""
    deadline = time.monotonic() + seconds
    while not await check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


async def test_the_page_loads_without_a_key_under_a_strict_policy(env: Env) -> None:
    for path in ("/admin/ui", "/admin/ui/"):
        page = await env.http.get(path)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        csp = page.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert 'id="admin-key"' in page.text and "console-admin-key" not in page.text
    script = await env.http.get("/admin/ui/assets/js/main.js")
    assert script.status_code == 200
    assert script.headers["content-type"].startswith("text/javascript")
    for bad in ("js/nope.js", "..%2Fapi%2Fadmin.py", "index.html", "js/.hidden.js", "a.py"):
        assert (await env.http.get(f"/admin/ui/assets/{bad}")).status_code == 404, bad


def test_every_asset_the_page_names_is_shipped() -> None:
    """index.html's links and every module import resolve to a file in app/console (the
    package data), so the console works offline from an installed wheel."""
    folder = resources.files("app").joinpath("console")
    html = folder.joinpath("index.html").read_text()
    named = re.findall(r'(?:href|src)="/admin/ui/assets/([^"]+)"', html)
    for script in folder.joinpath("js").iterdir():
        if script.name.endswith(".js"):
            named += ["js/" + m for m in re.findall(r'from "\./([^"]+)"', script.read_text())]
            assert "http://" not in script.read_text().replace("http://www.w3.org", "")
    assert "js/main.js" in named and "js/charts.js" in named
    for name in named:
        assert folder.joinpath(*name.split("/")).is_file(), name


async def test_the_data_endpoints_need_the_admin_key(env: Env) -> None:
    calls = [
        ("GET", "/admin/timeline"),
        ("GET", "/admin/semantic/lookups"),
        ("GET", "/admin/semantic/near-misses"),
        ("GET", "/admin/audit"),
        ("POST", "/admin/threshold/preview"),
        ("GET", "/admin/cache/entries/" + "0" * 64),
    ]
    for method, path in calls:
        resp = await env.http.request(method, path, json={} if method == "POST" else None)
        assert resp.status_code == 401, path
        assert resp.json()["error"]["type"]


async def test_the_timeline_counts_requests_by_outcome(env: Env) -> None:
    system = env.scope()
    before = (await env.admin("GET", "/admin/timeline"))["totals"]
    await env.ask("What is the tallest mountain in Europe?", system)
    await env.ask("What is the tallest mountain in Europe?", system)
    await env.ask("Name a prime number above one hundred.", system)
    after = (await env.admin("GET", "/admin/timeline"))["totals"]
    assert after["requests"] - before["requests"] == 3
    assert after["outcomes"]["exact"] - before["outcomes"]["exact"] == 1
    assert after["tokens_saved"] > before["tokens_saved"]

    async def sampled() -> bool:
        doc = await env.admin("GET", "/admin/timeline")
        points = [p for p in doc["points"] if p["at"] >= time.time() - 30]
        return sum(p["outcomes"].get("exact", 0) for p in points) >= 1

    await until(sampled)


async def test_one_entry_shows_answer_hits_age_and_ttl(env: Env) -> None:
    system = env.scope()
    first = await env.ask("Which river flows through Vienna?", system)
    await env.ask("Which river flows through Vienna?", system)
    entry_id = first.headers["x-deja-entry"]

    async def counted() -> bool:
        doc = await env.admin("GET", f"/admin/cache/entries/{entry_id}")
        return bool(doc["hits"] == 1)

    await until(counted)
    doc = await env.admin("GET", f"/admin/cache/entries/{entry_id}")
    assert doc["question"] == "Which river flows through Vienna?"
    content = first.json()["choices"][0]["message"]["content"]
    assert doc["answer"]["message"]["content"] == content
    assert 0 <= doc["age_seconds"] < 60
    assert 86_000 < doc["ttl_seconds"] <= 86_400
    missing = await env.http.get("/admin/cache/entries/" + "0" * 64, headers=ADMIN)
    assert missing.status_code == 404
    assert (await env.http.get("/admin/cache/entries/nope", headers=ADMIN)).status_code == 404


async def test_a_dry_run_lists_what_would_go_and_removes_nothing(env: Env) -> None:
    system, ns = env.scope(), "dry-run-ns"
    await env.ask("What colour is the sky on Mars?", system, namespace=ns)
    await env.ask("How many moons does Mars have?", system, namespace=ns)
    dry = await env.admin(
        "POST", "/admin/cache/invalidate", json={"namespace": ns, "dry_run": True}
    )
    assert dry["count"] == 2 and dry["dry_run"] is True
    assert {e["question"] for e in dry["entries"]} == {
        "What colour is the sky on Mars?",
        "How many moons does Mars have?",
    }
    again = await env.ask("How many moons does Mars have?", system, namespace=ns)
    assert again.headers["x-deja-cache"] == "exact"


async def test_lookups_near_misses_and_the_theta_preview(env: Env) -> None:
    system = env.scope()
    await env.ask("How do I reset my password?", system)
    hit = await env.ask("How can I reset my password?", system)
    assert hit.headers["x-deja-cache"] == "semantic"
    try:
        made = await make_near_miss(env, system)
        near = await env.admin("GET", "/admin/semantic/near-misses")
        mine = [m for m in near["near_misses"] if m["question"] == made.question]
        assert mine, near
        assert mine[0]["cached_question"] == CACHED and mine[0]["cut"] == "tau"
        assert mine[0]["score"] == pytest.approx(made.score, abs=1e-4)
        assert mine[0]["cutoff"] == pytest.approx(made.tau, abs=1e-4)
        tight = await env.admin("GET", "/admin/semantic/near-misses", params={"margin": 1e-6})
        assert made.question not in [m["question"] for m in tight["near_misses"]]
    finally:
        await restore_precision(env)
    lookups = await env.admin("GET", "/admin/semantic/lookups")
    assert lookups["lookups"] >= 4 and lookups["verified"] is True
    assert sum(b["served"] for b in lookups["similarity"]) >= 1
    assert lookups["theta"] == FLOOR and 0.5 < lookups["tau"] < 1

    current = await env.admin("POST", "/admin/threshold/preview", json={})
    strict = await env.admin("POST", "/admin/threshold/preview", json={"global": 0.999})
    assert current["current"]["served"] >= 1
    assert strict["current"] == current["current"]
    assert strict["proposed"]["served"] == 0 and strict["theta"]["proposed"] == 0.999
    lax = await env.admin("POST", "/admin/threshold/preview", json={"precision": {"global": 0.8}})
    assert lax["proposed"]["served"] >= current["current"]["served"]
    assert lax["calibration"]["proposed"]["hit_rate"] > lax["calibration"]["current"]["hit_rate"]
    assert (await env.admin("GET", "/admin/threshold"))["global"] == FLOOR  # nothing saved
    bad = await env.http.post("/admin/threshold/preview", json={"global": 2}, headers=ADMIN)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "global"


async def test_admin_actions_are_kept_for_the_audit_page(env: Env) -> None:
    await env.admin("PUT", "/admin/threshold", json={"models": {"audit-model": 0.9}})
    await env.admin("PUT", "/admin/threshold", json={"models": {"audit-model": None}})
    recent = (await env.admin("GET", "/admin/audit", params={"action": "threshold"}))["actions"]
    assert recent[0]["change"] == {"models": {"audit-model": None}}
    assert recent[1]["change"] == {"models": {"audit-model": 0.9}}
    assert recent[0]["who"].startswith("admin:") and recent[0]["at"] <= time.time()


async def test_replicas_report_their_prefix_cache_hit_rate(env: Env) -> None:
    system = env.scope() + " " + "A long shared instruction block. " * 40
    for i in range(3):
        await env.ask(f"Question number {i} about the shared block?", system)

    async def scraped() -> bool:
        doc = await env.admin("GET", "/admin/replicas")
        return any(r["metrics"]["prefix_cache_hits"] > 0 for r in doc["replicas"])

    await until(scraped)
    for r in (await env.admin("GET", "/admin/replicas"))["replicas"]:
        m = r["metrics"]
        if m["prefix_cache_queries"]:
            assert m["prefix_cache_hit_rate"] == round(
                m["prefix_cache_hits"] / m["prefix_cache_queries"], 4
            )


async def test_served_pairs_near_misses_and_the_preview_show_their_labels(env: Env) -> None:
    system = env.scope()
    # a paraphrase that scores between the default target's τ and the table's last one, so
    # that a stricter target stops it (stricter_target, below)
    await env.ask("How do I change my email address?", system)
    hit = await env.ask("How can I update my email address?", system)
    assert hit.headers["x-deja-cache"] == "semantic"
    served = (await env.admin("GET", "/admin/semantic/served"))["served"]
    mine = next(s for s in served if s["question"] == "How can I update my email address?")
    assert mine["cached_question"] == "How do I change my email address?"
    assert mine["entry_id"] == hit.headers["x-deja-entry"] and mine["label"] is None
    body = {k: mine[k] for k in ("question", "cached_question", "entry_id", "tenant", "model")}
    label = await env.admin("POST", "/admin/semantic/labels", json={**body, "label": "same"})
    served = (await env.admin("GET", "/admin/semantic/served"))["served"]
    mine = next(s for s in served if s["question"] == "How can I update my email address?")
    assert mine["label"] == "same" and mine["label_id"] == label["id"]
    # θ 0.999 would stop serving it; the preview lists it with its label.
    strict = await env.admin("POST", "/admin/threshold/preview", json={"global": 0.999})
    stopped = [s for s in strict["stop"] if s["question"] == body["question"]]
    assert stopped and stopped[0]["label"] == "same" and strict["start"] == []
    try:
        made = await make_near_miss(env, system)
        near = (await env.admin("GET", "/admin/semantic/near-misses"))["near_misses"]
        miss = next(m for m in near if m["question"] == made.question)
        assert miss["label"] is None
        body = {k: miss[k] for k in ("question", "cached_question", "entry_id", "tenant", "model")}
        await env.admin("POST", "/admin/semantic/labels", json={**body, "label": "different"})
        near = (await env.admin("GET", "/admin/semantic/near-misses"))["near_misses"]
        assert next(m for m in near if m["question"] == made.question)["label"] == "different"
        # From a stricter live target, the default one would start serving the labelled hit.
        strict_target = await stricter_target(env, float(hit.headers["x-deja-verifier-score"]))
        await env.admin("PUT", "/admin/threshold", json={"precision": {"global": strict_target}})
        lax = await env.admin(
            "POST", "/admin/threshold/preview", json={"precision": {"global": 0.92}}
        )
        started = [s for s in lax["start"] if s["question"] == "How can I update my email address?"]
        assert started and started[0]["label"] == "same" and started[0]["score"] < 0.98
        scores = [s["score"] for s in lax["start"]]
        assert scores == sorted(scores, reverse=True)
    finally:
        await restore_precision(env)
