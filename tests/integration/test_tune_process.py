"""``deja tune`` with real replica processes: the default simulator template over HTTP, and the
bad inputs (a replica command that exits, a cell that times out, a bad template), each a clear
line per cell while the run goes on, and a non-zero exit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

SMALL = ["--concurrency", "4", "--prompt-tokens", "40:80", "--output-tokens", "12",
         "--requests", "12", "--warmup", "2", "--tokens", "1024"]  # fmt: skip


def tune(
    tmp_path: Path, *args: str, timeout: float = 120
) -> tuple[subprocess.CompletedProcess[str], Any]:
    out = tmp_path / "tune.json"
    proc = subprocess.run(
        [sys.executable, "-m", "app", "tune", *SMALL, "--output", str(out), *args],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    saved = json.loads(out.read_text()) if out.exists() else None
    return proc, saved


def test_default_template_starts_the_simulator_per_cell(tmp_path: Path) -> None:
    proc, saved = tune(tmp_path, "--seqs", "2,8")
    assert proc.returncode == 0, proc.stderr
    cells = {c["seqs"]: c for c in saved["cells"]}
    assert all(c["status"] == "ok" and c["mode"] == "process" for c in cells.values())
    assert cells[8]["throughput"] > cells[2]["throughput"]  # four in flight, two slots
    assert cells[2]["waiting_max"] >= 1 and cells[8]["ttft_p99_ms"] is not None
    assert saved["signature"]["replica_cmd"].startswith("{python} -m app sim")
    assert "recommended: --max-num-seqs 8" in proc.stdout
    logs = sorted(p.name for p in (tmp_path / "tune-logs").iterdir())
    assert logs == ["replica-2x1024.log", "replica-8x1024.log"]


def test_a_replica_command_that_exits_fails_its_cell_only(tmp_path: Path) -> None:
    # The command refuses seqs=3 (exit 7) and runs the simulator otherwise.
    template = (
        "sh -c 'if [ {seqs} = 3 ]; then echo refusing 3 sequences; exit 7; fi; "
        "exec {python} -m app sim --host {host} --port {port} --max-num-seqs {seqs} "
        "--max-num-batched-tokens {tokens}'"
    )
    proc, saved = tune(tmp_path, "--seqs", "3,4", "--replica-cmd", template)
    assert proc.returncode == 1
    failed, ok = saved["cells"]
    assert failed["status"] == "failed" and ok["status"] == "ok"
    assert "exited with code 7: refusing 3 sequences" in failed["error"]
    lines = [line for line in proc.stderr.splitlines() if "FAILED" in line]
    assert len(lines) == 1 and "3 seqs" in lines[0]


def test_a_cell_that_never_gets_healthy_times_out(tmp_path: Path) -> None:
    # A plain HTTP server: /health is a 404, so the replica never becomes ready.
    template = "{python} -m http.server {port} --bind {host}"
    proc, saved = tune(tmp_path, "--seqs", "2", "--replica-cmd", template, "--cell-timeout", "1.5")
    assert proc.returncode == 1
    [cell] = saved["cells"]
    assert cell["status"] == "timeout" and "no result within 1.5 s" in cell["error"]
    assert "TIMEOUT: no result within 1.5 s" in proc.stderr


def test_bad_template_and_unreachable_gateway_are_one_line(tmp_path: Path) -> None:
    proc, _ = tune(tmp_path, "--replica-cmd", "run {what}")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "Error: --replica-cmd: unknown placeholder(s) what; known: gpu, host, max_model_len, "
        "model, port, python, seqs, tokens"
    ]
    proc, _ = tune(tmp_path, "--in-process", "--from-gateway", "http://127.0.0.1:1")
    assert proc.returncode == 3
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("deja tune: --from-gateway: http://127.0.0.1:1/metrics: unreachable")
