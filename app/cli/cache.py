"""``deja cache``: list, delete and invalidate the entries of a *running* gateway through its
admin HTTP API (``/admin/...``). ``deja threshold`` lives in :mod:`app.cli.threshold`, ``deja
keys`` in :mod:`app.cli.keys`; the shared HTTP client, options and formatting in
:mod:`app.cli.support`.

Exit codes (stable, for shell scripts):

* 0 - success
* 1 - the gateway answered with an error (its ``error.message`` goes to stderr), or a
  local file problem (``keys``)
* 2 - usage error, or a request refused locally before anything was sent
* 3 - the gateway could not be reached (connection refused, DNS failure, timeout)
* 4 - the gateway rejected the admin key (HTTP 401/403)
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import click

from app.cli.support import (
    CONTEXT,
    Api,
    RefusedError,
    api_options,
    bad_shape,
    check_duration,
    check_name,
    entries,
    rate,
    span,
    table,
    truncate,
)
from deja.cache.keys import ENTRY_ID

__all__ = ["cache_group"]

QUESTION_WIDTH = 60
SHORT_ID = 12
MAX_IDS_SHOWN = 100


def _now() -> float:
    return time.time()


@click.group("cache", context_settings=CONTEXT)
def cache_group() -> None:
    """Inspect and invalidate a running gateway's response cache.

    Every command talks to the gateway's admin API: set DEJA_ADMIN_URL and
    DEJA_ADMIN_KEY (or pass --url/--key). Exit codes: 0 ok, 1 the gateway answered
    with an error, 2 usage error or refused locally, 3 gateway unreachable,
    4 admin key rejected.
    """


@cache_group.command("stats", context_settings=CONTEXT)
@api_options
def cache_stats(url: str, key: str, as_json: bool, timeout: float) -> None:
    """Show cache layers and per-tenant hit counts since the gateway started."""
    api = Api(url, key, timeout, as_json)
    api.show(api.call("GET", "/admin/cache/stats"), _stats_text)


_COUNTERS = ("requests", "exact", "semantic", "miss", "bypass", "off")


def _counter_row(name: str, counts: Mapping[str, Any]) -> list[object]:
    values = [int(counts.get(c) or 0) for c in _COUNTERS]
    return [name, *values, rate(values[1] + values[2], values[0])]


def _stats_text(data: Mapping[str, Any]) -> str:
    layers = data["layers"]
    layer_rows = [
        [name, layer.get("backend") or "disabled", layer.get("entries")]
        for name, layer in layers.items()
    ]
    tenants = data.get("tenants") or {}
    rows = [_counter_row(t, tenants[t]) for t in sorted(tenants)]
    rows.append(_counter_row("(all tenants)", data["since_start"]))
    headers = ["TENANT", *(c.upper() for c in _COUNTERS), "HIT RATE"]
    return "\n\n".join(
        [
            table(["LAYER", "BACKEND", "ENTRIES"], layer_rows, right="2"),
            table(headers, rows, right="1234567"),
        ]
    )


@cache_group.command("ls", context_settings=CONTEXT)
@click.option("--tenant", callback=check_name, help="Only this tenant's entries.")
@click.option(
    "--query", "-q", callback=check_name, help="Entries semantically close to this question."
)
@click.option(
    "--limit",
    type=click.IntRange(1, 1000),
    default=20,
    show_default=True,
    help="Maximum number of entries.",
)
@click.option("--full-ids", is_flag=True, help="Show full 64-hex ids (as `deja cache rm` expects).")
@api_options
def cache_ls(
    tenant: str | None,
    query: str | None,
    limit: int,
    full_ids: bool,
    url: str,
    key: str,
    as_json: bool,
    timeout: float,
) -> None:
    """List cached entries; with --query, those semantically closest to it."""
    api = Api(url, key, timeout, as_json)
    params: dict[str, str | int] = {"limit": limit}
    if tenant is not None:
        params["tenant"] = tenant
    if query is not None:
        params["q"] = query
    data = api.call("GET", "/admin/cache/entries", params=params)
    api.show(data, lambda d: _entries_text(d["entries"], full_ids))


def _entries_text(entries: Sequence[Mapping[str, Any]], full_ids: bool) -> str:
    if not entries:
        return "no cache entries"
    now = _now()
    with_similarity = any(e.get("similarity") is not None for e in entries)
    headers = ["ID", "TENANT", "MODEL", "AGE", "EXPIRES IN", "HITS"]
    if with_similarity:
        headers.append("SIMILARITY")
    headers.append("QUESTION")
    rows = []
    for e in entries:
        expires_at = e.get("expires_at")
        if expires_at is None:
            expires = "never"
        elif float(expires_at) <= now:
            expires = "expired"
        else:
            expires = span(float(expires_at) - now)
        row: list[object] = [
            str(e["id"]) if full_ids else str(e["id"])[:SHORT_ID],
            e.get("tenant"),
            e.get("model"),
            span(now - float(e["created_at"])),
            expires,
            int(e.get("hits") or 0),
        ]
        if with_similarity:
            sim = e.get("similarity")
            row.append(None if sim is None else f"{float(sim):.3f}")
        question = e.get("question")
        row.append(None if question is None else truncate(str(question), QUESTION_WIDTH))
        rows.append(row)
    return table(headers, rows, right="3456" if with_similarity else "345")


@cache_group.command("rm", context_settings=CONTEXT)
@click.argument("entry_id", metavar="ID")
@api_options
def cache_rm(entry_id: str, url: str, key: str, as_json: bool, timeout: float) -> None:
    """Delete one cache entry by its full 64-hex id (see `deja cache ls --full-ids`).

    Exits 1 when the gateway does not know the id, 2 when ID is not a full id.
    """
    if ENTRY_ID.fullmatch(entry_id.lower()) is None:
        raise click.BadParameter(
            "must be a full entry id (64 hex characters); `deja cache ls` shows only the "
            "first 12: use `deja cache ls --full-ids` or --json",
            param_hint="ID",
        )
    api = Api(url, key, timeout, as_json)
    data = api.call("DELETE", "/admin/cache/entries/" + entry_id.lower())
    if api.emit(data):
        return
    removed = data.get("id") if isinstance(data, dict) else None
    click.echo(f"removed {removed or entry_id.lower()}")


@cache_group.command("invalidate", context_settings=CONTEXT)
@click.option("--tenant", callback=check_name, help="Only this tenant's entries.")
@click.option("--model", callback=check_name, help="Only entries for this model.")
@click.option("--namespace", callback=check_name, help="Only entries in this namespace.")
@click.option(
    "--older-than",
    metavar="DURATION",
    callback=check_duration,
    help="Only entries created longer ago than this: 90, 90s, 15m, 2h, 7d.",
)
@click.option(
    "--query", "-q", callback=check_name, help="Only entries semantically close to this question."
)
@click.option(
    "--min-similarity",
    type=click.FloatRange(0.0, 1.0),
    help="With --query: the similarity an entry needs to match (0..1).",
)
@click.option("--dry-run", is_flag=True, help="Report what would be removed; remove nothing.")
@api_options
def cache_invalidate(
    tenant: str | None,
    model: str | None,
    namespace: str | None,
    older_than: float | None,
    query: str | None,
    min_similarity: float | None,
    dry_run: bool,
    url: str,
    key: str,
    as_json: bool,
    timeout: float,
) -> None:
    """Remove the cache entries matching ALL the given filters.

    At least one filter is required; to remove everything use `deja cache flush`.
    """
    if min_similarity is not None and query is None:
        raise click.UsageError("--min-similarity needs --query")
    filters: dict[str, Any] = {
        "tenant": tenant,
        "model": model,
        "namespace": namespace,
        "older_than": older_than,
        "query": query,
    }
    body = {name: value for name, value in filters.items() if value is not None}
    if not body:
        raise click.UsageError(
            "give at least one filter (--tenant, --model, --namespace, --older-than, --query); "
            "use `deja cache flush` to remove everything"
        )
    if min_similarity is not None:
        body["min_similarity"] = min_similarity
    if dry_run:
        body["dry_run"] = True
    api = Api(url, key, timeout, as_json)
    data = api.call("POST", "/admin/cache/invalidate", body=body)
    if api.emit(data):
        return
    try:
        count = int(data["count"])
        ids = [str(i) for i in data.get("ids") or []]
        verb = "would remove" if data.get("dry_run", dry_run) else "removed"
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        bad_shape(exc)
    click.echo(f"{verb} {entries(count)}")
    for entry_id in ids[:MAX_IDS_SHOWN]:
        click.echo(f"  {entry_id[:SHORT_ID]}")
    if len(ids) > MAX_IDS_SHOWN:
        click.echo(f"  ... and {len(ids) - MAX_IDS_SHOWN} more (use --json for all ids)")


def _stdin_is_tty() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (AttributeError, ValueError):  # closed or replaced stdin
        return False


@cache_group.command("flush", context_settings=CONTEXT)
@click.option("--tenant", callback=check_name, help="Only this tenant's entries.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@api_options
def cache_flush(
    tenant: str | None, yes: bool, url: str, key: str, as_json: bool, timeout: float
) -> None:
    """Remove EVERY cache entry (or every entry of one tenant).

    Asks for confirmation unless --yes is given; without --yes and without a
    terminal on stdin it refuses (exit 2) rather than guess.
    """
    scope = f"tenant {tenant!r}" if tenant is not None else "ALL tenants"
    if not yes:
        if not _stdin_is_tty():
            raise click.UsageError(
                "refusing to flush without --yes: stdin is not a terminal to confirm on"
            )
        if not click.confirm(f"Remove every cached entry of {scope} at {url}?", default=False):
            raise RefusedError("flush cancelled; nothing was removed")
    api = Api(url, key, timeout, as_json)
    data = api.call("POST", "/admin/cache/flush", body={"tenant": tenant} if tenant else {})
    if api.emit(data):
        return
    try:
        count = int(data["count"])
    except (KeyError, TypeError, ValueError) as exc:
        bad_shape(exc)
    click.echo(f"removed {entries(count)} ({scope})")


# --------------------------------------------------------------------------- deja threshold
