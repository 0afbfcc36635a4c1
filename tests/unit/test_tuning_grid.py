"""The grid runner: failures and timeouts are results, the results file resumes, the SLO picks
the recommendation; workloads from flags and from Prometheus histograms."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from app.cli.main import main
from deja.errors import TuningError
from tuning.grid import Cell, CellResult, ResultStore, flat_axes, recommend, run_grid
from tuning.promtext import histogram_quantile, parse_metrics
from tuning.workload import LengthDist, Workload, workload_from_gateway


class FakeRunner:
    """Throughput = seqs (capped at 64), TTFT p99 = seqs x 10 ms; named cells fail."""

    mode = "fake"

    def __init__(self, fail: frozenset[str] = frozenset(), slow: frozenset[str] = frozenset()):
        self.fail, self.slow = fail, slow
        self.calls: list[str] = []

    def describe(self) -> dict[str, Any]:
        return {"mode": self.mode}

    async def run(self, cell: Cell, time_limit: float) -> CellResult:
        self.calls.append(cell.key)
        if cell.key in self.fail:
            return CellResult.failure(cell, "failed", "the replica command exited", self.mode)
        if cell.key in self.slow:
            return CellResult.failure(
                cell, "timeout", f"no result within {time_limit} s", self.mode
            )
        throughput = float(min(cell.seqs, 64) + cell.tokens / 1e6)
        return CellResult(
            cell.seqs, cell.tokens, throughput=throughput, ttft_p99_ms=cell.seqs * 10.0
        )


CELLS = [Cell(s, t) for t in (1024, 2048) for s in (16, 64, 128)]


def test_failed_and_timed_out_cells_do_not_stop_the_run(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "r.json", {"w": 1})
    runner = FakeRunner(fail=frozenset({"16x1024"}), slow=frozenset({"64x2048"}))
    results = asyncio.run(run_grid(CELLS, runner, store, cell_timeout=5))
    assert [r.status for r in results] == ["failed", "ok", "ok", "ok", "timeout", "ok"]
    saved = json.loads((tmp_path / "r.json").read_text())
    assert len(saved["cells"]) == 6 and saved["signature"] == {"w": 1}


def test_resume_skips_finished_cells_and_refuses_another_run(tmp_path: Path) -> None:
    path = tmp_path / "r.json"

    class Interrupting(FakeRunner):
        async def run(self, cell: Cell, time_limit: float) -> CellResult:
            if len(self.calls) == 3:
                raise KeyboardInterrupt
            return await super().run(cell, time_limit)

    first = ResultStore(path, {"w": 1})
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(
            run_grid(CELLS, Interrupting(fail=frozenset({"64x1024"})), first, cell_timeout=5)
        )
    again = ResultStore(path, {"w": 1})
    assert again.load(resume=True) == 2  # the failed cell is measured again
    runner = FakeRunner()
    seen: list[bool] = []
    results = asyncio.run(
        run_grid(CELLS, runner, again, cell_timeout=5, progress=lambda *a: seen.append(a[3]))
    )
    assert runner.calls == ["64x1024", "16x2048", "64x2048", "128x2048"]
    assert seen == [True, False, True, False, False, False] and all(r.ok for r in results)
    with pytest.raises(TuningError, match="another run"):
        ResultStore(path, {"w": 2}).load(resume=True)
    assert ResultStore(path, {"w": 2}).load(resume=False) == 0


def test_recommend_under_an_slo() -> None:
    results = [
        CellResult(16, 1024, throughput=16, ttft_p99_ms=160),
        CellResult(64, 1024, throughput=64, ttft_p99_ms=640),
        CellResult(128, 1024, throughput=64.3, ttft_p99_ms=1280),
        CellResult(128, 2048, status="failed", throughput=999),
    ]
    best = recommend(results, None)
    assert best is not None and (best.seqs, best.tokens) == (64, 1024)  # within 1%: fewer seqs
    slo = recommend(results, 500)
    assert slo is not None and slo.seqs == 16
    assert recommend(results, 100) is None


def test_length_distributions_and_requests() -> None:
    assert LengthDist.parse("512").buckets == ((512, 512, 1.0),)
    assert LengthDist.parse("100:200").mean == 150
    for bad in ("", "x", "0", "5:3", "1:x"):
        with pytest.raises(TuningError):
            LengthDist.parse(bad, "--prompt-tokens")
    w = Workload(LengthDist.parse("100:7000"), LengthDist.parse("2000"), 8, max_model_len=8192)
    reqs = w.requests(200)
    assert reqs == w.requests(200)  # every cell gets the same sequence
    assert all(r.prompt_len + r.output_len <= 8192 and r.output_len >= 1 for r in reqs)


GATEWAY_METRICS = """\
# TYPE deja_prompt_tokens histogram
deja_prompt_tokens_bucket{le="16.0",model="a"} 0
deja_prompt_tokens_bucket{le="32.0",model="a"} 10
deja_prompt_tokens_bucket{le="64.0",model="a"} 10
deja_prompt_tokens_bucket{le="+Inf",model="a"} 30
deja_prompt_tokens_count{model="a"} 30
deja_prompt_tokens_sum{model="a"} 900
deja_prompt_tokens_bucket{le="16.0",model="b"} 1
deja_prompt_tokens_bucket{le="+Inf",model="b"} 1
deja_prompt_tokens_count{model="b"} 1
deja_prompt_tokens_sum{model="b"} 5
# TYPE deja_completion_tokens histogram
deja_completion_tokens_bucket{le="16.0",model="a"} 30
deja_completion_tokens_bucket{le="+Inf",model="a"} 30
deja_completion_tokens_count{model="a"} 30
deja_completion_tokens_sum{model="a"} 300
"""


def test_workload_from_gateway_histograms() -> None:
    scrape = parse_metrics(GATEWAY_METRICS)
    workload, model = workload_from_gateway(scrape, None, 16, max_model_len=4096)
    assert model == "a"  # the busiest
    assert workload.prompt.buckets == ((17, 32, 10.0), (65, 128, 20.0))
    assert workload.output.buckets == ((1, 16, 30.0),)
    rng = random.Random(0)
    samples = [workload.prompt.sample(rng) for _ in range(300)]
    assert 0.2 < sum(s <= 32 for s in samples) / 300 < 0.45
    with pytest.raises(TuningError, match="no traffic for model 'c'"):
        workload_from_gateway(scrape, "c", 16, max_model_len=4096)
    with pytest.raises(TuningError, match="no deja_prompt_tokens"):
        workload_from_gateway(parse_metrics(""), None, 16, max_model_len=4096)


def test_histogram_quantile_like_promql() -> None:
    buckets = [(0.1, 50.0), (0.5, 90.0), (1.0, 100.0), (float("inf"), 100.0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.1)
    assert histogram_quantile(0.9, buckets) == pytest.approx(0.5)
    assert histogram_quantile(0.95, buckets) == pytest.approx(0.75)
    assert histogram_quantile(0.5, []) is None


def test_tune_cli_in_process(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    args = ["tune", "--in-process", "--seqs", "8,32", "--tokens", "2048", "--concurrency", "32",
            "--prompt-tokens", "200:600", "--output-tokens", "50:100", "--requests", "60",
            "--output", str(out)]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "recommended: --max-num-seqs 32 --max-num-batched-tokens 2048" in result.stdout
    assert "vllm serve MODEL --max-num-seqs 32 --max-num-batched-tokens 2048" in result.stdout
    assert "2/2" in result.stderr and "in-process" in result.stderr
    saved = json.loads(out.read_text())
    assert saved["recommended"]["seqs"] == 32 and saved["cells"][0]["mode"] == "in-process"
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "tok/s" in out.with_suffix(".html").read_text()
    tight = CliRunner().invoke(main, [*args, "--ttft-p99-ms", "0.001"])
    assert tight.exit_code == 1 and "no cell meets TTFT p99" in tight.stderr
    assert "kept from" in tight.stderr  # resumed: the SLO is applied to the saved cells


def test_tune_warns_without_an_slo_sizes_concurrency_and_names_a_flat_axis(tmp_path: Path) -> None:
    """No --ttft-p99-ms: the fastest cell whatever its latency, said so. No --concurrency: the
    largest --seqs value (not 256, which would make every cell measure its queue). Two token
    budgets that change nothing are pointed out. The heat map has axes, a colour bar, labels."""
    out = tmp_path / "t.json"
    args = ["tune", "--in-process", "--seqs", "8,32", "--tokens", "2048,8192",
            "--prompt-tokens", "200:600", "--output-tokens", "50:100", "--requests", "60",
            "--output", str(out)]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "'concurrency': 32" in result.stderr
    assert "warning: no --ttft-p99-ms given" in result.stderr
    assert "note: --max-num-batched-tokens makes no difference on this workload" in result.stderr
    assert "--max-num-seqs makes no difference" not in result.stderr
    import matplotlib.image

    height, width, _ = matplotlib.image.imread(out.with_suffix(".png")).shape
    assert width >= 1200 and height >= 675  # 8 x 4.5 in at 150 dpi, at least
    high = CliRunner().invoke(main, [*args, "--concurrency", "64", "--no-resume"])
    assert "--concurrency 64 is above every --seqs value (at most 32)" in high.stderr


def test_flat_axes_compare_along_each_axis() -> None:
    def cell(seqs: int, tokens: int, tput: float) -> CellResult:
        return CellResult(seqs=seqs, tokens=tokens, throughput=tput)

    flat_tokens = [cell(8, 2048, 1000), cell(8, 8192, 1003), cell(32, 2048, 3000),
                   cell(32, 8192, 3010)]  # fmt: skip
    assert flat_axes(flat_tokens) == {"tokens": "0.3%"}
    assert flat_axes([cell(8, 2048, 1000), cell(32, 2048, 1000)]) == {"seqs": "0.0%"}
    assert flat_axes([cell(8, 2048, 1000), cell(8, 8192, 1500)]) == {}
    assert flat_axes([cell(8, 2048, 1000)]) == {}  # one value per axis: nothing compared
