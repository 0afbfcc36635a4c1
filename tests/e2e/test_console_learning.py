"""The console's view of the learning loop (issue 24), in a real browser against a real gateway:
the banner while a tenant's target is raised, and an entry's aliases, verdicts and cut-off."""

from __future__ import annotations

import uuid

import pytest
from playwright.async_api import expect

from tests.e2e.browser_support import Console, signed_in
from tests.e2e.console_support import Env

pytestmark = pytest.mark.e2e


async def test_an_entry_shows_its_promoted_paraphrases_and_verdicts(
    console: Console, env: Env
) -> None:
    """An alias and a verdict made in the gateway directly (the traffic paths are
    test_promotion.py and test_learning.py): the entry's panel lists both."""
    system = env.scope()
    word = uuid.uuid4().hex[:8]
    question = f"What does the code word {word} mean?"
    entry = (await env.ask(question, system)).headers["x-deja-entry"]
    gateway = env.app.state.gateway
    paraphrase = f"What is the meaning of the code word {word}?"
    assert await gateway.exact.promote(entry, uuid.uuid4().hex * 2, paraphrase) is not None
    gateway.learning.judged(entry, score=0.5, same=False, source="judge")
    await signed_in(console, "entries")
    page = console.page
    await page.fill("#entry-query", question)
    await page.click("#entry-search button[type=submit]")
    await page.locator(f"#entry-results tr[data-entry-id='{entry}']").click()
    await expect(page.locator("#entry-aliases")).to_contain_text(paraphrase)
    await expect(page.locator("#entry-verdicts")).to_contain_text("wrong · judge at 0.500")
    await expect(page.locator("#entry-cutoff")).to_contain_text("cut-off")
    await console.shot("entry-learnt")


async def test_a_raised_target_shows_a_banner_that_pins_and_resets(
    console: Console, env: Env
) -> None:
    """The learning loop raised the default tenant's target (its verdicts fed in directly:
    the traffic path is tests/e2e/test_learning.py); every page says so until ops reset it."""
    correction = env.app.state.gateway.learning.correction
    try:
        for _ in range(correction.min_verdicts):
            correction.observe("default", False, 0.9)
        await signed_in(console, "entries")
        line = console.page.locator('#banner .banner-line[data-tenant="default"]')
        await expect(line).to_contain_text("91.0% instead of 90.0%")
        await console.shot("learning-banner")
        await line.get_by_role("button", name="Pin").click()
        await expect(line).to_contain_text("pinned")
        await line.get_by_role("button", name="Reset").click()
        await expect(console.page.locator("#banner")).to_be_hidden()
        actions = await env.admin("GET", "/admin/audit", params={"action": "semantic"})
        names = [a["action"] for a in actions["actions"]]
        assert "semantic.correction.pin" in names and "semantic.correction.reset" in names
    finally:
        correction.reset("default")
        correction.pin("default", False)
