"""``deja sim``: serve one simulated vLLM replica (tests, benchmarks, demos only)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from deja.sim.config import SimConfig

__all__ = ["sim_command"]

_HELP = """Simulate ONE vLLM replica on this machine's CPU (OpenAI-compatible API).

For tests, benchmarks and demos only - it is not a model and never replaces vLLM in
production. Answers are deterministic filler text labelled "simulated"; latency,
prefix caching, KV usage, queueing (--max-num-seqs) and vLLM's /metrics are modelled.
Faults (--error-rate, --stall-ms, ...) can also be changed at runtime via PUT /sim/faults.
"""

_F = TypeVar("_F", bound=Callable[..., Any])
_TYPES: dict[Any, type] = {int: int, float: float, str: str}


def _config_options(func: _F) -> _F:
    """Add one ``--kebab-name`` option per :class:`SimConfig` field."""
    for name, info in reversed(SimConfig.model_fields.items()):
        func = click.option(
            "--" + name.replace("_", "-"),
            name,
            type=_TYPES.get(info.annotation, str),
            default=info.default,
            show_default=True,
            help=info.description,
        )(func)
    return func


@click.command(
    "sim",
    help=_HELP,
    short_help="Serve one SIMULATED vLLM replica (tests/demos, not production).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Bind address.")
@click.option("--port", type=int, default=8001, show_default=True, help="Bind port.")
@_config_options
def sim_command(host: str, port: int, **fields: Any) -> None:
    """Serve one simulated vLLM replica until interrupted."""
    from pydantic import ValidationError

    from deja.sim.runner import run_simulator

    try:
        config = SimConfig(**fields)
    except ValidationError as exc:
        raise click.UsageError(str(exc)) from exc
    run_simulator(config, host, port)
