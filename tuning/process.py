"""Measuring a cell with a real replica process: start it from a command template, wait for
``/health``, drive the workload over HTTP, read its ``/metrics``, stop it.

The template's placeholders: ``{seqs}``, ``{tokens}``, ``{port}``, ``{host}``, ``{model}``,
``{max_model_len}``, ``{gpu}`` and ``{python}`` (this interpreter). The default starts the
simulator, which runs its step model in real time, so its figures are bounded by this
machine's CPU (``--in-process`` runs the same model in simulated time instead).
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import socket
import string
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import httpx

from deja.errors import ReplicaError, TuningError
from tuning.drive import DriveResult, drive
from tuning.grid import Cell, CellResult, ReplayRunner
from tuning.promtext import Scrape, fetch_metrics
from tuning.workload import Workload

__all__ = ["DEFAULT_REPLICA_CMD", "PLACEHOLDERS", "ProcessRunner", "check_template"]

DEFAULT_REPLICA_CMD = (
    "{python} -m app sim --host {host} --port {port} --model {model} --gpu {gpu} "
    "--max-num-seqs {seqs} --max-num-batched-tokens {tokens} --max-model-len {max_model_len}"
)
PLACEHOLDERS = frozenset(
    {"seqs", "tokens", "port", "host", "model", "max_model_len", "gpu", "python"}
)
_HEALTH_POLL_S = 0.2
_SAMPLE_S = 0.5
_STOP_GRACE_S = 5.0


def check_template(template: str) -> None:
    """Raise :class:`TuningError` for an unknown or malformed placeholder."""
    try:
        names = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        raise TuningError(f"--replica-cmd: malformed template ({exc})") from None
    unknown = names - PLACEHOLDERS
    if unknown:
        raise TuningError(
            f"--replica-cmd: unknown placeholder(s) {', '.join(sorted(unknown))}; "
            f"known: {', '.join(sorted(PLACEHOLDERS))}"
        )


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _last_line(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


@dataclass
class _Gauges:
    """``num_requests_waiting`` and ``kv_cache_usage_perc`` sampled during the load."""

    waiting: list[float]
    kv: list[float]


class ProcessRunner(ReplayRunner):
    """One replica process per cell, started from ``template``."""

    mode = "process"

    def __init__(
        self,
        template: str,
        workload: Workload,
        *,
        model: str,
        gpu: str,
        measured: int,
        warmup: int,
        log_dir: Path,
        host: str = "127.0.0.1",
    ) -> None:
        check_template(template)
        super().__init__(workload, measured=measured, warmup=warmup)
        self.template = template
        self.model = model
        self.gpu = gpu
        self.log_dir = log_dir
        self.host = host

    def setup(self) -> dict[str, Any]:
        return {"replica_cmd": self.template, "model": self.model, "gpu": self.gpu}

    def argv(self, cell: Cell, port: int) -> list[str]:
        values = {
            "seqs": cell.seqs, "tokens": cell.tokens, "port": port, "host": self.host,
            "model": self.model, "max_model_len": self.workload.max_model_len, "gpu": self.gpu,
            "python": sys.executable,
        }  # fmt: skip
        return shlex.split(self.template.format(**values))

    async def run(self, cell: Cell, time_limit: float) -> CellResult:
        port = _free_port(self.host)
        argv = self.argv(cell, port)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / f"replica-{cell.key}.log"
        try:
            with log.open("wb") as out:
                proc = await asyncio.create_subprocess_exec(
                    *argv, stdout=out, stderr=asyncio.subprocess.STDOUT
                )
        except OSError as exc:
            return CellResult.failure(cell, "failed", f"cannot start {argv[0]!r}: {exc}", self.mode)
        url = f"http://{self.host}:{port}"
        try:
            async with asyncio.timeout(time_limit):
                return await self._measure(cell, url, proc, log)
        except TimeoutError:
            message = f"no result within {time_limit:g} s"
            return CellResult.failure(cell, "timeout", message, self.mode)
        except ReplicaError as exc:
            return CellResult.failure(cell, "failed", exc.message, self.mode)
        finally:
            await _stop(proc)

    async def _measure(
        self, cell: Cell, url: str, proc: asyncio.subprocess.Process, log: Path
    ) -> CellResult:
        async with httpx.AsyncClient(timeout=5.0) as client:
            await _wait_health(client, url, proc, log)
            before = await fetch_metrics(client, url)
            gauges = _Gauges([], [])
            sampler = asyncio.create_task(_sample(client, url, gauges))
            connector = aiohttp.TCPConnector(limit=0)
            try:
                async with aiohttp.ClientSession(connector=connector) as session:
                    run = await drive(
                        url, self.model, self.requests, self.workload.concurrency,
                        measured=self.measured, warmup=self.warmup, session=session,
                    )  # fmt: skip
            finally:
                sampler.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sampler
            after = await fetch_metrics(client, url)
        return _result(cell, run, after.minus(before), gauges, self.mode)


async def _wait_health(
    client: httpx.AsyncClient, url: str, proc: asyncio.subprocess.Process, log: Path
) -> None:
    while True:
        code = proc.returncode
        if code is not None:
            raise ReplicaError(f"the replica command exited with code {code}: {_last_line(log)}")
        with contextlib.suppress(httpx.HTTPError):
            if (await client.get(url + "/health")).status_code == 200:
                return
        await asyncio.sleep(_HEALTH_POLL_S)


async def _sample(client: httpx.AsyncClient, url: str, gauges: _Gauges) -> None:
    while True:
        await asyncio.sleep(_SAMPLE_S)
        with contextlib.suppress(ReplicaError):
            scrape = await fetch_metrics(client, url)
            gauges.waiting.append(scrape.value("vllm:num_requests_waiting"))
            if scrape.has("vllm:kv_cache_usage_perc"):
                gauges.kv.append(scrape.value("vllm:kv_cache_usage_perc"))


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _result(cell: Cell, run: DriveResult, delta: Scrape, gauges: _Gauges, mode: str) -> CellResult:
    """The cell's figures: the client's timings, the replica's counters and sampled gauges."""
    return CellResult.measured(
        cell,
        run,
        mode,
        preemptions=int(delta.value("vllm:num_preemptions_total")),
        waiting_mean=round(_mean(gauges.waiting), 2),
        waiting_max=max(gauges.waiting, default=0.0),
        kv_usage_mean=round(_mean(gauges.kv), 4) if gauges.kv else None,
        error=f"{run.errors} requests failed, first: {run.first_error}" if run.errors else None,
    )


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is not None:
        return
    proc.terminate()
    try:
        await asyncio.wait_for(proc.wait(), _STOP_GRACE_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
