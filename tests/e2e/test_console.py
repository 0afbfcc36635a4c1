"""The console in a real browser: Debian's chromium driven by Playwright (no browser download),
against a real gateway on a socket with simulated replicas and the shipped verifier.

Every wait is on a selector or a condition in the page, never a sleep. With
``DEJA_CONSOLE_SCREENSHOTS=DIR`` the tests also save screenshots of the states they check
(each page at 1280×800, and the phone viewport) into DIR.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, expect

from deja.semantic.crossencoder import SHIPPED_DIR
from deja.semantic.cutoffs import CALIBRATION_FILE, load_table
from deja.semantic.pairs import read_pairs
from sim.runner import SimCluster
from tests.e2e.browser_support import DESKTOP, PHONE, Console, console_at, signed_in
from tests.e2e.console_support import (
    ADMIN_KEY,
    CACHED,
    SETTINGS,
    Env,
    make_near_miss,
    restore_precision,
    stricter_target,
    table_floor,
)

pytestmark = pytest.mark.e2e

#: Cached questions and how a second user asks them: some served semantically, some not.
PARAPHRASES = [
    ("How do I reset my password?", "How can I reset my password?"),
    ("What is the capital of France?", "What's the capital city of France?"),
    ("Is it safe to eat raw eggs?", "Is it not safe to eat raw eggs?"),
    ("How do I learn to play the guitar?", "What is the best way to learn guitar?"),
    ("How can I improve my English writing?", "How do I get better at writing in English?"),
]


async def test_sign_in_sends_the_key_as_a_header_never_in_a_url(console: Console) -> None:
    page = console.page
    await console.sign_in("not-the-key")
    await expect(page.locator("#login-error")).to_have_text("That key was not accepted.")
    await expect(page.locator("#app")).to_be_hidden()
    assert all("not-the-key" not in url for url, _ in console.requests)
    console.requests.clear()
    await console.sign_in()
    await expect(page.locator("[data-kpi=requests] .kpi-value")).to_be_visible()
    assert await page.evaluate("sessionStorage.getItem('deja.adminKey')") == ADMIN_KEY
    data_calls = [(u, h) for u, h in console.requests if "/admin/" in u and "/admin/ui" not in u]
    assert data_calls
    assert all(h.get("authorization") == f"Bearer {ADMIN_KEY}" for _, h in data_calls)
    assert all(ADMIN_KEY not in url for url, _ in console.requests)
    assert ADMIN_KEY not in page.url
    await page.reload()  # the tab stays signed in
    await expect(page.locator("[data-kpi=requests] .kpi-value")).to_be_visible()
    await page.click("#logout")
    await expect(page.locator("#login")).to_be_visible()
    assert await page.evaluate("sessionStorage.getItem('deja.adminKey')") is None


async def test_the_overview_updates_after_traffic(console: Console, env: Env) -> None:
    await signed_in(console)
    page = console.page
    requests = page.locator("[data-kpi=requests] .kpi-value")
    await expect(requests).not_to_have_text("–")
    before = int((await requests.inner_text()).replace(",", ""))
    system = env.scope()
    for cached, asked in PARAPHRASES:  # a burst per timeline point: a miss, a paraphrase, a repeat
        for question in (cached, asked, cached):
            await env.ask(question, system)
        await env.next_point()
    await expect(requests).to_have_text(f"{before + 3 * len(PARAPHRASES):,}")
    for outcome in ("exact", "semantic", "miss"):
        bar = page.locator(f"#chart-outcomes rect.bar[data-series={outcome}]")
        await expect(bar.first).to_be_attached()
    await expect(page.locator("#chart-hit-rate [data-series=exact] circle").first).to_be_attached()
    await expect(page.locator("#replicas .replica")).to_have_count(2)
    await console.shot("overview")


async def test_the_overview_shows_latency_errors_and_the_queue_with_whole_labels(
    console: Console, env: Env
) -> None:
    await signed_in(console)
    page = console.page
    system = env.scope()
    await env.ask(CACHED, system)
    await env.next_point()
    for panel in ("#chart-latency", "#chart-errors", "#chart-queue"):
        await expect(page.locator(f"{panel} svg")).to_be_attached()
    await expect(page.locator("#chart-latency [data-series=p95] circle").first).to_be_attached()
    await expect(page.locator("#chart-queue [data-series='waiting for a slot']")).to_be_attached()
    # Every tick label lies inside its chart: none is cut at the edge ("18:56:0").
    clipped = await page.evaluate(
        """() => [...document.querySelectorAll('.chart svg text.tick')].filter((t) => {
             const box = t.getBoundingClientRect(), svg = t.ownerSVGElement.getBoundingClientRect();
             return box.width > 0 && (box.left < svg.left - 0.5 || box.right > svg.right + 0.5);
           }).map((t) => t.textContent)"""
    )
    assert clipped == []


async def test_moving_theta_shows_the_expected_hit_rate_before_saving(
    console: Console, env: Env
) -> None:
    system = env.scope()
    for cached, asked in PARAPHRASES:
        await env.ask(cached, system)
        await env.ask(asked, system)
    hit = await env.ask("How can I reset my password?", system)
    assert hit.headers["x-deja-cache"] == "semantic"
    await signed_in(console, "quality")
    page = console.page
    await expect(page.locator("#chart-similarity [data-marker='θ']")).to_be_attached()
    await expect(page.locator("#chart-calibration [data-dot=current-hit-rate]")).to_be_attached()
    await page.select_option("#setting-what", "theta")
    await page.fill("#setting-value", "0.999")
    preview = page.locator("#preview[data-state=ready][data-value='0.999']")
    await expect(preview).to_be_visible()
    current = float(await preview.get_attribute("data-current") or "nan")
    proposed = float(await preview.get_attribute("data-proposed") or "nan")
    assert current > 0 and proposed == 0.0
    await expect(page.locator("#preview-proposed")).to_contain_text("proposed 0.0%")
    floor = load_table(SHIPPED_DIR / CALIBRATION_FILE).cosine_floor
    assert (await env.admin("GET", "/admin/threshold"))["global"] == floor  # not saved
    await console.shot("quality")
    # Saving applies it, here to one model so the other tests keep their θ.
    await page.select_option("#setting-level", "model")
    await page.fill("#setting-name", "console-model")
    await page.fill("#setting-value", "0.95")
    await expect(page.locator("#preview[data-state=ready][data-value='0.95']")).to_be_visible()
    await page.click("#setting-save")
    await expect(page.locator("#levels")).to_contain_text("console-model")
    assert (await env.admin("GET", "/admin/threshold"))["models"] == {"console-model": 0.95}
    await env.admin("PUT", "/admin/threshold", json={"models": {"console-model": None}})


async def test_deleting_an_entry_makes_the_next_request_miss(console: Console, env: Env) -> None:
    system = env.scope()
    question = f"What does the code word {uuid.uuid4().hex[:8]} mean?"
    first = await env.ask(question, system)
    assert (await env.ask(question, system)).headers["x-deja-cache"] == "exact"
    await signed_in(console, "entries")
    page = console.page
    await page.fill("#entry-query", question)
    await page.click("#entry-search button[type=submit]")
    row = page.locator(f"#entry-results tr[data-entry-id='{first.headers['x-deja-entry']}']")
    await row.click()
    content = first.json()["choices"][0]["message"]["content"]
    await expect(page.locator("#entry-answer")).to_have_text(content)
    await expect(page.locator("#entry-question")).to_have_text(question)
    await console.shot("entries")
    await page.click("#entry-delete")
    await page.click("#entry-delete-confirm")
    await expect(page.locator("#entry-detail")).to_contain_text("Deleted")
    assert (await env.ask(question, system)).headers["x-deja-cache"] == "miss"


async def test_invalidating_by_filter_previews_first_then_misses(
    console: Console, env: Env
) -> None:
    system, namespace = env.scope(), f"ns-{uuid.uuid4().hex[:8]}"
    for question in ("What is the speed of light?", "What is the speed of sound?"):
        await env.ask(question, system, namespace=namespace)
    await signed_in(console, "entries/invalidate")
    page = console.page
    run = page.locator("#inv-run")
    await expect(run).to_be_disabled()
    await page.fill("#inv-namespace", namespace)
    await page.click("#inv-dry-run")
    await expect(page.locator("#inv-count")).to_have_attribute("data-count", "2")
    await expect(page.locator("#inv-result")).to_contain_text("What is the speed of sound?")
    await console.shot("entries-invalidate")
    again = await env.ask("What is the speed of sound?", system, namespace=namespace)
    assert again.headers["x-deja-cache"] == "exact"  # the dry run removed nothing
    await expect(run).to_have_text("Invalidate 2 entries")
    await run.click()
    await expect(page.locator("#inv-done")).to_have_attribute("data-count", "2")
    missed = await env.ask("What is the speed of sound?", system, namespace=namespace)
    assert missed.headers["x-deja-cache"] == "miss"
    await console.open("audit")
    await expect(
        page.locator("#audit-table tr[data-action='cache.invalidate']").first
    ).to_contain_text(namespace)
    await console.shot("audit")


async def near_miss_shown(console: Console, env: Env) -> tuple[Any, Any]:
    """A near miss made in a scope of its own, and its card in the near-miss browser."""
    try:
        made = await make_near_miss(env, env.scope())
    finally:
        await restore_precision(env)
    await signed_in(console, "entries/near-misses")
    near = console.page.locator("#near-misses article.near", has_text=made.question).first
    return made, near


async def test_the_near_miss_browser_shows_what_a_miss_nearly_matched(
    console: Console, env: Env
) -> None:
    made, near = await near_miss_shown(console, env)
    page = console.page
    await expect(near.locator(".asked")).to_have_text(made.question)
    await expect(near.locator(".cached")).to_have_text(CACHED)
    await expect(near.locator(".gap")).to_contain_text("τ")
    await console.shot("entries-near-misses")
    await near.get_by_role("button", name="Open cached entry").click()
    await expect(page.locator("#entry-question")).to_have_text(CACHED)


async def test_a_near_miss_labelled_in_the_browser_is_listed_changed_and_exported(
    console: Console, env: Env, tmp_path: Path
) -> None:
    made, near = await near_miss_shown(console, env)
    page = console.page
    await near.get_by_role("button", name="Different").click()
    await expect(near.locator(".labelling")).to_have_attribute("data-label", "different")
    await expect(near.locator("button.label-different")).to_have_attribute("aria-pressed", "true")
    await console.open("entries/labelled")
    row = page.locator("#labelled-pairs tr", has_text=made.question)
    await expect(row).to_have_attribute("data-label", "different")
    await expect(row.locator(".cached")).to_have_text(CACHED)
    await console.shot("entries-labelled")
    await row.get_by_role("button", name="Same").click()  # changed, not added
    await expect(row).to_have_attribute("data-label", "same")
    labels = (await env.admin("GET", "/admin/semantic/labels"))["labels"]
    mine = [x for x in labels if x["question"] == made.question]
    assert [x["label"] for x in mine] == ["same"] and mine[0]["cached_question"] == CACHED
    async with page.expect_download() as download:
        await page.click("#labels-export")
    saved = tmp_path / (await download.value).suggested_filename
    await (await download.value).save_as(saved)
    assert (CACHED, made.question, True) in [(p.a, p.b, p.duplicate) for p in read_pairs(saved)]


async def test_the_preview_lists_the_pairs_a_change_would_start_or_stop_serving(
    console: Console, env: Env
) -> None:
    system = env.scope()
    # a paraphrase that scores between the default target's τ and the table's last one, so
    # that a stricter target stops it (stricter_target, below)
    await env.ask("How do I delete my account?", system)
    hit = await env.ask("How do I get rid of my account?", system)
    assert hit.headers["x-deja-cache"] == "semantic"
    await signed_in(console, "quality")
    page = console.page
    floor = await table_floor(env)
    await expect(page.locator("#levels")).to_contain_text(f"{floor:.3f}")  # settings loaded
    await page.select_option("#setting-what", "theta")
    await page.fill("#setting-value", "0.999")
    await expect(page.locator("#preview[data-state=ready][data-value='0.999']")).to_be_visible()
    stop = page.locator("#preview-stop article", has_text="How do I get rid of my account?").first
    await expect(stop.locator(".cached")).to_have_text("How do I delete my account?")
    await stop.get_by_role("button", name="Same").click()
    await expect(stop.locator(".labelling")).to_have_attribute("data-label", "same")
    labels = (await env.admin("GET", "/admin/semantic/labels"))["labels"]
    assert "How do I get rid of my account?" in [x["question"] for x in labels if x["same"]]
    await expect(page.locator("#preview-start")).to_contain_text("Would start serving (0)")
    await console.shot("quality-preview-pairs")
    # From a stricter live target, the default one would start serving it, label shown.
    strict_target = await stricter_target(env, float(hit.headers["x-deja-verifier-score"]))
    await env.admin("PUT", "/admin/threshold", json={"precision": {"global": strict_target}})
    try:
        await page.reload()
        await expect(page.locator("#levels")).to_contain_text(f"{strict_target:.3f}")
        await page.fill("#setting-value", "0.92")
        await expect(page.locator("#preview[data-state=ready][data-value='0.92']")).to_be_visible()
        start = page.locator("#preview-start article", has_text="How do I get rid of my account?")
        await expect(start.first.locator(".labelling")).to_have_attribute("data-label", "same")
    finally:
        await restore_precision(env)


async def test_the_corpora_tab_says_when_there_are_no_corpora(console: Console) -> None:
    await signed_in(console, "corpora")
    await expect(console.page.locator("#corpora-empty")).to_contain_text("No corpora")
    await console.shot("corpora-empty")


async def test_the_corpora_tab_lists_re_ingests_and_removes_documents(
    browser: Browser, sims: SimCluster, make_gateway: Any
) -> None:
    """Against the real corpus API: what the page lists, uploads and removes is what the
    gateway then holds."""
    async with make_gateway(replicas=sims.urls, **SETTINGS, corpora_enabled=True) as (url, app):
        env = Env(url, app)
        admin = {"authorization": f"Bearer {ADMIN_KEY}", "content-type": "text/markdown"}
        for document, text in (
            ("guide/install.md", "# Install\n\nRun `make run`.\n"),
            ("faq.md", "# FAQ\n\nAsk the gateway.\n"),
        ):
            reply = await env.http.put(
                f"/admin/corpora/handbook/documents/{document}", content=text, headers=admin
            )
            assert reply.status_code == 200, reply.text
        console = await console_at(browser, env, DESKTOP)
        page = console.page
        try:
            await signed_in(console, "corpora")
            await page.locator("tr[data-corpus=handbook] button").click()
            install = page.locator("tr[data-document='guide/install.md']")
            await expect(install).to_contain_text("Install")
            await expect(page.locator("tr[data-document='faq.md']")).to_be_visible()
            await console.shot("corpora")
            upload = {
                "name": "install.md",
                "mimeType": "text/markdown",
                "buffer": b"# Install\n\nRun `make run`, then open the console.\n",
            }
            await install.locator("input[type=file]").set_input_files(files=[upload])  # type: ignore[list-item]
            await expect(page.locator(".toast")).to_contain_text("version 2")
            faq = page.locator("tr[data-document='faq.md']")
            await faq.get_by_role("button", name="Remove…").click()
            await faq.get_by_role("button", name="Confirm remove").click()
            await expect(page.locator(".toast", has_text="cached answers")).to_be_visible()
            assert console.errors == [], console.errors
        finally:
            await page.context.close()
        listing = await env.http.get("/admin/corpora/handbook/documents", headers=admin)
        versions = {d["document"]: d["version"] for d in listing.json()["documents"]}
        assert versions == {"guide/install.md": 2}  # re-ingested, and faq.md removed
        await env.close()


async def test_a_gateway_without_an_admin_key_says_so_at_sign_in(
    browser: Browser, sims: SimCluster, make_gateway: Any
) -> None:
    async with make_gateway(replicas=sims.urls) as (url, app):
        bare = Env(url, app)
        console = await console_at(browser, bare, DESKTOP)
        await console.sign_in("anything")
        await expect(console.page.locator("#login-error")).to_contain_text(
            "the admin API is disabled"
        )
        await console.page.context.close()
        await bare.close()
    assert console.errors == []


async def test_every_page_fits_a_phone(browser: Browser, env: Env) -> None:
    phone = await console_at(browser, env, PHONE)
    await signed_in(phone)
    page = phone.page
    checks = {
        "overview": "#chart-hit-rate svg",
        "quality": "#chart-calibration svg",
        "entries": "#entry-search",
        "entries/near-misses": "#near-misses",
        "entries/served": "#served-pairs",
        "entries/labelled": "#labelled-pairs",
        "corpora": "#corpora",
        "audit": "#chart-audit svg",
    }
    for fragment, ready in checks.items():
        await phone.open(fragment)
        await expect(page.locator(ready)).to_be_visible()
        overflow = await page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 1, f"{fragment} scrolls sideways by {overflow}px on a phone"
        nav = page.locator("#nav a[data-page=audit]")
        box = await nav.bounding_box()
        assert box is not None and box["x"] + box["width"] <= PHONE["width"], "nav cut off"
        if fragment in ("overview", "quality"):
            await phone.shot(f"phone-{fragment}")
    await page.context.close()
    assert phone.errors == [], phone.errors
