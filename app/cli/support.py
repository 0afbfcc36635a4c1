"""Shared plumbing of the operator CLI (``deja cache``, ``deja threshold``, ``deja keys``).

The admin HTTP client and its error handling, the common ``--url/--key/--json/--timeout``
options, table and duration formatting, and duration parsing.

Exit codes (stable, for shell scripts):

* 0 - success
* 1 - the gateway answered with an error (its ``error.message`` goes to stderr), or a
  local file problem (``keys``)
* 2 - usage error, or a request refused locally before anything was sent
* 3 - the gateway could not be reached (connection refused, DNS failure, timeout)
* 4 - the gateway rejected the admin key (HTTP 401/403)
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar
from urllib.parse import urlsplit

import click
import httpx

__all__ = [
    "DEFAULT_URL",
    "EXIT_API_ERROR",
    "EXIT_AUTH",
    "EXIT_OK",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "AdminError",
    "AuthError",
    "BadSettings",
    "RefusedError",
    "UnreachableError",
    "parse_duration",
]

EXIT_OK = 0
EXIT_API_ERROR = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_AUTH = 4

DEFAULT_URL = "http://127.0.0.1:8080"

CONTEXT = {"help_option_names": ["-h", "--help"]}

_F = TypeVar("_F", bound=Callable[..., Any])


class AdminError(click.ClickException):
    """A failure the gateway reported (exit 1); subclasses carry the other exit codes."""

    exit_code = EXIT_API_ERROR


class RefusedError(AdminError):
    """Refused locally before anything was sent (exit 2, as for usage errors)."""

    exit_code = EXIT_USAGE


class BadSettings(click.ClickException):
    """Settings that cannot be used (exit 2), printed as :mod:`config.problems` renders them:
    the setting as the user wrote it, its value, what is allowed, one line each."""

    exit_code = EXIT_USAGE

    def show(self, file: Any = None) -> None:
        click.echo(self.message, err=True)


class UnreachableError(AdminError):
    """The gateway could not be reached (exit 3)."""

    exit_code = EXIT_UNREACHABLE


class AuthError(AdminError):
    """The gateway rejected the admin key (exit 4)."""

    exit_code = EXIT_AUTH


# --------------------------------------------------------------------------- HTTP layer


def admin_client(
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
class Api:
    url: str
    key: str
    timeout: float
    as_json: bool

    def call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int | Sequence[str]] | None = None,
        body: Mapping[str, Any] | None = None,
        content: bytes | None = None,
        content_type: str | None = None,
    ) -> Any:
        """Send one request (a JSON ``body``, or raw ``content`` of ``content_type``); the
        decoded JSON body on 2xx, else an :class:`AdminError`."""
        headers = {"Content-Type": content_type} if content_type else None
        return _decode(
            self._send(method, path, params=params, json=body, content=content, headers=headers)
        )

    def download(self, path: str, params: Mapping[str, str] | None = None) -> bytes:
        """``GET path``'s body as bytes (a file the gateway serves, not JSON) on 2xx, else an
        :class:`AdminError` as for :meth:`call`."""
        response = self._send("GET", path, params=params)
        _check(response)
        return response.content

    def _send(self, method: str, path: str, **request: Any) -> httpx.Response:
        try:
            with admin_client(self.url, self.key, self.timeout) as client:
                return client.request(method, path, **request)
        except httpx.TimeoutException as exc:
            raise UnreachableError(
                f"cannot reach the gateway at {self.url}: timed out after {self.timeout:g}s"
            ) from exc
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
            raise click.UsageError(f"invalid --url {self.url!r}: {exc}") from exc
        except httpx.TransportError as exc:
            reason = str(exc) or type(exc).__name__
            raise UnreachableError(f"cannot reach the gateway at {self.url}: {reason}") from exc

    def emit(self, data: Any) -> bool:
        """Print ``data`` as JSON and return True under ``--json``; else return False."""
        if self.as_json:
            click.echo(json.dumps(data, indent=2, ensure_ascii=False))
        return self.as_json

    def show(self, data: Any, text: Callable[[Any], str]) -> None:
        """``data`` as JSON under ``--json``, else ``text(data)``. A body whose shape ``text``
        cannot read (a newer or older gateway) is an :class:`AdminError` that says to try
        ``--json``, never a traceback."""
        if self.emit(data):
            return
        try:
            shown = text(data)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            bad_shape(exc)
        click.echo(shown)


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


def _auth_hint(status: int) -> str:
    """What to do about a rejected admin key: the key is the gateway's start-up setting, so a
    value exported in this shell only helps when the gateway was started with the same one."""
    if status == 403:
        return (
            " - the gateway must be started with DEJA_ADMIN_KEY set; --key / DEJA_ADMIN_KEY "
            "here must then equal it"
        )
    return (
        " - --key / DEJA_ADMIN_KEY here must equal the DEJA_ADMIN_KEY the gateway was started "
        "with (make run: cat .deja/demo-admin-key)"
    )


def _check(response: httpx.Response) -> None:
    """An :class:`AuthError` on 401/403, an :class:`AdminError` on any other non-2xx."""
    status = response.status_code
    if status in (401, 403):
        raise AuthError(
            f"authentication rejected by the gateway (HTTP {status}): "
            f"{_error_message(response)}{_auth_hint(status)}"
        )
    if not 200 <= status < 300:
        raise AdminError(_error_message(response))


def _decode(response: httpx.Response) -> Any:
    _check(response)
    status = response.status_code
    try:
        return response.json()
    except ValueError as exc:
        raise AdminError(
            f"the gateway answered HTTP {status} with a body that is not JSON"
        ) from exc


def bad_shape(exc: Exception) -> NoReturn:
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


def check_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
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


def output_option(default: str, help: str | None = None) -> Callable[[_F], _F]:
    """``--output FILE``: the JSON file a command writes its result to (``default``, here)."""
    return click.option(
        "--output",
        type=click.Path(dir_okay=False, path_type=Path),
        default=Path(default),
        show_default=True,
        help=help,
    )


def api_options(func: Any) -> Any:
    """--url, --key, --json and --timeout, in that order in --help."""
    for option in (_TIMEOUT_OPTION, _JSON_OPTION, _KEY_OPTION, _URL_OPTION):
        func = option(func)
    return func


# --------------------------------------------------------------------------- formatting

CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def _cell(value: object) -> str:
    return CONTROL.sub(" ", "-" if value is None else str(value))


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], right: str = "") -> str:
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


def span(seconds: float) -> str:
    """A compact duration: 42s, 4m05s, 3h12m, 2d04h."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def truncate(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def entries(n: int) -> str:
    return f"{n} entry" if n == 1 else f"{n} entries"


def rate(hits: int, requests: int) -> str:
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


def check_duration(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
