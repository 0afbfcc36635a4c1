"""``deja vllm-args``: a serving profile (``config/vllm-profiles.yaml``) as vLLM's command line."""

from __future__ import annotations

import json

import click
import yaml

from deja.errors import TuningError
from tuning.profiles import get_profile, load_profiles, serve_args, shell_command

__all__ = ["vllm_args_command"]

_HELP = """Print the vllm serve command of a serving profile (config/vllm-profiles.yaml).

Profiles: chat, rag (enterprise RAG), coding, summarisation, batch. --format shell prints one
command line; yaml prints the argument list as deploy/docker-compose.yml and the Kubernetes
StatefulSet carry it; json prints the profile and its arguments; --list shows every profile.
"""


@click.command("vllm-args", help=_HELP, short_help="vLLM flags of a serving profile.")
@click.option("--profile", "name", help="Profile name or alias.")
@click.option("--model", default="MODEL", show_default=True, help="The model vLLM serves.")
@click.option("--host", help="Adds --host.")
@click.option("--port", type=click.IntRange(1, 65535), help="Adds --port.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["shell", "yaml", "json"]),
    default="shell",
    show_default=True,
)
@click.option("--list", "list_all", is_flag=True, help="List the profiles and exit.")
def vllm_args_command(
    name: str | None, model: str, host: str | None, port: int | None, fmt: str, list_all: bool
) -> None:
    """Print one profile's vLLM arguments."""
    try:
        if list_all:
            for profile in load_profiles().values():
                click.echo(
                    f"{profile.name:<14} {profile.max_num_seqs:>4} seqs  "
                    f"{profile.max_num_batched_tokens:>6} tokens  {profile.description}"
                )
            return
        if name is None:
            raise click.UsageError("give --profile NAME (or --list)")
        profile = get_profile(name)
    except TuningError as exc:
        raise click.ClickException(exc.message) from None
    args = serve_args(profile, model, host=host, port=port)
    if fmt == "shell":
        click.echo(shell_command(args))
    elif fmt == "yaml":
        click.echo(yaml.safe_dump(args, default_flow_style=False, sort_keys=False).rstrip())
    else:
        click.echo(json.dumps({"profile": profile.model_dump(), "args": args}, indent=2))
