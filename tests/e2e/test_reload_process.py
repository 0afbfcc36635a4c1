"""`deja serve --config FILE` as a real process: SIGHUP re-reads the replica list and the keys
file."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from deja.tenancy.keyring import key_hash
from sim.runner import SimCluster
from tests.support import MODEL_DIR, free_port

pytestmark = pytest.mark.e2e


async def test_sighup_reloads_replicas_without_dropping_requests(
    sims: SimCluster, tmp_path: Path
) -> None:
    config = tmp_path / "deja.yaml"
    config.write_text(f"replicas:\n  - {sims.urls[0]}\nsemantic_enabled: false\n")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEJA_")}
    env.update(
        DEJA_DATA_DIR=str(tmp_path / "data"), DEJA_MODEL_DIR=str(MODEL_DIR), DEJA_ADMIN_KEY="adm"
    )
    proc = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "app", "serve", "--config", str(config), "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        auth = {"authorization": "Bearer adm"}
        async with httpx.AsyncClient(base_url=base, timeout=10, headers=auth) as http:
            for _ in range(300):
                try:
                    if (await http.get("/readyz")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.1)
            names = [r["url"] for r in (await http.get("/admin/replicas")).json()["replicas"]]
            assert names == [sims.urls[0]]
            config.write_text(
                f"replicas:\n  - {sims.urls[0]}\n  - {sims.urls[1]};weight=2\n"
                "semantic_enabled: false\n"
            )
            body = {"model": "deja-sim-1", "messages": [{"role": "user", "content": "hi"}]}
            inflight = asyncio.create_task(http.post("/v1/chat/completions", json=body))
            proc.send_signal(signal.SIGHUP)
            for _ in range(50):
                report = (await http.get("/admin/replicas")).json()["replicas"]
                if len(report) == 2:
                    break
                await asyncio.sleep(0.1)
            assert {r["url"]: r["weight"] for r in report} == {
                sims.urls[0]: 1.0,
                sims.urls[1]: 2.0,
            }
            assert (await inflight).status_code == 200
            assert proc.returncode is None  # SIGHUP did not stop the process
    finally:
        proc.send_signal(signal.SIGINT)
        raw, _ = await asyncio.wait_for(proc.communicate(), 20)
    output = raw.decode()
    assert "replicas reloaded" in output and "Traceback" not in output


async def test_sighup_reloads_the_keys_file_and_a_broken_one_keeps_the_last_keys(
    sims: SimCluster, tmp_path: Path
) -> None:
    """Polling off (``keys_reload_seconds: 0``), so only SIGHUP can change the keys."""
    keys = tmp_path / "keys.yaml"

    def write_keys(*names: str) -> None:
        tenants = {name: {"key_hashes": [key_hash(f"dj-{name}")]} for name in names}
        keys.write_text(yaml.safe_dump({"tenants": tenants}))

    write_keys("alpha", "beta")
    config = tmp_path / "deja.yaml"
    config.write_text(
        f"replicas:\n  - {sims.urls[0]}\nsemantic_enabled: false\ncorpora_enabled: false\n"
        f"keys_file: {keys}\nkeys_reload_seconds: 0\n"
    )
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEJA_")}
    env.update(DEJA_DATA_DIR=str(tmp_path / "data"), DEJA_MODEL_DIR=str(MODEL_DIR))
    proc = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "app", "serve", "--config", str(config), "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    body = {"model": "deja-sim-1", "messages": [{"role": "user", "content": "hi"}]}
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:

            async def status(name: str) -> int:
                auth = {"authorization": f"Bearer dj-{name}"}
                return (
                    await http.post("/v1/chat/completions", json=body, headers=auth)
                ).status_code

            async def after_sighup(name: str, want: int) -> None:
                proc.send_signal(signal.SIGHUP)
                for _ in range(50):
                    if await status(name) == want:
                        return
                    await asyncio.sleep(0.1)
                raise AssertionError(f"{name} never got {want} after SIGHUP")

            for _ in range(300):
                try:
                    if (await http.get("/readyz")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.1)
            assert (await status("alpha"), await status("beta")) == (200, 200)
            write_keys("alpha")
            await asyncio.sleep(0.5)
            assert await status("beta") == 200  # no polling: unchanged until SIGHUP
            await after_sighup("beta", 401)
            assert await status("alpha") == 200
            keys.write_text("tenants: {alpha: {key_hashes: [not-a-hash]}}\n")
            proc.send_signal(signal.SIGHUP)
            await asyncio.sleep(0.5)
            assert (await status("alpha"), await status("beta")) == (200, 401)
            write_keys("alpha", "gamma")
            await after_sighup("gamma", 200)
            assert proc.returncode is None
    finally:
        proc.send_signal(signal.SIGINT)
        raw, _ = await asyncio.wait_for(proc.communicate(), 20)
    output = raw.decode()
    assert "Traceback" not in output
    assert output.count("keys reloaded from") == 2, output
    broken = [line for line in output.splitlines() if "keys file not reloaded" in line]
    assert len(broken) == 1 and "ERROR" in broken[0] and "sha256 hex digests" in broken[0]
