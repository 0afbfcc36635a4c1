"""``deja cache``, ``deja threshold`` and ``deja keys``: the operator's command line.

``cache`` and ``threshold`` talk to a *running* gateway's admin HTTP API (``/admin/...``);
``keys`` edits the local YAML keys file and never touches the network.

Exit codes (stable, for shell scripts):

* 0 - success
* 1 - the gateway answered with an error (its ``error.message`` goes to stderr), or a
  local file problem (``keys``)
* 2 - usage error, or a request refused locally before anything was sent
* 3 - the gateway could not be reached (connection refused, DNS failure, timeout)
* 4 - the gateway rejected the admin key (HTTP 401/403)
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import secrets
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

import click
import httpx
import yaml

__all__ = [
    "EXIT_API_ERROR",
    "EXIT_AUTH",
    "EXIT_OK",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "cache_group",
    "keys_group",
    "parse_duration",
    "threshold_group",
]

EXIT_OK = 0
EXIT_API_ERROR = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_AUTH = 4

DEFAULT_URL = "http://127.0.0.1:8080"
DEFAULT_KEYS_FILE = "deja-keys.yaml"
QUESTION_WIDTH = 60
SHORT_ID = 12
MAX_IDS_SHOWN = 100
KEY_PREFIX = "dj-"

_CONTEXT = {"help_option_names": ["-h", "--help"]}


class AdminError(click.ClickException):
    """A failure the gateway reported (exit 1); subclasses carry the other exit codes."""

    exit_code = EXIT_API_ERROR


class RefusedError(AdminError):
    """Refused locally before anything was sent (exit 2, as for usage errors)."""

    exit_code = EXIT_USAGE


class UnreachableError(AdminError):
    """The gateway could not be reached (exit 3)."""

    exit_code = EXIT_UNREACHABLE


class AuthError(AdminError):
    """The gateway rejected the admin key (exit 4)."""

    exit_code = EXIT_AUTH


# --------------------------------------------------------------------------- HTTP layer


def _client(
    url: str, key: str, timeout: float, transport: httpx.BaseTransport | None = None
) -> httpx.Client:
    """The one place an HTTP client is built (unit tests pass a ``MockTransport``)."""
    return httpx.Client(
        base_url=url,
        headers={
            "Authorization": f"Bearer {key}",
            "Accept": "application/json",
            "User-Agent": "deja-admin-cli",
        },
        timeout=timeout,
        transport=transport,
        follow_redirects=False,
    )


@dataclass(frozen=True)
class _Api:
    url: str
    key: str
    timeout: float
    as_json: bool

    def call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int] | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> Any:
        """Send one request; the decoded JSON body on 2xx, else an :class:`AdminError`."""
        try:
            with _client(self.url, self.key, self.timeout) as client:
                response = client.request(method, path, params=params, json=body)
        except httpx.TimeoutException as exc:
            raise UnreachableError(
                f"cannot reach the gateway at {self.url}: timed out after {self.timeout:g}s"
            ) from exc
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
            raise click.UsageError(f"invalid --url {self.url!r}: {exc}") from exc
        except httpx.TransportError as exc:
            reason = str(exc) or type(exc).__name__
            raise UnreachableError(f"cannot reach the gateway at {self.url}: {reason}") from exc
        return _decode(response)

    def emit(self, data: Any) -> bool:
        """Print ``data`` as JSON and return True under ``--json``; else return False."""
        if self.as_json:
            click.echo(json.dumps(data, indent=2, ensure_ascii=False))
        return self.as_json


def _error_message(response: httpx.Response) -> str:
    """``error.message`` from an OpenAI-shaped error body, else a short description."""
    try:
        message = response.json()["error"]["message"]
        if isinstance(message, str) and message:
            return message
    except (ValueError, KeyError, TypeError):
        pass
    text = " ".join(response.text.split())[:200]
    status = f"HTTP {response.status_code} {response.reason_phrase}".strip()
    return f"{status}: {text}" if text else status


def _decode(response: httpx.Response) -> Any:
    status = response.status_code
    if status in (401, 403):
        raise AuthError(
            f"authentication rejected by the gateway (HTTP {status}): "
            f"{_error_message(response)} - check --key / DEJA_ADMIN_KEY"
        )
    if not 200 <= status < 300:
        raise AdminError(_error_message(response))
    try:
        return response.json()
    except ValueError as exc:
        raise AdminError(
            f"the gateway answered HTTP {status} with a body that is not JSON"
        ) from exc


def _bad_shape(exc: Exception) -> NoReturn:
    raise AdminError(
        f"unexpected response from the gateway ({type(exc).__name__}: {exc}); try --json"
    ) from exc


# --------------------------------------------------------------------------- options


def _check_url(ctx: click.Context, param: click.Parameter, value: str) -> str:
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise click.BadParameter("must be an http:// or https:// URL, e.g. " + DEFAULT_URL)
    return value.strip().rstrip("/")


def _check_key(ctx: click.Context, param: click.Parameter, value: str) -> str:
    # Never include the value in a message: it is a secret.
    if not value or value != value.strip() or any(not " " <= c <= "~" for c in value):
        raise click.BadParameter("must be non-empty printable ASCII without surrounding spaces")
    return value


def _check_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise click.BadParameter("must not be empty")
    return value


_URL_OPTION = click.option(
    "--url",
    envvar="DEJA_ADMIN_URL",
    default=DEFAULT_URL,
    show_default=True,
    show_envvar=True,
    callback=_check_url,
    help="Base URL of the running gateway.",
)
_KEY_OPTION = click.option(
    "--key",
    envvar="DEJA_ADMIN_KEY",
    required=True,
    show_envvar=True,
    callback=_check_key,
    help="Admin bearer key. Prefer the environment variable: a flag shows up in `ps` "
    "and shell history.",
)
_JSON_OPTION = click.option(
    "--json", "as_json", is_flag=True, help="Print the gateway's JSON response (for scripts)."
)
_TIMEOUT_OPTION = click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=10.0,
    show_default=True,
    help="Seconds to wait for the gateway.",
)


def _api_options(func: Any) -> Any:
    """--url, --key, --json and --timeout, in that order in --help."""
    for option in (_TIMEOUT_OPTION, _JSON_OPTION, _KEY_OPTION, _URL_OPTION):
        func = option(func)
    return func


# --------------------------------------------------------------------------- formatting

_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def _cell(value: object) -> str:
    return _CONTROL.sub(" ", "-" if value is None else str(value))


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]], right: str = "") -> str:
    """Aligned columns; a column whose index digit appears in ``right`` is right-aligned."""
    cells = [[_cell(h) for h in headers], *[[_cell(v) for v in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        parts = [
            value.rjust(widths[i]) if str(i) in right else value.ljust(widths[i])
            for i, value in enumerate(row)
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def _now() -> float:
    return time.time()


def _span(seconds: float) -> str:
    """A compact duration: 42s, 4m05s, 3h12m, 2d04h."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _truncate(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def _entries(n: int) -> str:
    return f"{n} entry" if n == 1 else f"{n} entries"


