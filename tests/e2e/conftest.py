"""The browser tests' fixtures: one chromium per module, one desktop page per test (its uncaught
errors fail the test). ``console`` runs on the requesting module's ``env`` gateway: by default
the console modules' one below (a module may define its own ``env``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from playwright.async_api import Browser, async_playwright

from sim.runner import SimCluster
from tests.e2e.browser_support import DESKTOP, Console, chromium, console_at
from tests.e2e.console_support import SETTINGS, Env


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


@pytest.fixture(scope="module")
async def env(sims: SimCluster, make_gateway: Any) -> AsyncIterator[Env]:
    async with make_gateway(replicas=sims.urls, **SETTINGS) as (url, app):
        env = Env(url, app)
        yield env
        await env.close()
