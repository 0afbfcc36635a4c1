"""A full data disk (issue 19, finding 1): the gateway, a real ``deja serve`` process with Qdrant
Edge and the disk exact store on a small tmpfs, must never die for want of space. Qdrant Edge
writes through mmap, so on base-stop17 a disk that fills kills the process with SIGBUS (exit
135, no log line), and a 16 MB disk cannot even start it.

The suite runs as root: each test mounts its own tmpfs; it is skipped (saying why) only when
mounting is impossible here."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import httpx
import pytest

from sim.runner import SimCluster
from tests.support import MODEL_DIR, SIM_MODEL, free_port

pytestmark = pytest.mark.e2e

MIB = 1024 * 1024


@contextmanager
def tmpfs(path: Path, size_mb: int) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN): {done.stderr}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def free(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def ballast(path: Path, leave: int) -> None:
    """Fill the filesystem of ``path`` until ``leave`` bytes are free."""
    size = max(free(path.parent) - leave, 0)
    with path.open("ab") as handle:
        handle.write(b"\0" * size)


class Served:
    def __init__(self, proc: subprocess.Popen[bytes], log: Path, url: str) -> None:
        self.proc, self.log, self.url = proc, log, url

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def serve(data_dir: Path, log: Path, sims: SimCluster, **env: str) -> Iterator[Served]:
    port = free_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("DEJA_")}
    environ.update(
        DEJA_MODEL_DIR=str(MODEL_DIR),
        DEJA_DATA_DIR=str(data_dir),
        DEJA_REPLICAS=",".join(sims.urls),
        DEJA_CORPORA_ENABLED="false",
        DEJA_ACCESS_LOG="false",
        DEJA_TEMPORAL_BYPASS="false",
        **env,
    )
    sink: IO[bytes] = log.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--port", str(port)],
        env=environ,
        stdout=sink,
        stderr=subprocess.STDOUT,
    )
    try:
        yield Served(proc, log, f"http://127.0.0.1:{port}")
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        sink.close()


async def ready(served: Served, http: httpx.AsyncClient, limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    while True:
        assert served.proc.poll() is None, (
            f"gateway exited {served.proc.returncode}:\n" + (served.output()[-3000:])
        )
        try:
            if (await http.get(served.url + "/readyz")).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "gateway did not become ready"
        await asyncio.sleep(0.2)


def chat(text: str) -> dict[str, object]:
    return {"model": SIM_MODEL, "messages": [{"role": "user", "content": text}]}


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30) as client:
        yield client


async def test_a_disk_too_small_for_qdrant_edge_starts_without_it(
    sims: SimCluster, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    with (
        tmpfs(tmp_path / "disk", 16) as disk,
        serve(disk / "data", tmp_path / "log", sims, DEJA_DISK_RESERVE_MB="4") as served,
    ):
        await ready(served, http)
        line = [x for x in served.output().splitlines() if "data disk:" in x]
        assert len(line) == 1, served.output()
        assert "needs 28.0 MiB (reserve 4.0 MiB + 1 new Qdrant Edge collection(s)" in line[0]
        assert "Qdrant Edge (semantic cache, corpora) stays off" in line[0]
        body = chat("What is deja?")
        first = await http.post(served.url + "/v1/chat/completions", json=body)
        second = await http.post(served.url + "/v1/chat/completions", json=body)
        assert first.status_code == second.status_code == 200
        assert second.headers["x-deja-cache"] == "exact"  # the exact store still works
        status = (await http.get(served.url + "/readyz")).json()
        assert status["disk"]["ok"] is True and status["disk"]["reserve_bytes"] == 4 * MIB
        assert served.proc.poll() is None
        assert "Traceback" not in served.output()


async def test_a_disk_that_fills_pauses_storing_and_resumes(
    sims: SimCluster, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    """Fill the disk to just above the reserve, ask distinct questions until storing pauses,
    then fill it to ~100 KB free (another process writing) and keep asking: every answer is
    still served, none is stored, the log says so once; free the disk: storing resumes."""
    with (
        tmpfs(tmp_path / "disk", 44) as disk,
        serve(disk / "data", tmp_path / "log", sims, DEJA_DISK_RESERVE_MB="4") as served,
    ):
        await ready(served, http)
        url = served.url + "/v1/chat/completions"
        ballast(disk / "ballast", 4 * MIB + 256 * 1024)
        padding = "context " * 300  # a long question: its vector point holds the text
        low_at = None
        for i in range(400):
            reply = await http.post(url, json=chat(f"question {i}? {padding}"))
            assert reply.status_code == 200, reply.text + served.output()[-4000:]
            if "x-deja-entry" not in reply.headers:
                low_at = i
                break
        assert low_at is not None, "storing never paused"
        ballast(disk / "ballast2", 100 * 1024)  # the disk is now all but full
        for i in range(60):
            reply = await http.post(url, json=chat(f"full disk question {i}? {padding}"))
            assert reply.status_code == 200, reply.text + served.output()[-4000:]
            assert reply.headers["x-deja-cache"] == "miss"
            assert "x-deja-entry" not in reply.headers  # not stored: no entry to name
        assert served.proc.poll() is None, f"gateway died: exit {served.proc.returncode}"
        status = await http.get(served.url + "/readyz")
        assert status.status_code == 200  # still sent traffic: it answers
        assert status.json()["disk"]["ok"] is False
        metrics = (await http.get(served.url + "/metrics")).text
        assert "deja_disk_low 1.0" in metrics
        stored = await http.post(url, json=chat(f"question 0? {padding}"))
        assert stored.headers["x-deja-cache"] == "exact"  # what was stored is still served

        (disk / "ballast").unlink()
        (disk / "ballast2").unlink()
        await asyncio.sleep(2.5)  # the watch re-reads the free space every second
        status = (await http.get(served.url + "/readyz")).json()
        assert status["disk"]["ok"] is True
        again = await http.post(url, json=chat("after the disk was freed?"))
        assert "x-deja-entry" in again.headers
        await asyncio.sleep(0.5)  # the store runs in the background
        hit = await http.post(url, json=chat("after the disk was freed?"))
        assert hit.headers["x-deja-cache"] == "exact"
        output = served.output()
        assert output.count("data disk low") == 1, output  # one line per transition
        assert output.count("data disk ok again") == 1, output
        assert "Traceback" not in output
        assert served.proc.poll() is None
