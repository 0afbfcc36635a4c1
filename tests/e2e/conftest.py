"""The browser tests' fixtures: one chromium per module, one desktop page per test (its uncaught
errors fail the test). ``console`` runs on the requesting module's ``env`` gateway."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from playwright.async_api import Browser, async_playwright

from tests.e2e.browser_support import DESKTOP, Console, chromium, console_at
from tests.e2e.console_support import Env


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as p:
        launched = await p.chromium.launch(
            executable_path=chromium(), args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        yield launched
        await launched.close()


@pytest.fixture
async def console(browser: Browser, env: Env) -> AsyncIterator[Console]:
    c = await console_at(browser, env, DESKTOP)
    yield c
    await c.page.context.close()
    assert c.errors == [], c.errors
