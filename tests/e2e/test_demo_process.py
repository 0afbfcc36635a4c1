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
from collections.abc import Callable
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


QUESTION = [{"role": "user", "content": "How do I reset my password?"}]
PARAPHRASE = [{"role": "user", "content": "How can I reset my password?"}]


def orphans_counted(base: str) -> float:
    for line in httpx.get(base + "/metrics", timeout=5).text.splitlines():
        if line.startswith("deja_semantic_orphans_total "):
            return float(line.split()[1])
    raise AssertionError("deja_semantic_orphans_total is not exported")


def ask_until_stored(client: openai.OpenAI, model: str) -> None:
    """Ask, then ask again until the answer is an exact hit (it is stored after the reply)."""
    first = client.chat.completions.with_raw_response.create(model=model, messages=QUESTION)
    assert first.headers["x-deja-cache"] == "miss"
    for _ in range(50):
        again = client.chat.completions.with_raw_response.create(model=model, messages=QUESTION)
        if again.headers["x-deja-cache"] == "exact":
            return
        time.sleep(0.05)
    raise AssertionError("the answer was never stored")


def restarted(
    env: dict[str, str], before: Callable[[openai.OpenAI, str], None], *, crash: bool = False
) -> str:
    """Run a demo gateway, call ``before``, stop it (SIGINT, or SIGKILL with ``crash``); returns
    the base URL to start the next process on, with the same data dir and port."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    client = openai.OpenAI(base_url=base + "/v1", api_key="sk-demo", max_retries=0)
    proc = serve(port, env)
    try:
        wait_ready(proc, port)
        before(client, client.models.list().data[0].id)
    finally:
        proc.send_signal(signal.SIGKILL if crash else signal.SIGINT)
        output, _ = proc.communicate(timeout=20)
    assert "Traceback" not in output
    return base


def test_a_restarted_gateway_keeps_both_layers_with_the_default_config(tmp_path: Path) -> None:
    """`make run`, ask, restart, ask again: an exact hit, and a paraphrase a semantic one."""
    env = clean_env(DEJA_DATA_DIR=str(tmp_path))
    base = restarted(env, ask_until_stored)
    port = int(base.rsplit(":", 1)[1])
    proc = serve(port, env)
    try:
        wait_ready(proc, port)
        client = openai.OpenAI(base_url=base + "/v1", api_key="sk-demo", max_retries=0)
        model = client.models.list().data[0].id
        exact = client.chat.completions.with_raw_response.create(model=model, messages=QUESTION)
        assert exact.headers["x-deja-cache"] == "exact"
        similar = client.chat.completions.with_raw_response.create(model=model, messages=PARAPHRASE)
        assert similar.headers["x-deja-cache"] == "semantic"
        assert similar.headers["x-deja-entry"] == exact.headers["x-deja-entry"]
        assert orphans_counted(base) == 0
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=20)


def test_an_in_process_store_loses_answers_and_the_orphaned_vectors_are_dropped(
    tmp_path: Path,
) -> None:
    """``exact_store: memory`` forgets answers at a restart while the vectors stay on disk:
    the question's own point is then an orphan — deleted and counted, not a similarity 1.0."""
    env = clean_env(DEJA_DATA_DIR=str(tmp_path), DEJA_EXACT_STORE="memory")
    base = restarted(env, ask_until_stored)
    port = int(base.rsplit(":", 1)[1])
    proc = serve(port, env)
    try:
        wait_ready(proc, port)
        client = openai.OpenAI(base_url=base + "/v1", api_key="sk-demo", max_retries=0)
        model = client.models.list().data[0].id
        miss = client.chat.completions.with_raw_response.create(model=model, messages=QUESTION)
        assert miss.headers["x-deja-cache"] == "miss"
        assert "x-deja-similarity" not in miss.headers
        assert orphans_counted(base) == 1
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=20)


def test_an_answer_served_as_a_hit_survives_a_crash(tmp_path: Path) -> None:
    """A hit is served only once its answer is on disk: SIGKILL right after it loses nothing."""
    env = clean_env(DEJA_DATA_DIR=str(tmp_path), DEJA_SEMANTIC_ENABLED="false")
    base = restarted(env, ask_until_stored, crash=True)
    port = int(base.rsplit(":", 1)[1])
    proc = serve(port, env)
    try:
        wait_ready(proc, port)
        client = openai.OpenAI(base_url=base + "/v1", api_key="sk-demo", max_retries=0)
        model = client.models.list().data[0].id
        again = client.chat.completions.with_raw_response.create(model=model, messages=QUESTION)
        assert again.headers["x-deja-cache"] == "exact"
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=20)
