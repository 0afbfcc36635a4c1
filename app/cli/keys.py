"""``deja keys``: manage client API keys in the local YAML keys file.

Never touches the network; the exit codes are those of :mod:`app.cli.support`
(0 ok, 1 a local file problem, 2 usage error).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from pathlib import Path
from typing import Any

import click
import yaml

from app.cli.support import CONTEXT, CONTROL, AdminError, table
from config.settings import ConfigError
from deja.files import write_atomic
from deja.tenancy.keyring import read_keys_document

__all__ = ["keys_group"]

DEFAULT_KEYS_FILE = "deja-keys.yaml"
KEY_PREFIX = "dj-"

_KEYS_FILE_OPTION = click.option(
    "--keys-file",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="DEJA_KEYS_FILE",
    default=DEFAULT_KEYS_FILE,
    show_default=True,
    show_envvar=True,
    help="YAML file of tenants and their client key hashes.",
)


@click.group("keys", context_settings=CONTEXT)
def keys_group() -> None:
    """Manage client API keys in the local keys file (no gateway needed).

    The file stores only sha256 hashes of keys, per tenant, next to per-tenant
    settings (cache, ttl_seconds, threshold, rate_limit_rpm), which are preserved.
    """


def _load_keys_file(path: Path, *, missing_ok: bool) -> tuple[dict[str, Any], str]:
    try:
        return read_keys_document(path, missing_ok=missing_ok)
    except ConfigError as exc:
        raise AdminError(str(exc)) from exc


_COMMENT = re.compile(r"(^|\s)#", re.MULTILINE)


def _new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


@keys_group.command("add", context_settings=CONTEXT)
@click.argument("tenant")
@_KEYS_FILE_OPTION
def keys_add(tenant: str, keys_file: Path) -> None:
    """Create a new client API key for TENANT and store its sha256 in the keys file.

    The key is printed ONCE, alone on stdout (KEY=$(deja keys add acme) works); it
    cannot be shown again. The file and the tenant are created when missing; other
    tenants and settings are kept. The file is rewritten atomically with mode 0600.
    YAML comments in the file are not preserved.
    """
    if not tenant or tenant != tenant.strip() or CONTROL.search(tenant):
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
        write_atomic(keys_file, text.encode(), mode=0o600)
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


@keys_group.command("list", context_settings=CONTEXT)
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
    click.echo(table(["TENANT", "KEYS", "HASH PREFIXES", "SETTINGS"], rows, right="1"))
