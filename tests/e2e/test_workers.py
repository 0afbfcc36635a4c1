"""`deja serve --workers 2` as real processes on one socket, sharing a real Redis: invalidation,
θ changes and rate limits hold across workers; embedded stores are refused in one line."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import yaml

from deja.tenancy.keyring import key_hash
from sim.runner import SimCluster
from tests.support import MODEL_DIR, SIM_MODEL, free_port

pytestmark = pytest.mark.e2e

ADMIN = {"authorization": "Bearer adm"}


def env_for(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEJA_")}
    env.update(
        DEJA_DATA_DIR=str(tmp_path / "data"),
        DEJA_MODEL_DIR=str(MODEL_DIR),
        DEJA_ADMIN_KEY="adm",
        DEJA_SEMANTIC_ENABLED="false",
        DEJA_CORPORA_ENABLED="false",
    )
    env.update(extra)
    return env


@pytest.fixture
def key() -> str:
    """A key of its own per test: rate-limit buckets live in the shared Redis."""
    return f"dj-workers-{uuid.uuid4().hex}"


@pytest.fixture
async def workers(sims: SimCluster, redis_url: str, tmp_path: Path, key: str) -> AsyncIterator[str]:
    keys = tmp_path / "keys.yaml"
    tenant = {"key_hashes": [key_hash(key)], "rate_limit_rpm": 4}
    keys.write_text(yaml.safe_dump({"tenants": {"w": tenant}}))
    port = free_port()
    env = env_for(
        tmp_path,
        DEJA_REPLICAS=",".join(sims.urls),
        DEJA_REDIS_URL=redis_url,
        DEJA_KEYS_FILE=str(keys),
    )
    cmd = [sys.executable, "-m", "app", "serve", "--workers", "2", "--port", str(port)]
    proc = await asyncio.create_subprocess_exec(
        *cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    base = f"http://127.0.0.1:{port}"
    try:
        seen: set[int] = set()
        for _ in range(400):  # both workers up: fresh connections reach both pids
            try:
                async with httpx.AsyncClient(base_url=base, timeout=2) as http:
                    reply = await http.get("/readyz")
                    if reply.status_code == 200:
                        seen.add((await http.get("/healthz")).json()["worker"])
            except httpx.HTTPError:
                pass
            if len(seen) == 2:
                break
            await asyncio.sleep(0.05)
        assert len(seen) == 2, "two workers never both answered"
        yield base
    finally:
        proc.send_signal(signal.SIGTERM)
        raw, _ = await asyncio.wait_for(proc.communicate(), 30)
        output = raw.decode()
        assert "Traceback" not in output, output[-3000:]
        for n in (1, 2):  # each worker says where it listens
            assert f"deja listening on {base} (worker {n}/2, pid " in output, output[-3000:]


async def fresh(base: str, method: str, path: str, **kw: object) -> httpx.Response:
    """One request on a new connection (the kernel picks the worker)."""
    async with httpx.AsyncClient(base_url=base, timeout=15) as http:
        return await http.request(method, path, **kw)  # type: ignore[arg-type]


def chat(question: str) -> dict[str, object]:
    return {"model": SIM_MODEL, "messages": [{"role": "user", "content": question}]}


async def test_invalidation_theta_and_rate_limits_hold_across_workers(
    workers: str, key: str
) -> None:
    client = {"authorization": f"Bearer {key}"}
    question = f"workers {uuid.uuid4().hex}"
    first = await fresh(
        workers, "POST", "/v1/chat/completions", json=chat(question), headers=client
    )
    assert first.headers["x-deja-cache"] == "miss"
    await asyncio.sleep(0.3)  # the store is off the response path
    # Invalidation through one worker reaches every worker: the next asks all miss once.
    flushed = await fresh(
        workers, "POST", "/admin/cache/flush", json={"tenant": "w"}, headers=ADMIN
    )
    assert flushed.status_code == 200 and flushed.json()["count"] >= 1
    # θ set through one worker is what every worker reports within a few seconds.
    theta = await fresh(workers, "PUT", "/admin/threshold", json={"global": 0.97}, headers=ADMIN)
    assert theta.status_code == 200
    reported: set[float] = set()
    for _ in range(100):
        reply = await fresh(workers, "GET", "/admin/threshold", headers=ADMIN)
        reported.add(reply.json()["global"])
        if reported == {0.97} and len(reported) == 1:
            break
        reported.clear()
        await asyncio.sleep(0.1)
    assert reported == {0.97}
    # The rate limit (4 rpm) is global, not 4 per worker; one request was spent above.
    statuses = []
    for i in range(8):
        reply = await fresh(
            workers, "POST", "/v1/chat/completions", json=chat(f"{question} {i}"), headers=client
        )
        statuses.append(reply.status_code)
    assert statuses.count(200) == 3 and statuses.count(429) == 5


async def test_an_invalidated_entry_misses_on_every_worker(workers: str, key: str) -> None:
    client = {"authorization": f"Bearer {key}"}
    question = f"invalidate {uuid.uuid4().hex}"
    reply = await fresh(
        workers, "POST", "/v1/chat/completions", json=chat(question), headers=client
    )
    entry = reply.headers["x-deja-entry"]
    await asyncio.sleep(0.3)
    gone = await fresh(workers, "DELETE", f"/admin/cache/entries/{entry}", headers=ADMIN)
    assert gone.status_code == 200
    # asked on fresh connections (either worker): never served from a stale copy
    again = await fresh(
        workers, "POST", "/v1/chat/completions", json=chat(question), headers=client
    )
    assert again.headers["x-deja-cache"] == "miss"


def test_embedded_stores_are_refused_as_a_bad_setting(tmp_path: Path) -> None:
    env = env_for(tmp_path, DEJA_REPLICAS="http://127.0.0.1:9")
    cmd = [sys.executable, "-m", "app", "serve", "--workers", "2", "--port", str(free_port())]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()[-4:]
    assert lines[:3] == ["deja: bad setting", "  setting: --workers", "  value:   2"]
    assert "1, unless every store is shared" in lines[3] and "DEJA_REDIS_URL" in lines[3]
