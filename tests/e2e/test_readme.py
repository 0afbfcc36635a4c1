"""The README's ``console`` blocks, run against a live demo (``deja serve --demo`` as ``make run``
starts it, as a real process on a free port), each command's output compared in shape with
the README's: numbers, hex ids, addresses and durations may differ, every other word must be
there. Also the first step of a new user: the start-up lines give the console's URL and an
admin key that opens it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support import MODEL_DIR, free_port

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
START_TIMEOUT = 240.0


@dataclass(frozen=True)
class Step:
    command: str
    expected: list[str]
    line: int


def console_steps(text: str) -> list[Step]:
    """Every ``$ command`` of every console block, with the output lines written under it.
    A command goes on while its line ends in ``\\`` or a single quote is still open."""
    steps: list[Step] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() != "```console":
            i += 1
            continue
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            line = lines[i]
            if not line.startswith("$ "):
                if steps:
                    steps[-1].expected.append(line)
                i += 1
                continue
            start, command = i + 1, line[2:]
            while command.endswith("\\") or drop_comment(command).count("'") % 2:
                i += 1
                command += "\n" + lines[i]
            i += 1
            if not command.lstrip().startswith("#"):
                steps.append(Step(command, [], start))
        i += 1
    return steps


_SHAPES = (
    (re.compile(r"\b[0-9a-f]{8,}…?"), "<hex>"),
    (re.compile(r"\b(?:127\.0\.0\.1|localhost):\d+"), "<addr>"),
    (re.compile(r"\b\d+[smhd](?:\d\d[smhd])?\b"), "<duration>"),
    (re.compile(r"\d+(?:\.\d+)?%?"), "<n>"),
)


def shape(line: str) -> str:
    text = " ".join(line.split())
    for pattern, token in _SHAPES:
        text = pattern.sub(token, text)
    return text


def drop_comment(command: str) -> str:
    """A trailing ``# remark`` of the README (outside quotes) is not part of the command."""
    out, quoted = [], False
    for ch in command:
        if ch == "'":
            quoted = not quoted
        if ch == "#" and not quoted and out and out[-1] == " ":
            break
        out.append(ch)
    return "".join(out)


@dataclass
class Demo:
    url: str
    key: str
    env: dict[str, str]
    startup: str


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    port = free_port()
    data = tmp_path_factory.mktemp("readme-demo")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEJA_")}
    env.update(DEJA_DATA_DIR=str(data), DEJA_MODEL_DIR=str(MODEL_DIR), DEJA_PORT=str(port))
    # What the README shows, not the lookup budget: on a loaded test machine the 0.25 s
    # default would turn the tour's semantic hit into a timed-out miss (as in console tests).
    env["DEJA_SEMANTIC_TIMEOUT_SECONDS"] = "5"
    log = data / "serve.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app", "serve", "--demo"], env=env, cwd=ROOT,
            stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while "console: " not in log.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            time.sleep(0.2)
        startup = log.read_text()
        match = re.search(r"console: (http://\S+/admin/ui/)  admin key: (\S+)", startup)
        assert match, startup
        url = match.group(1).removesuffix("/admin/ui/")
        bin_dir = str(Path(sys.executable).parent)
        cli_env = {**env, "PATH": bin_dir + os.pathsep + env.get("PATH", "")}
        cli_env.update(DEJA_ADMIN_URL=url, DEJA_ADMIN_KEY=match.group(2))
        yield Demo(url, match.group(2), cli_env, startup)
    finally:
        proc.terminate()
        proc.wait(20)


def test_make_run_gives_the_console_and_a_key_that_opens_it(demo: Demo) -> None:
    assert f"deja listening on {demo.url}" in demo.startup
    key_file = Path(demo.env["DEJA_DATA_DIR"]) / "demo-admin-key"
    assert key_file.read_text().strip() == demo.key
    page = httpx.get(demo.url + "/admin/ui/", timeout=10)
    assert page.status_code == 200 and "admin key" in page.text.lower()
    auth = {"authorization": f"Bearer {demo.key}"}
    assert httpx.get(demo.url + "/admin/cache/stats", headers=auth, timeout=10).status_code == 200
    # Simulated replicas are told from the gateway in uvicorn's own lines.
    assert "simulated replica sim-0 (deja sim): Started server process" in demo.startup


def test_the_readme_has_console_blocks_to_check() -> None:
    steps = console_steps(README.read_text())
    assert len(steps) >= 15
    assert any("/v1/embeddings" in s.command for s in steps)


def test_every_console_block_matches_the_live_demo(demo: Demo) -> None:
    port = demo.url.rsplit(":", 1)[1]
    failures = []
    for step in console_steps(README.read_text()):
        command = drop_comment(step.command).replace("localhost:8080", f"127.0.0.1:{port}")
        done = subprocess.run(
            ["bash", "-c", command], env=demo.env, cwd=ROOT, capture_output=True,
            text=True, timeout=300,
        )  # fmt: skip
        time.sleep(0.3)  # stores happen off the response path: the next step may rely on one
        output = done.stdout + done.stderr
        if not step.expected:
            if done.returncode != 0:
                failures.append(f"README line {step.line}: `{command}` exited {done.returncode}")
            continue
        got = {shape(line) for line in output.splitlines()}
        missing = [line for line in step.expected if line.strip() and shape(line) not in got]
        if missing:
            failures.append(
                f"README line {step.line}: `{command}`\n  expected (shape): {missing}\n"
                f"  got: {output.splitlines()}"
            )
    assert not failures, "\n".join(failures)
