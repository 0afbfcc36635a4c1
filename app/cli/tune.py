"""``deja tune``: grid search over max-num-seqs x max-num-batched-tokens on a workload; writes a
JSON result and a heat map (PNG and HTML), recommends the best cell under a TTFT SLO and
prints its ``vllm serve`` flags. Domain logic: :mod:`tuning`."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click
import httpx

from app.cli.heatmap import Heatmap, write_heatmap_html, write_heatmap_png
from app.cli.plot import INSTALL_HINT, has_matplotlib
from app.cli.support import EXIT_API_ERROR, EXIT_UNREACHABLE, output_option, table
from deja.errors import ReplicaError, TuningError
from sim.gpus import GPU_PROFILES
from tuning.grid import (
    DEFAULT_SEQS,
    DEFAULT_TOKENS,
    Cell,
    CellResult,
    CellRunner,
    ResultStore,
    flat_axes,
    recommend,
    run_grid,
)
from tuning.inprocess import InProcessRunner
from tuning.process import DEFAULT_REPLICA_CMD, ProcessRunner
from tuning.profiles import VllmProfile, get_profile, serve_args, shell_command
from tuning.promtext import fetch_metrics
from tuning.workload import LengthDist, Workload, workload_from_gateway

__all__ = ["tune_command"]

SIM_MODEL = "deja-sim-1"
_HELP = f"""Grid-search vLLM's max-num-seqs x max-num-batched-tokens on a workload.

Each cell starts a replica from --replica-cmd (default: the simulator, `deja sim --gpu GPU`),
waits for /health, drives the workload at --concurrency over HTTP (closed loop, streamed) and
reads /metrics: output tok/s, TTFT and ITL p50/p99, preemptions per minute, the waiting queue.
--in-process runs the simulator's scheduler in simulated time instead (no processes, about a
second per cell); its figures are modelled GPU time, not this machine's clock.

The workload: --prompt-tokens/--output-tokens (N or MIN:MAX), a --profile's, or the gateway's
recorded traffic (--from-gateway URL reads deja_prompt_tokens / deja_completion_tokens).
Results go to --output (JSON, written after every cell: rerun the same command to resume) and
a heat map next to it (.png, .html). Template placeholders: {{seqs}} {{tokens}} {{port}}
{{host}} {{model}} {{max_model_len}} {{gpu}} {{python}}. GPU profiles: {", ".join(GPU_PROFILES)}.
Exit code 1 when a cell failed or no cell meets --ttft-p99-ms.
"""


_F = TypeVar("_F", bound=Callable[..., Any])


def _int_list(ctx: click.Context, param: click.Parameter, value: str) -> list[int]:
    try:
        items = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter("comma-separated integers, e.g. 32,64,128") from None
    if not items or min(items) < 1:
        raise click.BadParameter("at least one integer >= 1")
    return items


def _axis_option(flag: str, default: Sequence[int], vllm_flag: str) -> Callable[[_F], _F]:
    """One axis of the grid: the values of ``vllm_flag`` to try, comma-separated."""
    return click.option(
        flag,
        default=",".join(map(str, default)),
        show_default=True,
        callback=_int_list,
        help=f"{vllm_flag} values.",
    )


def _workload(opts: dict[str, Any], profile: VllmProfile | None) -> tuple[Workload, str | None]:
    """The workload from the gateway, the flags, or the profile (in that order)."""
    base = profile.workload if profile is not None else None
    max_len = opts["max_model_len"] or (profile.max_model_len if profile else 8192)
    # Sized to the grid: at the largest max-num-seqs every request runs, in smaller cells the
    # rest queue (a concurrency above every cell measures only the queue).
    concurrency = opts["concurrency"] or (base.concurrency if base else max(opts["seqs"]))
    if opts["from_gateway"]:
        return _gateway_workload(opts, concurrency, max_len)
    prompt = opts["prompt_tokens"] or (base.prompt_tokens if base else "200:2000")
    output = opts["output_tokens"] or (base.output_tokens if base else "100:500")
    source = f"profile:{profile.name}" if profile and not opts["prompt_tokens"] else "flags"
    return Workload(
        LengthDist.parse(prompt, "--prompt-tokens"),
        LengthDist.parse(output, "--output-tokens"),
        concurrency,
        max_len,
        opts["seed"],
        source,
    ), None


def _gateway_workload(
    opts: dict[str, Any], concurrency: int, max_len: int
) -> tuple[Workload, str | None]:
    async def scrape() -> Any:
        async with httpx.AsyncClient(timeout=10.0) as client:
            return await fetch_metrics(client, opts["from_gateway"])

    try:
        metrics = asyncio.run(scrape())
    except ReplicaError as exc:
        click.echo(f"deja tune: --from-gateway: {exc.message}", err=True)
        raise SystemExit(EXIT_UNREACHABLE) from None
    workload, model = workload_from_gateway(
        metrics, opts["gateway_model"], concurrency, max_model_len=max_len, seed=opts["seed"]
    )
    return workload, model


def _runner(opts: dict[str, Any], workload: Workload, profile: VllmProfile | None) -> CellRunner:
    measured = opts["requests"]
    warmup = opts["warmup"] if opts["warmup"] is not None else workload.concurrency // 2
    if opts["in_process"]:
        fields: dict[str, Any] = {"gpu": opts["gpu"], "model": opts["model"]}
        if profile is not None:
            fields["enable_prefix_caching"] = profile.enable_prefix_caching
            fields["kv_cache_dtype"] = profile.sim_fields()["kv_cache_dtype"]
        return InProcessRunner(fields, workload, measured=measured, warmup=warmup)
    output: Path = opts["output"]
    return ProcessRunner(
        opts["replica_cmd"], workload, model=opts["model"], gpu=opts["gpu"],
        measured=measured, warmup=warmup, log_dir=output.with_name(output.stem + "-logs"),
    )  # fmt: skip


def _progress(done: int, total: int, r: CellResult, resumed: bool) -> None:
    width = 20
    filled = round(width * done / total)
    bar = "#" * filled + "-" * (width - filled)
    head = f"[{bar}] {done:>{len(str(total))}}/{total}  {r.seqs:>4} seqs x {r.tokens:>6} tokens"
    if not r.ok:
        body = f"{r.status.upper()}: {r.error}"
    else:
        body = (
            f"{r.throughput:>9,.0f} tok/s  TTFT p99 {_ms(r.ttft_p99_ms)}  "
            f"ITL p99 {_ms(r.itl_p99_ms)}  {r.preemptions_per_min:g} preempt/min"
        )
    tail = "  (from the results file)" if resumed else f"  ({r.wall_seconds:.1f} s)"
    click.echo(f"{head}  {body}{tail}", err=True)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} ms"


def _surface(results: list[CellResult], seqs: list[int], tokens: list[int]) -> str:
    by = {(r.seqs, r.tokens): r for r in results}
    rows = []
    for t in tokens:
        cells = [by.get((s, t)) for s in seqs]
        rows.append(
            [t, *[(f"{c.throughput:,.0f}" if c.ok else c.status) if c else "" for c in cells]]
        )
    return table(
        ["tokens \\ seqs", *map(str, seqs)], rows, right="".join(map(str, range(len(seqs) + 1)))
    )


def _recommendation(
    best: CellResult | None, profile: VllmProfile | None, model: str, max_model_len: int
) -> tuple[str | None, list[str]]:
    """The ``vllm serve`` command of ``best``: the profile's other flags when one was given."""
    if best is None:
        return None, []
    limits: dict[str, Any] = {
        "name": profile.name if profile else "tuned",
        "max_num_seqs": best.seqs,
        "max_num_batched_tokens": best.tokens,
        "max_model_len": max_model_len,
    }
    base = profile.model_dump() if profile is not None else {}
    tuned = VllmProfile.model_validate({**base, **limits})
    args = serve_args(tuned, model if model != SIM_MODEL else "MODEL")
    return shell_command(args), args


