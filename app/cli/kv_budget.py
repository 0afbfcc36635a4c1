"""``deja kv-budget``: bytes per token, KV tokens and the real number of full-length sequences
one GPU holds, from a model's ``config.json`` or explicit flags (``tuning.kvbudget``)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from app.cli.support import EXIT_API_ERROR
from deja.errors import ModelConfigError
from tuning.kvbudget import GIB, KvBudget, ModelShape, kv_budget, load_model_config

__all__ = ["kv_budget_command"]

_HELP = """KV-cache budget of one GPU: bytes per token, KV tokens, full-length sequences.

bytes/token = 2 (K and V) x layers x KV heads x head dim x dtype bytes. The KV budget is GPU
memory x --gpu-memory-utilization minus the weights and the overhead (activations of a
--max-num-batched-tokens step, CUDA graphs), in blocks of --block-size tokens; a
--max-model-len sequence needs ceil(len / block size) of them.

Give one or more --config files (a model's config.json) or --layers/--kv-heads/--head-dim.
A file that cannot be used is reported on one line; the others are still computed, and the
exit code is then 1.
"""


def _text(b: KvBudget) -> str:
    s = b.shape
    dtype = s.dtype if b.kv_dtype == "auto" else b.kv_dtype
    weights = f"{b.weights_bytes / GIB:.2f} GiB"
    if s.params is not None:
        weights += f" ({s.params / 1e9:.2f}e9 parameters, {s.dtype})"
    lines = [
        ("model", f"{s.name}: {s.layers} layers, {s.kv_heads} KV heads x {s.head_dim} head dim"),
        ("KV bytes/token", f"2 x {s.layers} x {s.kv_heads} x {s.head_dim} x "
         f"{b.bytes_per_token // (2 * s.layers * s.kv_heads * s.head_dim)} B ({dtype}) = "
         f"{b.bytes_per_token:,} B"),
        ("GPU memory", f"{b.gpu_bytes / GIB:.2f} GiB x {b.gpu_memory_utilization:.2f} = "
         f"{b.usable_bytes / GIB:.2f} GiB"),
        ("weights", weights),
        ("overhead", f"{b.overhead_bytes / GIB:.2f} GiB (activations, CUDA graphs, non-torch)"),
        ("KV cache", f"{b.kv_bytes / GIB:.2f} GiB = {b.kv_blocks:,} blocks of {b.block_size} "
         f"= {b.kv_tokens:,} tokens"),
        ("max-model-len", f"{b.max_model_len:,} tokens = {b.blocks_per_sequence:,} blocks"),
        ("full-length seqs", f"{b.max_full_length_sequences} at once "
         f"(vLLM's 'maximum concurrency': {b.max_concurrency:.2f}x)"),
    ]  # fmt: skip
    width = max(len(k) for k, _ in lines)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in lines)


@click.command("kv-budget", help=_HELP, short_help="KV-cache arithmetic for one GPU.")
@click.option(
    "--config",
    "configs",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="A model's config.json (repeatable).",
)
@click.option("--layers", type=click.IntRange(min=1), help="Layers (without --config).")
@click.option("--kv-heads", type=click.IntRange(min=1), help="KV heads (without --config).")
@click.option("--head-dim", type=click.IntRange(min=1), help="Head dimension (without --config).")
@click.option("--dtype", default="bfloat16", show_default=True, help="Weights' dtype (flags).")
@click.option("--params-b", type=click.FloatRange(min=0), help="Parameters, billions (flags).")
@click.option("--gpu-memory-gib", type=click.FloatRange(min=0, min_open=True), required=True,
              help="GPU memory as CUDA reports it, GiB (an '80GB' H100 reports 79.6).")  # fmt: skip
@click.option("--gpu-memory-utilization", type=float, default=0.9, show_default=True)
@click.option("--weights-gib", type=click.FloatRange(min=0), help="Weights' size (else estimated).")
@click.option("--kv-dtype", type=click.Choice(["auto", "fp16", "bfloat16", "fp8"]), default="auto",
              show_default=True, help="KV-cache dtype; auto = the weights' dtype.")  # fmt: skip
@click.option("--max-model-len", type=click.IntRange(min=1), required=True)
@click.option("--block-size", type=click.IntRange(min=1), default=16, show_default=True)
@click.option("--max-num-batched-tokens", type=click.IntRange(min=1), default=8192,
              show_default=True, help="Sizes the activations' estimate.")  # fmt: skip
@click.option("--overhead-gib", type=click.FloatRange(min=0),
              help="Activations + CUDA graphs + non-torch, GiB (else estimated).")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="JSON output (one object per model).")
def kv_budget_command(
    configs: tuple[Path, ...],
    layers: int | None,
    kv_heads: int | None,
    head_dim: int | None,
    dtype: str,
    params_b: float | None,
    as_json: bool,
    **budget: float | int | str | None,
) -> None:
    """Print the KV budget of each model."""
    shapes: list[ModelShape | ModelConfigError] = []
    for path in configs:
        try:
            shapes.append(load_model_config(path))
        except ModelConfigError as exc:
            shapes.append(exc)
    if layers or kv_heads or head_dim:
        if not (layers and kv_heads and head_dim):
            raise click.UsageError("--layers, --kv-heads and --head-dim go together")
        params = params_b * 1e9 if params_b is not None else None
        shapes.append(ModelShape("flags", layers, kv_heads, head_dim, dtype, params=params))
    if not shapes:
        raise click.UsageError("give --config FILE or --layers/--kv-heads/--head-dim")
    failed = False
    results = []
    for shape in shapes:
        try:
            if isinstance(shape, ModelConfigError):
                raise shape
            results.append(kv_budget(shape, **budget))  # type: ignore[arg-type]
        except ModelConfigError as exc:
            failed = True
            click.echo(f"deja kv-budget: {exc.message}", err=True)
    for i, b in enumerate(results):
        if as_json:
            click.echo(json.dumps(b.as_dict()))
        else:
            click.echo(("\n" if i else "") + _text(b))
    if failed:
        raise SystemExit(EXIT_API_ERROR)
