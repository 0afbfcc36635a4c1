"""The keys file followed while serving: new keys swap in, a broken file keeps the last keys."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
import yaml

from deja.errors import AuthenticationError, ConfigError
from deja.tenancy.keyring import KeyRing, key_hash, load_keys
from deja.tenancy.keywatch import KeysFile


def write(path: Path, **tenants: list[str]) -> None:
    doc = {
        "tenants": {
            name: {"key_hashes": [key_hash(k) for k in keys]} for name, keys in tenants.items()
        }
    }
    path.write_text(yaml.safe_dump(doc))


def test_a_changed_file_gives_a_new_ring_and_an_unchanged_one_none(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    write(path, acme=["k-a"], beta=["k-b"])
    keys = KeysFile(path)
    ring = keys.load()
    assert ring.authenticate("Bearer k-b").tenant.name == "beta"
    assert keys.poll() is None  # same bytes
    path.write_text(path.read_text())  # rewritten, same content: still nothing to do
    assert keys.poll() is None
    write(path, acme=["k-a"])
    change = keys.poll()
    assert change is not None and change.before is ring and keys.ring is change.ring
    with pytest.raises(AuthenticationError):
        change.ring.authenticate("Bearer k-b")
    assert change.ring.authenticate("Bearer k-a").tenant.name == "acme"


@pytest.mark.parametrize(
    "broken",
    [
        "tenants: [unclosed\n  - x: :\n",  # YAML error spanning several lines
        "tenants: {acme: {key_hashes: [nothex]}}\n",
        "- a list\n",
        None,  # the file is gone
    ],
)
def test_a_broken_file_keeps_the_last_good_keys_and_logs_one_line_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, broken: str | None
) -> None:
    path = tmp_path / "keys.yaml"
    write(path, acme=["k-a"])
    keys = KeysFile(path)
    ring = keys.load()
    if broken is None:
        path.unlink()
    else:
        path.write_text(broken)
    with caplog.at_level(logging.INFO, logger="deja"):
        assert keys.poll() is None
        assert keys.poll() is None  # the same broken version: not logged again
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, caplog.text
    message = errors[0].getMessage()
    assert (
        "\n" not in message and "still using the last good keys (1 tenant(s), 1 key(s))" in message
    )
    assert errors[0].exc_info is None  # a line, not a traceback
    assert keys.failing and keys.ring is ring
    assert keys.ring.authenticate("Bearer k-a").tenant.name == "acme"
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="deja"):
        keys.poll(repeat_errors=True)  # SIGHUP asks explicitly: said again
    assert len(caplog.records) == 1
    write(path, acme=["k-a2"])
    change = keys.poll()
    assert change is not None and not keys.failing
    assert change.ring.authenticate("Bearer k-a2").tenant.name == "acme"


def test_a_keys_file_without_keys_lets_nobody_in(tmp_path: Path) -> None:
    """Revoking the last key must not turn the gateway into an open one."""
    path = tmp_path / "keys.yaml"
    path.write_text("tenants: {}\n")
    ring = load_keys(path)
    assert not ring.open and ring.key_count == 0
    with pytest.raises(AuthenticationError):
        ring.authenticate("Bearer anything")
    with pytest.raises(AuthenticationError):
        ring.authenticate(None)
    assert KeyRing().open  # no keys file at all: open mode, as before


def test_start_up_still_refuses_a_broken_file(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text("tenants: {a: {key_hashes: x}}\n")
    with pytest.raises(ConfigError, match="key_hashes must be a list"):
        KeysFile(path).load()
    with pytest.raises(ConfigError, match="does not exist"):
        KeysFile(tmp_path / "missing.yaml").load()


async def test_follow_installs_each_new_ring(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    write(path, acme=["k-a"])
    keys = KeysFile(path)
    keys.load()
    installed: list[KeyRing] = []
    task = asyncio.create_task(keys.follow(0.02, installed.append))
    try:
        write(path, acme=["k-new"])
        for _ in range(200):
            if installed:
                break
            await asyncio.sleep(0.01)
        assert len(installed) == 1
        assert installed[0].authenticate("Bearer k-new").tenant.name == "acme"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
