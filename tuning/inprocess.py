"""Measuring a cell with the simulator's scheduler in simulated time (``deja tune
--in-process``): no process, no HTTP, no sleeping, about a second of CPU per cell.

The figures are the simulator's modelled GPU time (a named GPU profile's roofline costs), not
this machine's wall clock.
"""

from __future__ import annotations

from typing import Any

from sim.config import SimConfig
from sim.virtual import VirtualResult, run_closed_loop
from tuning.grid import Cell, CellResult
from tuning.workload import Workload

__all__ = ["InProcessRunner", "result_from_virtual"]


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def result_from_virtual(cell: Cell, run: VirtualResult, mode: str) -> CellResult:
    """A :class:`CellResult` from a virtual-time run."""
    minutes = run.seconds / 60
    return CellResult(
        cell.seqs,
        cell.tokens,
        throughput=round(run.throughput, 2),
        ttft_p50_ms=_ms(run.ttft.quantile(0.5)),
        ttft_p99_ms=_ms(run.ttft.quantile(0.99)),
        itl_p50_ms=_ms(run.itl.quantile(0.5)),
        itl_p99_ms=_ms(run.itl.quantile(0.99)),
        preemptions=run.preemptions,
        preemptions_per_min=round(run.preemptions / minutes, 2) if minutes > 0 else 0.0,
        waiting_mean=round(run.waiting_mean, 2),
        waiting_max=run.waiting_max,
        kv_usage_mean=round(run.kv_usage_mean, 4),
        completed=run.completed,
        measured_seconds=round(run.seconds, 3),
        mode=mode,
    )


class InProcessRunner:
    """The simulator (``sim_fields`` plus the cell's limits) under ``workload``, in simulated
    time. ``sim_fields`` are ``SimConfig`` fields as given (with ``gpu``, the profile sizes the
    KV cache for each cell's token budget unless ``kv_blocks`` is among them)."""

    mode = "in-process"

    def __init__(
        self, sim_fields: dict[str, Any], workload: Workload, *, measured: int, warmup: int
    ) -> None:
        self.sim_fields = {"max_model_len": workload.max_model_len, **sim_fields}
        SimConfig(**self.sim_fields)  # fail early on a bad field
        self.workload = workload
        self.measured = measured
        self.warmup = warmup
        self.requests = workload.requests(max(measured + warmup, 1))

    def describe(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "sim": self.sim_fields,
            "measured": self.measured,
            "warmup": self.warmup,
        }

    def config_for(self, cell: Cell) -> SimConfig:
        """The simulator's configuration for ``cell``."""
        return SimConfig(
            **{**self.sim_fields, "max_num_seqs": cell.seqs, "max_num_batched_tokens": cell.tokens}
        )

    async def run(self, cell: Cell, time_limit: float) -> CellResult:
        config = self.config_for(cell)
        capacity = config.kv_blocks * config.block_size
        if capacity < config.max_model_len:
            return CellResult.failure(
                cell,
                "failed",
                f"the KV cache holds {capacity} tokens, less than max-model-len "
                f"{config.max_model_len}: vLLM would refuse to start",
                self.mode,
            )
        run = run_closed_loop(
            config,
            self.requests,
            self.workload.concurrency,
            measured=self.measured,
            warmup=self.warmup,
            wall_limit=time_limit,
        )
        if run.timed_out:
            return CellResult.failure(
                cell, "timeout", f"no result within {time_limit:g} s ({run.steps} steps)", self.mode
            )
        return result_from_virtual(cell, run, self.mode)
