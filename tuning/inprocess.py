"""Measuring a cell with the simulator's scheduler in simulated time (``deja tune
--in-process``): no process, no HTTP, no sleeping, about a second of CPU per cell.

The figures are the simulator's modelled GPU time (a named GPU profile's roofline costs), not
this machine's wall clock.
"""

from __future__ import annotations

from typing import Any

from sim.config import SimConfig
from sim.virtual import VirtualResult, run_closed_loop
from tuning.grid import Cell, CellResult, ReplayRunner
from tuning.workload import Workload

__all__ = ["InProcessRunner", "result_from_virtual"]


def result_from_virtual(cell: Cell, run: VirtualResult, mode: str) -> CellResult:
    """A :class:`CellResult` from a virtual-time run (the scheduler's own gauges)."""
    return CellResult.measured(
        cell,
        run,
        mode,
        preemptions=run.preemptions,
        waiting_mean=round(run.waiting_mean, 2),
        waiting_max=run.waiting_max,
        kv_usage_mean=round(run.kv_usage_mean, 4),
    )


class InProcessRunner(ReplayRunner):
    """The simulator (``sim_fields`` plus the cell's limits) under ``workload``, in simulated
    time. ``sim_fields`` are ``SimConfig`` fields as given (with ``gpu``, the profile sizes the
    KV cache for each cell's token budget unless ``kv_blocks`` is among them)."""

    mode = "in-process"

    def __init__(
        self, sim_fields: dict[str, Any], workload: Workload, *, measured: int, warmup: int
    ) -> None:
        self.sim_fields = {"max_model_len": workload.max_model_len, **sim_fields}
        SimConfig(**self.sim_fields)  # fail early on a bad field
        super().__init__(workload, measured=measured, warmup=warmup)

    def setup(self) -> dict[str, Any]:
        return {"sim": self.sim_fields}

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
