"""``deja doctor``: read the replicas' ``/metrics`` (and deja's own) over a window and apply the
diagnostic matrix of :mod:`tuning.doctor`."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import click
import httpx

from app.cli.support import EXIT_API_ERROR, EXIT_UNREACHABLE, check_duration
from deja.errors import ReplicaError
from tuning.doctor import Finding, diagnose
from tuning.observe import Observation, ReplicaWindow, observe, replicas_of_gateway
from tuning.promtext import fetch_metrics

__all__ = ["doctor_command", "run_doctor"]

_HELP = """Diagnose vLLM replicas from their /metrics over a window.

Rules: TTFT p99/p50 >> 2 (raise --max-num-batched-tokens); TTFT p50 > 500 ms with a low
prefix-cache hit rate (check the system prompt and the prefix key); speculative-decoding
acceptance < 0.6 (change or disable the drafter); KV usage at 1.0 with preemptions (lower
--max-num-seqs or use an fp8 KV cache); a waiting queue with KV usage < 0.7 (raise
--max-num-batched-tokens). Each finding prints the numbers that triggered it.

Replicas: --replica URL (repeatable), or those a --gateway reports. Exit code: 0 nothing
found, 1 findings, 3 a replica or the gateway could not be read (the others are still checked),
5 no traffic in the window (nothing to judge: that is not "healthy").
"""

#: Exit code when no replica served a request in the window: no finding would mean nothing.
EXIT_NO_TRAFFIC = 5


async def run_doctor(
    replicas: list[str],
    gateway: str | None,
    *,
    window: float,
    interval: float,
    scrape_timeout: float,
) -> tuple[Observation, list[Finding]]:
    """Observe for ``window`` seconds and diagnose (replicas from the gateway when none given)."""
    async with httpx.AsyncClient(timeout=scrape_timeout) as client:
        if not replicas and gateway is not None:
            replicas = replicas_of_gateway(await fetch_metrics(client, gateway))
            if not replicas:
                raise ReplicaError(f"{gateway}: the gateway reports no replicas")
        observation = await observe(
            replicas, gateway, window=window, interval=interval, client=client
        )
    return observation, diagnose(observation)


def _figures(w: ReplicaWindow) -> str:
    def pct(v: float | None) -> str:
        return "-" if v is None else f"{v:.0%}"

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v * 1000:,.0f} ms"

    return (
        f"{w.url}: {w.requests:.0f} first tokens, TTFT p50/p99 {ms(w.ttft_p50)} / "
        f"{ms(w.ttft_p99)}, prefix hits {pct(w.prefix_hit_rate)}, KV max {pct(w.kv_max)}, "
        f"waiting max {w.waiting_max:.0f}, preemptions {w.preemptions:.0f}, "
        f"spec acceptance {pct(w.spec_acceptance)}"
    )


def _as_json(observation: Observation, findings: list[Finding]) -> dict[str, Any]:
    replicas = [
        {
            "url": w.url, "error": w.error, "requests": w.requests, "ttft_p50_s": w.ttft_p50,
            "ttft_p99_s": w.ttft_p99, "prefix_hit_rate": w.prefix_hit_rate,
            "spec_acceptance": w.spec_acceptance, "kv_usage_max": w.kv_max,
            "kv_usage_mean": w.kv_mean, "waiting_mean": w.waiting_mean,
            "waiting_max": w.waiting_max, "preemptions": w.preemptions,
        }
        for w in observation.replicas
    ]  # fmt: skip
    gateway = observation.gateway
    return {
        "window_seconds": observation.window_seconds,
        "replicas": replicas,
        "gateway": None if gateway is None else vars(gateway),
        "findings": [f.as_dict() for f in findings],
    }


@click.command("doctor", help=_HELP, short_help="Diagnose vLLM replicas from their metrics.")
@click.option("--replica", "replicas", multiple=True, help="A replica's base URL (repeatable).")
@click.option("--gateway", help="deja's base URL: its /metrics, and its replicas if none given.")
@click.option("--window", default="60s", show_default=True, callback=check_duration,
              help="How long to watch (e.g. 30s, 5m).")  # fmt: skip
@click.option("--interval", default="2s", show_default=True, callback=check_duration,
              help="Gauge sampling period.")  # fmt: skip
@click.option("--timeout", type=float, default=5.0, show_default=True, help="Per scrape, s.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document for scripts.")
def doctor_command(
    replicas: tuple[str, ...],
    gateway: str | None,
    window: float,
    interval: float,
    timeout: float,
    as_json: bool,
) -> None:
    """Watch, diagnose, report."""
    if not replicas and not gateway:
        raise click.UsageError("give --replica URL (repeatable) or --gateway URL")
    urls = [u.rstrip("/") for u in replicas]
    try:
        observation, findings = asyncio.run(
            run_doctor(
                urls,
                gateway and gateway.rstrip("/"),
                window=window,
                interval=interval,
                scrape_timeout=timeout,
            )
        )
    except ReplicaError as exc:
        click.echo(f"deja doctor: {exc.message}", err=True)
        sys.exit(EXIT_UNREACHABLE)
    unreachable = [w for w in observation.replicas if w.error is not None]
    read = [w for w in observation.replicas if w.error is None]
    idle = not any(w.requests > 0 for w in read)
    if observation.gateway is not None and observation.gateway.error is not None:
        click.echo(f"deja doctor: gateway {observation.gateway.error}", err=True)
    for w in unreachable:
        click.echo(f"deja doctor: {w.url}: {w.error}", err=True)
    if as_json:
        click.echo(json.dumps(_as_json(observation, findings), indent=2))
    else:
        for w in observation.replicas:
            if w.error is None:
                click.echo(_figures(w))
        for f in findings:
            numbers = ", ".join(f"{k}={v}" for k, v in f.numbers.items())
            click.echo(f"\n[{f.rule}] {f.replica}: {f.symptom}\n  numbers: {numbers}")
            click.echo(f"  change:  {f.change}")
        if not findings and idle:
            click.echo(
                f"\nno traffic in the window: {len(read)} replica(s) read, no request finished "
                f"its first token in {window:g} s, so there is nothing to judge (send traffic, "
                "or watch a longer --window)"
            )
        elif not findings:
            click.echo("\nno finding: nothing in the matrix triggered over the window")
    gateway_failed = observation.gateway is not None and observation.gateway.error is not None
    if unreachable or gateway_failed:
        sys.exit(EXIT_UNREACHABLE)
    if findings:
        sys.exit(EXIT_API_ERROR)
    sys.exit(EXIT_NO_TRAFFIC if idle else 0)
