"""``deja sim``: serve one simulated vLLM replica (tests, benchmarks, demos only)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from sim.config import SimConfig

__all__ = ["sim_command"]

_HELP = """Simulate ONE vLLM replica on this machine's CPU (OpenAI-compatible API).

For tests, benchmarks and demos only - it is not a model and never replaces vLLM in
production. Answers are deterministic filler text labelled "simulated"; vLLM's scheduler
(decode first, chunked prefill, max-num-seqs, KV blocks with preemption), a step-time model
(--gpu picks a named GPU profile), prefix caching and vLLM's /metrics are modelled.
--profile takes max-num-seqs, max-num-batched-tokens, max-model-len, prefix caching and the KV
dtype from config/vllm-profiles.yaml; explicit flags win over the profile and --gpu.
Faults (--error-rate, --stall-ms, ...) can also be changed at runtime via PUT /sim/faults.
"""

_F = TypeVar("_F", bound=Callable[..., Any])
_TYPES: dict[Any, Any] = {int: int, float: float, str: str}


def _config_options(func: _F) -> _F:
    """Add one ``--kebab-name`` option per :class:`SimConfig` field (``--x/--no-x`` for
    booleans). Defaults are shown but not passed, so a ``--gpu`` profile can fill them."""
    for name, info in reversed(SimConfig.model_fields.items()):
        flag = "--" + name.replace("_", "-")
        default = info.default
        if info.annotation is bool:
            decl = f"{flag}/--no-{flag[2:]}"
            func = click.option(decl, name, default=None, help=f"{info.description} "
                                f"[default: {'on' if default else 'off'}]")(func)  # fmt: skip
            continue
        kind = _TYPES.get(info.annotation, str)
        shown = f" [default: {default}]" if default != "" else ""
        func = click.option(flag, name, type=kind, default=None, help=f"{info.description}{shown}")(
            func
        )
    return func


@click.command(
    "sim",
    help=_HELP,
    short_help="Serve one SIMULATED vLLM replica (tests/demos, not production).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Bind address.")
@click.option("--port", type=int, default=8001, show_default=True, help="Bind port.")
@click.option("--profile", "profile_name", help="A serving profile's limits (vllm-profiles.yaml).")
@_config_options
def sim_command(host: str, port: int, profile_name: str | None, **fields: Any) -> None:
    """Serve one simulated vLLM replica until interrupted."""
    from pydantic import ValidationError

    from deja.errors import TuningError
    from sim.labels import LabelsError
    from sim.runner import run_simulator
    from tuning.profiles import get_profile

    given = {k: v for k, v in fields.items() if v is not None}
    if profile_name:
        try:
            given = {**get_profile(profile_name).sim_fields(), **given}
        except TuningError as exc:
            raise click.UsageError(exc.message) from None
    try:
        config = SimConfig(**given)
    except ValidationError as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        run_simulator(config, host, port)
    except LabelsError as exc:  # raised before the server starts
        raise click.UsageError(str(exc)) from None
