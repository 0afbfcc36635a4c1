"""The grid search of ``deja tune``: cells of max-num-seqs x max-num-batched-tokens, one result
per cell, a results file that survives an interruption, and the recommendation under an SLO.

A cell is measured by a :class:`CellRunner`: :class:`~tuning.process.ProcessRunner` starts
a real replica process per cell (vLLM, or the simulator: the default) and drives it over HTTP;
:class:`~tuning.inprocess.InProcessRunner` runs the simulator's scheduler in simulated
time. A cell that fails or runs out of time is a result too (``status``), never the end of the
run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol

import orjson

from deja.errors import TuningError
from deja.files import write_atomic
from sim.virtual import LogHistogram
from tuning.workload import Workload

__all__ = [
    "DEFAULT_SEQS",
    "DEFAULT_TOKENS",
    "RESULTS_VERSION",
    "Cell",
    "CellResult",
    "CellRunner",
    "MeasuredRun",
    "ReplayRunner",
    "ResultStore",
    "flat_axes",
    "recommend",
    "run_grid",
]

#: An axis whose cells stay within this share of each other (at every value of the other
#: axis) "makes no difference": 3,759 vs 3,761 tok/s is noise, not a reason to pick a value.
FLAT_SPREAD = 0.02

DEFAULT_SEQS = (32, 64, 128, 256, 512)
DEFAULT_TOKENS = (4096, 8192, 16384, 32768, 65536)
"""The design's grid: {32, 64, 128, 256, 512} x {4096, 8192, 16384, 32768, 65536}."""
RESULTS_VERSION = 1


@dataclass(frozen=True, slots=True)
class Cell:
    """One point of the grid."""

    seqs: int
    tokens: int

    @property
    def key(self) -> str:
        return f"{self.seqs}x{self.tokens}"


class MeasuredRun(Protocol):
    """A cell's measured window, whichever runner drove it: ``sim.virtual.VirtualResult``
    (simulated time) or ``tuning.drive.DriveResult`` (over HTTP)."""

    @property
    def completed(self) -> int: ...
    @property
    def seconds(self) -> float: ...
    @property
    def throughput(self) -> float: ...
    @property
    def ttft(self) -> LogHistogram: ...
    @property
    def itl(self) -> LogHistogram: ...


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


@dataclass(slots=True)
class CellResult:
    """What one cell measured (``status`` ok), or why it has no figures (failed, timeout)."""

    seqs: int
    tokens: int
    status: str = "ok"
    error: str | None = None
    throughput: float = 0.0
    """Output tokens per second."""
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p99_ms: float | None = None
    preemptions: int = 0
    preemptions_per_min: float = 0.0
    waiting_mean: float = 0.0
    waiting_max: float = 0.0
    kv_usage_mean: float | None = None
    completed: int = 0
    measured_seconds: float = 0.0
    wall_seconds: float = 0.0
    mode: str = ""

    @property
    def cell(self) -> Cell:
        return Cell(self.seqs, self.tokens)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> CellResult:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in names})

    @classmethod
    def failure(cls, cell: Cell, status: str, error: str, mode: str) -> CellResult:
        return cls(cell.seqs, cell.tokens, status=status, error=error, mode=mode)

    @classmethod
    def measured(
        cls,
        cell: Cell,
        run: MeasuredRun,
        mode: str,
        *,
        preemptions: int,
        waiting_mean: float,
        waiting_max: float,
        kv_usage_mean: float | None,
        error: str | None = None,
    ) -> CellResult:
        """The figures of ``run``, read the same way for every runner (so their cells compare):
        throughput, TTFT and ITL quantiles in ms, preemptions per minute; the scheduler's
        gauges are the runner's own (the simulator knows them, a process is sampled)."""
        minutes = run.seconds / 60
        return cls(
            cell.seqs,
            cell.tokens,
            throughput=round(run.throughput, 2),
            ttft_p50_ms=_ms(run.ttft.quantile(0.5)),
            ttft_p99_ms=_ms(run.ttft.quantile(0.99)),
            itl_p50_ms=_ms(run.itl.quantile(0.5)),
            itl_p99_ms=_ms(run.itl.quantile(0.99)),
            preemptions=preemptions,
            preemptions_per_min=round(preemptions / minutes, 2) if minutes > 0 else 0.0,
            waiting_mean=waiting_mean,
            waiting_max=waiting_max,
            kv_usage_mean=kv_usage_mean,
            completed=run.completed,
            measured_seconds=round(run.seconds, 3),
            mode=mode,
            error=error,
        )


class CellRunner(Protocol):
    """Measures one cell."""

    mode: str

    def describe(self) -> dict[str, Any]:
        """What identifies this runner's measurements (compared on resume)."""
        ...

    async def run(self, cell: Cell, time_limit: float) -> CellResult:
        """Measure ``cell`` within ``time_limit`` seconds; failures are results, not raises."""
        ...