def _report(
    results: list[CellResult], seqs: list[int], tokens: list[int], opts: dict[str, Any],
    profile: VllmProfile | None, store: ResultStore, mode_note: str, max_model_len: int,
) -> int:  # fmt: skip
    slo = opts["ttft_p99_ms"]
    best = recommend(results, slo)
    command, args = _recommendation(best, profile, opts["model"], max_model_len)
    store.extra = {
        "mode": mode_note,
        "ttft_p99_slo_ms": slo,
        "recommended": best.as_dict() if best else None,
        "vllm_serve": command,
        "vllm_args": args,
    }
    store.save()
    output: Path = opts["output"]
    heatmap = Heatmap(results, seqs, tokens, best, slo, f"deja tune: output tok/s ({mode_note})")
    png, page = output.with_suffix(".png"), output.with_suffix(".html")
    wrote = [output, page]
    if has_matplotlib():
        write_heatmap_png(heatmap, png)
        wrote.insert(1, png)
    else:
        click.echo(f"matplotlib is not installed ({INSTALL_HINT}): no {png}, see {page}", err=True)
    write_heatmap_html(heatmap, page)
    click.echo(f"\noutput tokens/s ({mode_note}):\n" + _surface(results, seqs, tokens))
    for axis, moved in flat_axes(results).items():
        flag = "--max-num-seqs" if axis == "seqs" else "--max-num-batched-tokens"
        click.echo(
            f"note: {flag} makes no difference on this workload (throughput moves by at most "
            f"{moved} across its values): keep the smallest, it holds the least memory",
            err=True,
        )
    failed = [r for r in results if not r.ok]
    for r in failed:
        click.echo(f"cell {r.seqs} seqs x {r.tokens} tokens {r.status}: {r.error}", err=True)
    if best is None:
        why = f" meets TTFT p99 <= {slo:g} ms" if slo is not None else " produced figures"
        click.echo(f"\nno cell{why}; nothing to recommend", err=True)
    else:
        click.echo(
            f"\nrecommended: --max-num-seqs {best.seqs} --max-num-batched-tokens {best.tokens}: "
            f"{best.throughput:,.0f} tok/s, TTFT p50/p99 {_ms(best.ttft_p50_ms)} / "
            f"{_ms(best.ttft_p99_ms)}, ITL p99 {_ms(best.itl_p99_ms)}, "
            f"{best.preemptions_per_min:g} preemptions/min"
        )
        click.echo(command)
        if slo is None:
            click.echo(
                f"warning: no --ttft-p99-ms given, so this is the fastest cell whatever its "
                f"latency (TTFT p99 {_ms(best.ttft_p99_ms)}); give your SLO, e.g. "
                "--ttft-p99-ms 2000, before deploying it",
                err=True,
            )
    click.echo(f"\nwrote {', '.join(map(str, wrote))}", err=True)
    return EXIT_API_ERROR if failed or best is None else 0


