"""The ``deja`` command line."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click
import orjson

from app.cli.options import setting_option
from app.cli.support import BadSettings
from config.settings import load_settings
from deja.errors import ConfigError, DataDirInUseError, VerifierError


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # The audit log is JSON lines, nothing around them (the access log writes its own).
    for name in ("deja.audit",):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="deja")
def main() -> None:
    """deja: an OpenAI-compatible caching gateway and prefix-aware router for vLLM replicas."""


@main.command()
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="DEJA_CONFIG",
    help="YAML settings file (env: DEJA_CONFIG). DEJA_* variables override it.",
)
@setting_option("host")
@setting_option("port")
@setting_option("demo")
@setting_option("log_level")
@setting_option("workers")
@click.option(
    "--print-config", is_flag=True, help="Print the effective config (secrets masked) and exit."
)
def serve(
    config_file: Path | None,
    host: str | None,
    port: int | None,
    demo: bool | None,
    log_level: str | None,
    workers: int | None,
    print_config: bool,
) -> None:
    """Run the gateway (uvicorn on uvloop + httptools; --workers N processes)."""
    try:
        overrides = {
            "host": host,
            "port": port,
            "demo": demo,
            "log_level": log_level,
            "workers": workers,
        }
        settings = load_settings(config_file, **overrides)
    except ConfigError as exc:
        raise BadSettings(str(exc)) from None
    if print_config:
        click.echo(orjson.dumps(settings.masked(), option=orjson.OPT_INDENT_2).decode())
        return
    _configure_logging(settings.log_level)
    from app.cli.demo import console_notes, demo_admin_key, uses_demo_key
    from app.server import listen_url, preflight, run_workers

    generated = None
    try:
        if uses_demo_key(settings):  # make run: the console works in one step
            generated = demo_admin_key(settings.data_dir)
            overrides["admin_key"] = generated[0]
            settings = load_settings(config_file, **overrides)
        sock = preflight(settings)
    except ConfigError as exc:
        raise BadSettings(str(exc)) from None
    except (DataDirInUseError, VerifierError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    notes = console_notes(listen_url(sock), settings, generated)
    run_workers(settings, sock, reload=lambda: load_settings(config_file, **overrides), notes=notes)


def _register_subcommands() -> None:
    from app.cli.cache import cache_group
    from app.cli.calibrate import calibrate_command
    from app.cli.corpus import corpus_group
    from app.cli.doctor import doctor_command
    from app.cli.keys import keys_group
    from app.cli.kv_budget import kv_budget_command
    from app.cli.labels import labels_group
    from app.cli.sim import sim_command
    from app.cli.threshold import threshold_group
    from app.cli.tune import tune_command
    from app.cli.vllm_args import vllm_args_command

    main.add_command(sim_command)
    main.add_command(calibrate_command)
    main.add_command(cache_group)
    main.add_command(threshold_group)
    main.add_command(keys_group)
    main.add_command(labels_group)
    main.add_command(corpus_group)
    main.add_command(tune_command)
    main.add_command(kv_budget_command)
    main.add_command(vllm_args_command)
    main.add_command(doctor_command)


_register_subcommands()
