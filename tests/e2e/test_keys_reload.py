"""Keys reload without a restart: a running gateway follows its keys file (the openai SDK as the
client). SIGHUP on a real ``deja serve`` process is in ``test_reload_process.py``."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from deja.tenancy.keyring import key_hash
from sim.runner import SimCluster
from tests.support import SIM_MODEL

pytestmark = pytest.mark.e2e

POLL = 0.3


def write_keys(path: Path, **tenants: str) -> None:
    doc = {"tenants": {name: {"key_hashes": [key_hash(key)]} for name, key in tenants.items()}}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(doc))
    tmp.replace(path)  # as `deja keys add` writes it: atomically


async def ask(url: str, key: str) -> str:
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key=key, max_retries=0)
    body = [{"role": "user", "content": f"hello {uuid.uuid4().hex[:8]}"}]
    try:
        await client.chat.completions.create(model=SIM_MODEL, messages=body)  # type: ignore[arg-type]
        return "ok"
    except openai.AuthenticationError:
        return "401"
    finally:
        await client.close()


async def until(url: str, key: str, want: str, limit: float) -> float:
    """Seconds until ``key`` gets ``want``; fails past ``limit``."""
    started = time.monotonic()
    while (got := await ask(url, key)) != want:
        assert time.monotonic() - started < limit, f"still {got} after {limit} s"
        await asyncio.sleep(0.05)
    return time.monotonic() - started


async def test_a_revoked_key_stops_working_within_the_poll_interval(
    sims: SimCluster, tmp_path: Path, make_gateway: Any, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "keys.yaml"
    write_keys(path, alpha="dj-alpha", beta="dj-beta")
    async with make_gateway(replicas=sims.urls, keys_file=path, keys_reload_seconds=POLL) as (
        url,
        app,
    ):
        assert (await ask(url, "dj-alpha"), await ask(url, "dj-beta")) == ("ok", "ok")

        write_keys(path, alpha="dj-alpha")  # beta revoked
        waited = await until(url, "dj-beta", "401", limit=POLL + 2)
        assert waited < POLL + 1.0, waited
        assert await ask(url, "dj-alpha") == "ok"

        with caplog.at_level(logging.INFO, logger="deja"):
            path.write_text("tenants:\n  alpha: {key_hashes: [oops\n")  # broken YAML
            await asyncio.sleep(POLL * 4)
            # The last good keys stay: alpha still in, beta still out, the gateway not open.
            assert await ask(url, "dj-alpha") == "ok"
            assert await ask(url, "dj-beta") == "401"
            assert await ask(url, "dj-anything") == "401"
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1 and "keys file not reloaded" in errors[0].getMessage()
        assert errors[0].exc_info is None and "\n" not in errors[0].getMessage()

        write_keys(path, alpha="dj-alpha", gamma="dj-gamma")  # fixed, and a new tenant
        await until(url, "dj-gamma", "ok", limit=POLL + 2)
        assert app.state.gateway.keys.tenants.keys() == {"alpha", "gamma"}

        write_keys(path)  # every key revoked: nobody gets in (not an open gateway)
        await until(url, "dj-alpha", "401", limit=POLL + 2)
        assert await ask(url, "dj-gamma") == "401"