@click.command("tune", help=_HELP, short_help="Grid-search vLLM's scheduler flags on a workload.")
@click.option(
    "--replica-cmd",
    default=DEFAULT_REPLICA_CMD,
    show_default=True,
    help="Command template that starts one replica for a cell.",
)
@click.option(
    "--in-process",
    is_flag=True,
    help="Run the simulator's scheduler in simulated time (no processes, no HTTP).",
)
@click.option(
    "--gpu",
    type=click.Choice(list(GPU_PROFILES)),
    default="h100-llama8b",
    show_default=True,
    help="The simulator's GPU profile ({gpu} in templates).",
)
@click.option("--model", default=SIM_MODEL, show_default=True, help="Model the replica serves.")
@click.option("--profile", "profile_name", help="Workload and flags of a serving profile.")
@click.option("--prompt-tokens", help="Prompt length: N or MIN:MAX (default 200:2000).")
@click.option("--output-tokens", help="Output length: N or MIN:MAX (default 100:500).")
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    help="Requests in flight (default: the largest --seqs value, or the profile's).",
)
@click.option("--max-model-len", type=click.IntRange(min=2), help="Context length (8192).")
@click.option("--from-gateway", help="Take the lengths from this deja gateway's /metrics.")
@click.option("--gateway-model", help="With --from-gateway: this model (default: the busiest).")
@_axis_option("--seqs", DEFAULT_SEQS, "max-num-seqs")
@_axis_option("--tokens", DEFAULT_TOKENS, "max-num-batched-tokens")
@click.option(
    "--requests",
    type=click.IntRange(min=1),
    default=300,
    show_default=True,
    help="Measured completions per cell.",
)
@click.option(
    "--warmup",
    type=click.IntRange(min=0),
    help="Completions before measuring (default: half the concurrency).",
)
@click.option(
    "--cell-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=300.0,
    show_default=True,
    help="Seconds per cell, start-up included.",
)
@click.option(
    "--ttft-p99-ms",
    type=click.FloatRange(min=0, min_open=True),
    help="SLO: recommend only cells with TTFT p99 at or below this.",
)
@output_option("tune-results.json")
@click.option(
    "--resume/--no-resume",
    default=True,
    show_default=True,
    help="Keep the finished cells of an earlier run of the same workload.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the request lengths.")
def tune_command(**opts: Any) -> None:  # fmt: skip
    """Run the grid and report."""
    if opts["in_process"] and opts["replica_cmd"] != DEFAULT_REPLICA_CMD:
        raise click.UsageError("--in-process runs the simulator itself: drop --replica-cmd")
    try:
        profile = get_profile(opts["profile_name"]) if opts["profile_name"] else None
        workload, gateway_model = _workload(opts, profile)
        runner = _runner(opts, workload, profile)
        if gateway_model is not None:
            click.echo(f"workload from the gateway, model {gateway_model}", err=True)
        store = ResultStore(opts["output"], {"workload": workload.describe(), **runner.describe()})
        kept = store.load(resume=opts["resume"])
    except TuningError as exc:
        raise click.ClickException(exc.message) from None
    seqs, tokens = opts["seqs"], opts["tokens"]
    if workload.concurrency > max(seqs):
        click.echo(
            f"warning: --concurrency {workload.concurrency} is above every --seqs value (at most "
            f"{max(seqs)}): in every cell requests wait in the queue, so TTFT measures the "
            "queue; lower --concurrency or add larger --seqs values",
            err=True,
        )
    cells = [Cell(s, t) for t in tokens for s in seqs]
    mode_note = (
        f"in-process: the simulator's scheduler in simulated time, GPU {opts['gpu']}"
        if opts["in_process"]
        else "process: replicas from --replica-cmd over HTTP, wall clock"
    )
    click.echo(
        f"deja tune: {len(cells)} cells ({mode_note}); workload {workload.describe()}"
        + (f"; {kept} cells kept from {opts['output']}" if kept else ""),
        err=True,
    )
    results = asyncio.run(
        run_grid(cells, runner, store, cell_timeout=opts["cell_timeout"], progress=_progress)
    )
    code = _report(results, seqs, tokens, opts, profile, store, mode_note, workload.max_model_len)
    sys.exit(code)