class ReplayRunner:
    """What every :class:`CellRunner` shares: one list of requests for the whole grid
    (``warmup`` completions, then ``measured`` counted), so cells differ only by their flags;
    ``describe`` names the mode, the runner's own ``setup`` and the replay."""

    mode = ""

    def __init__(self, workload: Workload, *, measured: int, warmup: int) -> None:
        self.workload = workload
        self.measured = measured
        self.warmup = warmup
        self.requests = workload.requests(max(measured + warmup, 1))

    def setup(self) -> dict[str, Any]:
        """What else identifies this runner's measurements (the simulator's fields, the
        replica command)."""
        return {}

    def describe(self) -> dict[str, Any]:
        return {"mode": self.mode, **self.setup(), "measured": self.measured, "warmup": self.warmup}


@dataclass
class ResultStore:
    """The results file: written after every cell, so an interrupted run resumes."""

    path: Path
    signature: dict[str, Any]
    results: dict[str, CellResult] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def load(self, *, resume: bool) -> int:
        """Keep the finished (ok) cells of an earlier run of the same signature; returns how
        many. A file of another run is an error unless ``resume`` is off (then replaced)."""
        if not resume or not self.path.exists():
            return 0
        try:
            raw = orjson.loads(self.path.read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            raise TuningError(f"{self.path}: cannot resume from it ({exc})") from None
        if not isinstance(raw, dict) or raw.get("signature") != self.signature:
            raise TuningError(
                f"{self.path} holds another run (different workload, grid source or replica); "
                "pass --no-resume to replace it, or another --output"
            )
        for item in raw.get("cells", []):
            result = CellResult.from_dict(item)
            if result.ok:
                self.results[result.cell.key] = result
        return len(self.results)

    def save(self) -> None:
        document = {
            "version": RESULTS_VERSION,
            "signature": self.signature,
            "cells": [r.as_dict() for r in self.results.values()],
            **self.extra,
        }
        write_atomic(self.path, orjson.dumps(document, option=orjson.OPT_INDENT_2))


async def run_grid(
    cells: Sequence[Cell],
    runner: CellRunner,
    store: ResultStore,
    *,
    cell_timeout: float,
    progress: Callable[[int, int, CellResult, bool], None] | None = None,
) -> list[CellResult]:
    """Measure every cell not already in ``store`` (saving after each), in order; returns the
    results of all ``cells``. ``progress(done, total, result, resumed)`` after each."""
    out: list[CellResult] = []
    for i, cell in enumerate(cells, 1):
        known = store.results.get(cell.key)
        if known is not None:
            out.append(known)
            if progress is not None:
                progress(i, len(cells), known, True)
            continue
        started = time.monotonic()
        try:
            result = await runner.run(cell, cell_timeout)
        except asyncio.CancelledError:
            raise
        result.wall_seconds = round(time.monotonic() - started, 3)
        store.results[cell.key] = result
        store.save()
        out.append(result)
        if progress is not None:
            progress(i, len(cells), result, False)
    return out


def recommend(results: Sequence[CellResult], ttft_p99_ms: float | None) -> CellResult | None:
    """The highest-throughput ok cell whose TTFT p99 meets the SLO (any, without one); among
    cells within 1% of that throughput, the one with the fewest sequences, then tokens (less
    memory held for the same work)."""
    eligible = [
        r
        for r in results
        if r.ok
        and r.throughput > 0
        and (ttft_p99_ms is None or (r.ttft_p99_ms is not None and r.ttft_p99_ms <= ttft_p99_ms))
    ]
    if not eligible:
        return None
    best = max(r.throughput for r in eligible)
    close = [r for r in eligible if r.throughput >= 0.99 * best]
    return min(close, key=lambda r: (r.seqs, r.tokens))


def flat_axes(results: Sequence[CellResult], spread: float = FLAT_SPREAD) -> dict[str, str]:
    """The axes (``seqs``, ``tokens``) along which throughput moves by less than ``spread`` of
    its mean at every value of the other axis, each with the largest move seen ("0.5%"); an
    axis with fewer than two values is never flat (nothing was compared)."""
    ok = [r for r in results if r.ok and r.throughput > 0]
    flat: dict[str, str] = {}
    for axis, other in (("seqs", "tokens"), ("tokens", "seqs")):
        lines: dict[int, list[float]] = {}
        for r in ok:
            lines.setdefault(getattr(r, other), []).append(r.throughput)
        compared = [v for v in lines.values() if len(v) > 1]
        if not compared:
            continue
        moves = [(max(v) - min(v)) / (sum(v) / len(v)) for v in compared]
        if max(moves) <= spread:
            flat[axis] = f"{max(moves):.1%}"
    return flat
