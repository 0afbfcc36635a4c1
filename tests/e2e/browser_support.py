"""The console in a real browser, shared by the browser tests: Debian's chromium driven by
Playwright (no browser download), one page on the console with its uncaught errors and the
requests it made. The ``browser`` and ``console`` fixtures are in ``conftest.py``."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, expect

from tests.e2e.console_support import ADMIN_KEY, Env

DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
expect.set_options(timeout=15_000)


def chromium() -> str:
    path = os.environ.get("DEJA_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).is_file():
        pytest.fail("chromium is not installed: `make test` installs it (apt-get install chromium)")
    return path


class Console:
    """One browser page on the console, with its uncaught errors and the requests it made."""

    def __init__(self, page: Page, env: Env) -> None:
        self.page = page
        self.env = env
        self.errors: list[str] = []
        self.requests: list[tuple[str, dict[str, str]]] = []
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        page.on("request", lambda req: self.requests.append((req.url, req.headers)))

    async def sign_in(self, key: str = ADMIN_KEY) -> None:
        await self.page.goto(self.env.url + "/admin/ui")
        await self.page.fill("#admin-key", key)
        await self.page.click("#login-submit")

    async def open(self, fragment: str) -> None:
        await self.page.goto(f"{self.env.url}/admin/ui#{fragment}")
        await expect(self.page.locator("#app")).to_be_visible()

    async def shot(self, name: str) -> None:
        folder = os.environ.get("DEJA_CONSOLE_SCREENSHOTS")
        if folder:
            await self.page.evaluate("document.activeElement?.blur(); window.scrollTo(0, 0)")
            # Playwright creates the folder.
            await self.page.screenshot(path=os.path.join(folder, f"{name}.png"), full_page=True)


async def console_at(browser: Browser, env: Env, viewport: dict[str, int]) -> Console:
    context = await browser.new_context(viewport=viewport)  # type: ignore[arg-type]
    return Console(await context.new_page(), env)


async def signed_in(console: Console, fragment: str = "overview") -> Console:
    await console.sign_in()
    await expect(console.page.locator("#kpis .kpi").first).to_be_visible()
    if fragment != "overview":
        await console.open(fragment)
    return console
