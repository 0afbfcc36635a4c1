"""Demo mode keeps its simulated replicas through a reload (issue 19, finding 9): the
configuration names no replicas, so a reload that took it literally left ``replicas: []`` and
every miss a 503 — by ``POST /admin/replicas/reload`` and by a ``SIGHUP`` meant for the keys."""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
from pathlib import Path

import httpx
import pytest

from app.main import create_app
from config.settings import Settings
from tests.support import MODEL_DIR, SIM_MODEL, serve

pytestmark = pytest.mark.e2e

ADMIN = {"authorization": "Bearer adm"}


async def test_reload_and_sighup_keep_the_demo_replicas() -> None:
    with tempfile.TemporaryDirectory(prefix="deja-test-") as data_dir:

        def settings() -> Settings:
            return Settings(
                demo=True,
                admin_key="adm",
                data_dir=Path(data_dir),
                model_dir=MODEL_DIR,
                semantic_enabled=False,
                corpora_enabled=False,
            )

        app = create_app(settings(), reload=settings)
        async with serve(app) as url, httpx.AsyncClient(base_url=url, headers=ADMIN) as http:
            before = [r["url"] for r in (await http.get("/admin/replicas")).json()["replicas"]]
            assert len(before) >= 1
            reloaded = await http.post("/admin/replicas/reload")
            assert reloaded.status_code == 200, reloaded.text
            assert [r["url"] for r in reloaded.json()["replicas"]] == before
            os.kill(os.getpid(), signal.SIGHUP)  # the gateway's handler runs on this loop
            await asyncio.sleep(0.3)
            after = [r["url"] for r in (await http.get("/admin/replicas")).json()["replicas"]]
            assert after == before
            body = {"model": SIM_MODEL, "messages": [{"role": "user", "content": "still there?"}]}
            answer = await http.post("/v1/chat/completions", json=body)
            assert answer.status_code == 200, answer.text
