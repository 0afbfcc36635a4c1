"""What ``deja serve`` says at start-up beyond "listening on": where the console is and which
admin key opens it.

In demo mode (``--demo`` with no replicas: ``make run``) with no ``DEJA_ADMIN_KEY``, a key is
generated once and kept in the data dir (``demo-admin-key``, mode 0600), so the console and the
admin CLI work in one step; it is printed the run it is made and referred to by path after
that. Outside demo mode nothing is generated: the console line says how to set a key.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from config.settings import Settings

__all__ = ["CONSOLE_PATH", "DEMO_KEY_FILE", "console_notes", "demo_admin_key"]

DEMO_KEY_FILE = "demo-admin-key"
CONSOLE_PATH = "/admin/ui/"


def demo_admin_key(data_dir: Path) -> tuple[str, bool]:
    """The demo's admin key from ``data_dir``, made (and True) when there was none."""
    path = data_dir / DEMO_KEY_FILE
    try:
        key = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        key = ""
    if key:
        return key, False
    data_dir.mkdir(parents=True, exist_ok=True)
    key = f"dj-demo-admin-{secrets.token_urlsafe(18)}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(key + "\n")
    return key, True


def uses_demo_key(settings: Settings) -> bool:
    """Whether this start gets the generated demo key (demo mode, no key of the user's)."""
    return settings.demo and not settings.replicas and settings.admin_key is None


def console_notes(url: str, settings: Settings, generated: tuple[str, bool] | None) -> list[str]:
    """The lines printed under "deja listening on": the console's URL and its key."""
    console = f"console: {url}{CONSOLE_PATH}"
    if generated is not None:
        key, fresh = generated
        path = settings.data_dir / DEMO_KEY_FILE
        use = f"export DEJA_ADMIN_KEY=$(cat {path})"
        if fresh:
            return [
                f"{console}  admin key: {key}",
                f"  (generated for this demo and shown once; kept in {path}; for the CLI: {use})",
            ]
        return [f"{console}  admin key: in {path} (for the CLI: {use})"]
    if settings.admin_key is not None:
        return [f"{console}  (sign in with the DEJA_ADMIN_KEY this gateway was started with)"]
    return [
        f"{console} is off: no admin key. Restart with DEJA_ADMIN_KEY=<a long random string> "
        "to use the console and the admin CLI"
    ]
