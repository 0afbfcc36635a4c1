"""`deja serve --demo` as a real process: what `make run` starts."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from tests.support import MODEL_DIR, free_port

pytestmark = pytest.mark.e2e


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEJA_")}
    env.update(DEJA_MODEL_DIR=str(MODEL_DIR), **extra)
    return env


def serve(port: int, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--demo", "--port", str(port), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def serve_once(port: int, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A gateway expected to refuse to start: its exit status and output."""
    return subprocess.run(
        [sys.executable, "-m", "app", "serve", "--demo", "--port", str(port)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def wait_ready(proc: subprocess.Popen[str], port: int, limit: float = 30) -> None:
    deadline = time.monotonic() + limit
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, "gateway exited during start-up"
        assert time.monotonic() < deadline, "gateway did not become ready"
        time.sleep(0.1)


def test_demo_gateway_process_serves_miss_then_hit(tmp_path: Path) -> None:
    port = free_port()
    env = clean_env(DEJA_DATA_DIR=str(tmp_path))
    proc = serve(port, env, "--log-level", "warning")  # uvicorn's own lines are all INFO
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, port)
        # A second gateway on the same data dir is refused in one line, naming the holder.
        refused = serve_once(free_port(), env)
        assert refused.returncode == 1
        assert f"in use by another deja process (pid {proc.pid})" in refused.stderr
        assert "Traceback" not in refused.stderr + refused.stdout
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
    # The listen URL shows whatever the log level, and the simulators' servers hide nothing.
    assert f"deja listening on http://127.0.0.1:{port} (Press CTRL+C to quit)" in output
    assert "Traceback" not in output


def test_first_start_says_it_is_deriving_the_model_and_then_where_it_listens(
    tmp_path: Path,
) -> None:
    """A fresh model dir: the derivation's progress lines come before the listen URL."""
    port = free_port()
    env = clean_env(DEJA_DATA_DIR=str(tmp_path / "data"), DEJA_CORPORA_ENABLED="false")
    env["DEJA_MODEL_DIR"] = str(tmp_path / "models")
    proc = serve(port, env)
    try:
        wait_ready(proc, port, limit=120)
    finally:
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=20)
    lines = output.splitlines()

    def first(text: str) -> int:
        return next(i for i, line in enumerate(lines) if text in line)

    deriving = first("deriving the embedding model (first start only)")
    derived = first("derived the embedding model in")
    listening = first(f"deja listening on http://127.0.0.1:{port}")
    assert deriving < derived < listening, output
    assert re.search(r"derived the embedding model in \d+\.\d s", lines[derived])
    assert list((tmp_path / "models").glob("minilm-dynint8-*.onnx"))
    assert "Traceback" not in output


def test_busy_port_fails_in_one_line_before_loading_models(tmp_path: Path) -> None:
    env = clean_env(DEJA_DATA_DIR=str(tmp_path))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        started = time.monotonic()
        result = serve_once(port, env)
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    output = result.stderr + result.stdout
    assert "semantic cache:" not in output  # the embedder was never loaded
    assert "Traceback" not in output
    assert time.monotonic() - started < 20


def test_a_corrupt_verifier_stops_start_up_in_one_line_unless_told_to_fall_back(
    tmp_path: Path,
) -> None:
    from deja.semantic.crossencoder import MODEL_FILE, SHIPPED_DIR

    broken = tmp_path / "verifier"
    shutil.copytree(SHIPPED_DIR, broken)
    with (broken / MODEL_FILE).open("r+b") as handle:
        handle.seek(1 << 20)
        handle.write(b"bitrot")
    env = clean_env(DEJA_DATA_DIR=str(tmp_path / "data"), DEJA_SEMANTIC_VERIFIER_DIR=str(broken))
    port = free_port()
    result = serve_once(port, env)
    assert result.returncode == 1
    assert "does not match its sha256" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    env["DEJA_SEMANTIC_VERIFIER_FALLBACK"] = "cosine"
    proc = serve(port, env)
    try:
        wait_ready(proc, port)
    finally:
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=20)
    assert "SEMANTIC HITS ARE NOT VERIFIED" in output
