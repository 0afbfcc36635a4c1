"""``deja keys``: manage client API keys in the local YAML keys file.

Never touches the network; the exit codes are those of :mod:`app.cli_support`
(0 ok, 1 a local file problem, 2 usage error).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import tempfile
from contextlib import suppress
from pathlib import Path
from typing import Any

import click
import yaml

from app.cli_support import _CONTEXT, _CONTROL, AdminError, _table

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
