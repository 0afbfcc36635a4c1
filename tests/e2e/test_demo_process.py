"""`deja serve --demo` as a real process: what `make run` starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from tests.support import MODEL_DIR, free_port

pytestmark = pytest.mark.e2e


def test_demo_gateway_process_serves_miss_then_hit(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEJA_")}
    env.update(DEJA_DATA_DIR=str(tmp_path), DEJA_MODEL_DIR=str(MODEL_DIR))
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--demo", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(base + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, "gateway exited during start-up"
            assert time.monotonic() < deadline, "gateway did not become ready"
            time.sleep(0.1)
        client = openai.OpenAI(base_url=base + "/v1", api_key="sk-demo", max_retries=0)
        model = client.models.list().data[0]
        assert "simulated" in model.owned_by
        messages = [{"role": "user", "content": "What is deja?"}]
        first = client.chat.completions.with_raw_response.create(model=model.id, messages=messages)
        time.sleep(0.1)
        second = client.chat.completions.with_raw_response.create(model=model.id, messages=messages)
        assert (first.headers["x-deja-cache"], second.headers["x-deja-cache"]) == ("miss", "exact")
        assert first.parse().choices[0].message.content == second.parse().choices[0].message.content
    finally:
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=20)
    assert "SIMULATED" in output
    assert "Traceback" not in output
