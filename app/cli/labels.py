"""``deja labels``: the pairs ops labelled "same" or "different" in the console, read from a
*running* gateway through its admin HTTP API; ``export`` writes them as ``deja calibrate
--pairs FILE`` reads them. Same options and exit codes as ``deja cache``
(:mod:`app.cli.support`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from app.cli.support import CONTEXT, AdminError, Api, api_options, check_name, table, truncate
from deja.files import write_atomic

__all__ = ["labels_group"]


@click.group("labels", context_settings=CONTEXT)
def labels_group() -> None:
    """The question pairs ops labelled in the console (Entries > Near misses, Served, and the
    Quality page's preview).

    Each pair is a question asked and the cached question it was, or nearly was, served;
    "same" means one answer serves both. Export them to recalibrate the verifier on your own
    traffic: `deja labels export --out pairs.jsonl`, then `deja calibrate --pairs pairs.jsonl`.
    Uses DEJA_ADMIN_URL / DEJA_ADMIN_KEY like `deja cache`, with the same exit codes.
    """


def _labels_text(data: dict[str, Any]) -> str:
    rows = [
        [x["label"], x["tenant"], truncate(x["question"], 40), truncate(x["cached_question"], 40)]
        for x in data["labels"]
    ]
    head = f"{data['total']} labelled pair(s), {data['same']} same"
    if not rows:
        return head
    return head + "\n" + table(["LABEL", "TENANT", "ASKED", "CACHED"], rows)


@labels_group.command("list", context_settings=CONTEXT)
@click.option("--tenant", callback=check_name, help="Only this tenant's pairs.")
@click.option(
    "--limit", type=click.IntRange(1, 10_000), default=20, show_default=True, help="Rows shown."
)
@api_options
def labels_list(
    tenant: str | None, limit: int, url: str, key: str, as_json: bool, timeout: float
) -> None:
    """List the labelled pairs, newest first."""
    api = Api(url, key, timeout, as_json)
    params: dict[str, str | int] = {"limit": limit}
    if tenant is not None:
        params["tenant"] = tenant
    api.show(api.call("GET", "/admin/semantic/labels", params=params), _labels_text)


@labels_group.command("export", context_settings=CONTEXT)
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help='File to write: JSONL, {"a": cached, "b": asked, "duplicate": true|false} a line, '
    "the format `deja calibrate --pairs` reads. Replaced atomically.",
)
@click.option("--tenant", callback=check_name, help="Only this tenant's pairs.")
@api_options
def labels_export(
    out: Path, tenant: str | None, url: str, key: str, as_json: bool, timeout: float
) -> None:
    """Write every labelled pair to --out for `deja calibrate --pairs`. Nothing is written (exit
    1) when the gateway has no labelled pair yet."""
    api = Api(url, key, timeout, as_json)
    body = api.download("/admin/semantic/labels/export", {"tenant": tenant} if tenant else None)
    lines = [line for line in body.decode().splitlines() if line.strip()]
    if not lines:
        scope = f" of tenant {tenant!r}" if tenant else ""
        raise AdminError(f"the gateway has no labelled pairs{scope} yet: nothing written")
    write_atomic(out, body)
    same = sum(json.loads(line)["duplicate"] is True for line in lines)
    summary = {"out": str(out), "pairs": len(lines), "same": same, "different": len(lines) - same}
    if not api.emit(summary):
        click.echo(
            f"wrote {len(lines)} labelled pair(s) ({same} same, {len(lines) - same} different) "
            f"to {out}\nnext: deja calibrate --pairs {out}"
        )