def _rate(hits: int, requests: int) -> str:
    return f"{100.0 * hits / requests:.1f}%" if requests else "-"


# --------------------------------------------------------------------------- durations

_DURATION = re.compile(r"^(\d+(?:\.\d+)?|\.\d+)\s*([smhd]?)$")
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``2h``, ``7d`` (decimals allowed) -> seconds (> 0)."""
    match = _DURATION.match(text.strip())
    if match is None:
        raise ValueError(f"invalid duration {text!r}: use e.g. 90, 90s, 15m, 2h or 7d")
    seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"invalid duration {text!r}: must be greater than zero")
    return seconds


def _check_duration(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


# --------------------------------------------------------------------------- deja cache


@click.group("cache", context_settings=_CONTEXT)
def cache_group() -> None:
    """Inspect and invalidate a running gateway's response cache.

    Every command talks to the gateway's admin API: set DEJA_ADMIN_URL and
    DEJA_ADMIN_KEY (or pass --url/--key). Exit codes: 0 ok, 1 the gateway answered
    with an error, 2 usage error or refused locally, 3 gateway unreachable,
    4 admin key rejected.
    """


@cache_group.command("stats", context_settings=_CONTEXT)
@_api_options
def cache_stats(url: str, key: str, as_json: bool, timeout: float) -> None:
    """Show cache layers and per-tenant hit counts since the gateway started."""
    api = _Api(url, key, timeout, as_json)
    data = api.call("GET", "/admin/cache/stats")
    if api.emit(data):
        return
    try:
        click.echo(_stats_text(data))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        _bad_shape(exc)


_COUNTERS = ("requests", "exact", "semantic", "miss", "bypass", "off")


def _counter_row(name: str, counts: Mapping[str, Any]) -> list[object]:
    values = [int(counts.get(c) or 0) for c in _COUNTERS]
    return [name, *values, _rate(values[1] + values[2], values[0])]


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
            _table(["LAYER", "BACKEND", "ENTRIES"], layer_rows, right="2"),
            _table(headers, rows, right="1234567"),
        ]
    )


@cache_group.command("ls", context_settings=_CONTEXT)
@click.option("--tenant", callback=_check_name, help="Only this tenant's entries.")
@click.option(
    "--query", "-q", callback=_check_name, help="Entries semantically close to this question."
)
@click.option(
    "--limit",
    type=click.IntRange(1, 1000),
    default=20,
    show_default=True,
    help="Maximum number of entries.",
)
@click.option("--full-ids", is_flag=True, help="Show full 64-hex ids (as `deja cache rm` expects).")
@_api_options
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
    api = _Api(url, key, timeout, as_json)
    params: dict[str, str | int] = {"limit": limit}
    if tenant is not None:
        params["tenant"] = tenant
    if query is not None:
        params["q"] = query
    data = api.call("GET", "/admin/cache/entries", params=params)
    if api.emit(data):
        return
    try:
        click.echo(_entries_text(data["entries"], full_ids))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        _bad_shape(exc)


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
            expires = _span(float(expires_at) - now)
        row: list[object] = [
            str(e["id"]) if full_ids else str(e["id"])[:SHORT_ID],
            e.get("tenant"),
            e.get("model"),
            _span(now - float(e["created_at"])),
            expires,
            int(e.get("hits") or 0),
        ]
        if with_similarity:
            sim = e.get("similarity")
            row.append(None if sim is None else f"{float(sim):.3f}")
        question = e.get("question")
        row.append(None if question is None else _truncate(str(question), QUESTION_WIDTH))
        rows.append(row)
    return _table(headers, rows, right="3456" if with_similarity else "345")


_ENTRY_ID = re.compile(r"[0-9a-fA-F]{64}")


@cache_group.command("rm", context_settings=_CONTEXT)
@click.argument("entry_id", metavar="ID")
@_api_options
def cache_rm(entry_id: str, url: str, key: str, as_json: bool, timeout: float) -> None:
    """Delete one cache entry by its full 64-hex id (see `deja cache ls --full-ids`).

    Exits 1 when the gateway does not know the id, 2 when ID is not a full id.
    """
    if _ENTRY_ID.fullmatch(entry_id) is None:
        raise click.BadParameter(
            "must be a full entry id (64 hex characters); `deja cache ls` shows only the "
            "first 12: use `deja cache ls --full-ids` or --json",
            param_hint="ID",
        )
    api = _Api(url, key, timeout, as_json)
    data = api.call("DELETE", "/admin/cache/entries/" + entry_id.lower())
    if api.emit(data):
        return
    removed = data.get("id") if isinstance(data, dict) else None
    click.echo(f"removed {removed or entry_id.lower()}")


@cache_group.command("invalidate", context_settings=_CONTEXT)
@click.option("--tenant", callback=_check_name, help="Only this tenant's entries.")
@click.option("--model", callback=_check_name, help="Only entries for this model.")
@click.option("--namespace", callback=_check_name, help="Only entries in this namespace.")
@click.option(
    "--older-than",
    metavar="DURATION",
    callback=_check_duration,
    help="Only entries created longer ago than this: 90, 90s, 15m, 2h, 7d.",
)
@click.option(
    "--query", "-q", callback=_check_name, help="Only entries semantically close to this question."
)
@click.option(
    "--min-similarity",
    type=click.FloatRange(0.0, 1.0),
    help="With --query: the similarity an entry needs to match (0..1).",
)
@click.option("--dry-run", is_flag=True, help="Report what would be removed; remove nothing.")
@_api_options
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
    api = _Api(url, key, timeout, as_json)
    data = api.call("POST", "/admin/cache/invalidate", body=body)
    if api.emit(data):
        return
    try:
        count = int(data["count"])
        ids = [str(i) for i in data.get("ids") or []]
        verb = "would remove" if data.get("dry_run", dry_run) else "removed"
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        _bad_shape(exc)
    click.echo(f"{verb} {_entries(count)}")
    for entry_id in ids[:MAX_IDS_SHOWN]:
        click.echo(f"  {entry_id[:SHORT_ID]}")
    if len(ids) > MAX_IDS_SHOWN:
        click.echo(f"  ... and {len(ids) - MAX_IDS_SHOWN} more (use --json for all ids)")


def _stdin_is_tty() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (AttributeError, ValueError):  # closed or replaced stdin
        return False


@cache_group.command("flush", context_settings=_CONTEXT)
@click.option("--tenant", callback=_check_name, help="Only this tenant's entries.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@_api_options
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
    api = _Api(url, key, timeout, as_json)
    data = api.call("POST", "/admin/cache/flush", body={"tenant": tenant} if tenant else {})
    if api.emit(data):
        return
    try:
        count = int(data["count"])
    except (KeyError, TypeError, ValueError) as exc:
        _bad_shape(exc)
    click.echo(f"removed {_entries(count)} ({scope})")


# --------------------------------------------------------------------------- deja threshold


@click.group("threshold", context_settings=_CONTEXT)
def threshold_group() -> None:
    """Read and change the semantic-cache similarity threshold (theta) of a running gateway.

    A semantic hit needs similarity >= theta. There is a global value plus optional
    per-tenant and per-model overrides. Uses DEJA_ADMIN_URL / DEJA_ADMIN_KEY like
    `deja cache`, with the same exit codes.
    """


def _threshold_text(data: Mapping[str, Any]) -> str:
    rows: list[list[object]] = [["global", "-", repr(float(data["global"]))]]
    for scope, field in (("tenant", "tenants"), ("model", "models")):
        overrides = data.get(field) or {}
        rows.extend([scope, name, repr(float(overrides[name]))] for name in sorted(overrides))
    return _table(["SCOPE", "NAME", "THRESHOLD"], rows, right="2")


def _show_threshold(api: _Api, data: Any) -> None:
    if api.emit(data):
        return
    try:
        click.echo(_threshold_text(data))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        _bad_shape(exc)


@threshold_group.command("get", context_settings=_CONTEXT)
@_api_options
def threshold_get(url: str, key: str, as_json: bool, timeout: float) -> None:
    """Show the global threshold and every per-tenant / per-model override."""
    api = _Api(url, key, timeout, as_json)
    _show_threshold(api, api.call("GET", "/admin/threshold"))


@threshold_group.command("set", context_settings=_CONTEXT)
@click.argument("value", required=False, type=click.FloatRange(0.0, 1.0))
@click.option("--tenant", callback=_check_name, help="Set (or --clear) this tenant's override.")
@click.option("--model", callback=_check_name, help="Set (or --clear) this model's override.")
@click.option(
    "--clear", is_flag=True, help="Remove the --tenant/--model override instead of setting it."
)
@_api_options
def threshold_set(
    value: float | None,
    tenant: str | None,
    model: str | None,
    clear: bool,
    url: str,
    key: str,
    as_json: bool,
    timeout: float,
) -> None:
    """Set the global threshold to VALUE (0..1), or a --tenant / --model override.

    \b
    Examples:
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
    api = _Api(url, key, timeout, as_json)
    _show_threshold(api, api.call("PUT", "/admin/threshold", body=body))


