"""``deja threshold``: read and change θ of a *running* gateway through its admin HTTP API.
Same options and exit codes as ``deja cache`` (:mod:`app.cli.support`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import click

from app.cli.support import CONTEXT, Api, api_options, check_name, table

__all__ = ["threshold_group"]


@click.group("threshold", context_settings=CONTEXT)
def threshold_group() -> None:
    """Read and change the semantic cache's precision target and theta of a running gateway.

    Set a precision target (--precision): the verifier's cut-off follows from the calibration
    table. Theta is the least cosine similarity of a candidate. Each has a global value plus
    optional per-tenant and per-model overrides. Uses DEJA_ADMIN_URL / DEJA_ADMIN_KEY like
    `deja cache`, with the same exit codes.
    """


def _rows(kind: str, data: Mapping[str, Any]) -> list[list[object]]:
    rows: list[list[object]] = [[kind, "global", "-", repr(float(data["global"]))]]
    for scope, field in (("tenant", "tenants"), ("model", "models")):
        overrides = data.get(field) or {}
        rows.extend([kind, scope, name, repr(float(overrides[name]))] for name in sorted(overrides))
    return rows


def _threshold_text(data: Mapping[str, Any]) -> str:
    rows = _rows("theta", data)
    if isinstance(data.get("precision"), Mapping):
        rows = _rows("precision", data["precision"]) + rows
    return table(["SETTING", "SCOPE", "NAME", "VALUE"], rows, right="3")


@threshold_group.command("get", context_settings=CONTEXT)
@api_options
def threshold_get(url: str, key: str, as_json: bool, timeout: float) -> None:
    """Show the global threshold and every per-tenant / per-model override."""
    api = Api(url, key, timeout, as_json)
    api.show(api.call("GET", "/admin/threshold"), _threshold_text)


@threshold_group.command("set", context_settings=CONTEXT)
@click.argument("value", required=False, type=click.FloatRange(0.0, 1.0))
@click.option("--tenant", callback=check_name, help="Set (or --clear) this tenant's override.")
@click.option("--model", callback=check_name, help="Set (or --clear) this model's override.")
@click.option(
    "--clear", is_flag=True, help="Remove the --tenant/--model override instead of setting it."
)
@click.option(
    "--precision",
    "precision",
    is_flag=True,
    help="VALUE is a precision target (about 0.80-0.97), not theta.",
)
@api_options
def threshold_set(
    value: float | None,
    tenant: str | None,
    model: str | None,
    clear: bool,
    precision: bool,
    url: str,
    key: str,
    as_json: bool,
    timeout: float,
) -> None:
    """Set the global theta (or with --precision the precision target) to VALUE (0..1), or a
    --tenant / --model override.

    \b
    Examples:
      deja threshold set --precision 0.95
      deja threshold set --precision 0.97 --tenant acme
      deja threshold set 0.92
      deja threshold set 0.97 --tenant acme
      deja threshold set --clear --model gpt-4o-mini
    """
    if tenant is not None and model is not None:
        raise click.UsageError("give --tenant or --model, not both")
    if clear:
        if value is not None:
            raise click.UsageError("give VALUE or --clear, not both")
        if tenant is None and model is None:
            raise click.UsageError("--clear needs --tenant or --model (the global value stays)")
    elif value is None:
        raise click.UsageError("missing VALUE (a number from 0 to 1), or use --clear")
    elif not math.isfinite(value):
        raise click.BadParameter("must be a number from 0 to 1", param_hint="VALUE")
    body: dict[str, Any]
    if tenant is not None:
        body = {"tenants": {tenant: value}}
    elif model is not None:
        body = {"models": {model: value}}
    else:
        body = {"global": value}
    if precision:
        body = {"precision": body}
    api = Api(url, key, timeout, as_json)
    api.show(api.call("PUT", "/admin/threshold", body=body), _threshold_text)