# --------------------------------------------------------------------------- deja keys

_KEYS_FILE_OPTION = click.option(
    "--keys-file",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="DEJA_KEYS_FILE",
    default=DEFAULT_KEYS_FILE,
    show_default=True,
    show_envvar=True,
    help="YAML file of tenants and their client key hashes.",
)


@click.group("keys", context_settings=_CONTEXT)
def keys_group() -> None:
    """Manage client API keys in the local keys file (no gateway needed).

    The file stores only sha256 hashes of keys, per tenant, next to per-tenant
    settings (cache, ttl_seconds, threshold, rate_limit_rpm), which are preserved.
    """


def _load_keys_file(path: Path, *, missing_ok: bool) -> tuple[dict[str, Any], str]:
    """The parsed, shape-checked keys file and its text ("" when missing and allowed)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if missing_ok:
            return {"tenants": {}}, ""
        raise AdminError(
            f"keys file {path} does not exist (create it with `deja keys add TENANT`)"
        ) from None
    except OSError as exc:
        raise AdminError(f"cannot read keys file {path}: {exc.strerror or exc}") from exc
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise AdminError(f"keys file {path} is not valid YAML: {exc}") from exc
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise AdminError(f"keys file {path}: the top level must be a mapping")
    tenants = doc.setdefault("tenants", {})
    if tenants is None:
        tenants = doc["tenants"] = {}
    if not isinstance(tenants, dict):
        raise AdminError(f"keys file {path}: `tenants` must be a mapping of tenant -> settings")
    for name, entry in tenants.items():
        if entry is not None and not isinstance(entry, dict):
            raise AdminError(f"keys file {path}: tenant {name!r} must be a mapping")
        hashes = (entry or {}).get("key_hashes")
        if hashes is not None and not isinstance(hashes, list):
            raise AdminError(f"keys file {path}: {name}.key_hashes must be a list")
    return doc, text


def _write_private(path: Path, text: str) -> None:
    """Replace ``path`` atomically with a 0600 file holding ``text``."""
    target = path.resolve()
    try:
        previous = target.stat()
    except FileNotFoundError:
        previous = None
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), 0o600)
            if previous is not None:
                # Keep the owner the gateway reads it as (e.g. when run via sudo).
                with suppress(PermissionError):
                    os.fchown(handle.fileno(), previous.st_uid, previous.st_gid)
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    with suppress(OSError):
        dir_fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


_COMMENT = re.compile(r"(^|\s)#", re.MULTILINE)


def _new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


@keys_group.command("add", context_settings=_CONTEXT)
@click.argument("tenant")
@_KEYS_FILE_OPTION
def keys_add(tenant: str, keys_file: Path) -> None:
    """Create a new client API key for TENANT and store its sha256 in the keys file.

    The key is printed ONCE, alone on stdout (KEY=$(deja keys add acme) works); it
    cannot be shown again. The file and the tenant are created when missing; other
    tenants and settings are kept. The file is rewritten atomically with mode 0600.
    YAML comments in the file are not preserved.
    """
    if not tenant or tenant != tenant.strip() or _CONTROL.search(tenant):
        raise click.BadParameter(
            "must be non-empty, without surrounding spaces or control characters",
            param_hint="TENANT",
        )
    doc, old_text = _load_keys_file(keys_file, missing_ok=True)
    tenants: dict[str, Any] = doc["tenants"]
    entry = tenants.get(tenant)
    if entry is None:
        entry = tenants[tenant] = {}
    hashes: list[Any] | None = entry.get("key_hashes")
    if hashes is None:
        hashes = entry["key_hashes"] = []
    key = _new_key()
    digest = hashlib.sha256(key.encode()).hexdigest()
    hashes.append(digest)
    text = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, allow_unicode=True)
    try:
        _write_private(keys_file, text)
    except OSError as exc:
        raise AdminError(f"cannot write keys file {keys_file}: {exc.strerror or exc}") from exc
    click.echo(key)
    if _COMMENT.search(old_text):
        click.echo(f"note: comments in {keys_file} were not preserved", err=True)
    count = f"{len(hashes)} key" if len(hashes) == 1 else f"{len(hashes)} keys"
    click.echo(
        f"New key for tenant {tenant!r} (sha256 {digest[:8]}..., {count} now) saved to "
        f"{keys_file}. Store it now: it cannot be shown again.",
        err=True,
    )


@keys_group.command("list", context_settings=_CONTEXT)
@_KEYS_FILE_OPTION
def keys_list(keys_file: Path) -> None:
    """List tenants, how many keys each has (hash prefixes only) and their settings."""
    doc, _ = _load_keys_file(keys_file, missing_ok=False)
    tenants: dict[str, Any] = doc["tenants"]
    if not tenants:
        click.echo(f"no tenants in {keys_file}")
        return
    rows = []
    for name in sorted(tenants, key=str):
        entry = tenants[name] or {}
        hashes = [str(h) for h in entry.get("key_hashes") or []]
        settings = ", ".join(f"{k}={v}" for k, v in entry.items() if k != "key_hashes")
        prefixes = " ".join(h[:8] for h in hashes)
        rows.append([name, len(hashes), prefixes or None, settings or None])
    click.echo(_table(["TENANT", "KEYS", "HASH PREFIXES", "SETTINGS"], rows, right="1"))
