"""Following the keys file while the gateway runs: a revoked key stops working without a restart.

The gateway polls the file every ``keys_reload_seconds`` (2 s by default) and re-reads it on
SIGHUP. A poll reads the file's bytes off the event loop and compares their sha256 with the
last version read (a few KB every two seconds; a hash, unlike mtime and size, cannot miss an
edit made within one timestamp tick that keeps the size). A changed file is parsed; a good one
becomes the new ``KeyRing``, which the caller swaps in with one assignment, so a request sees
either the old ring or the new one, never a mix. A broken file (bad YAML, a malformed hash, a
missing file) keeps the last good ring and logs one error line, once per broken version.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from deja.errors import ConfigError
from deja.tenancy.keyring import KeyRing, keyring_from_document, parse_keys_document

log = logging.getLogger("deja")


@dataclass(frozen=True, slots=True)
class KeysChange:
    """A new ring read from the file, and what it replaces."""

    ring: KeyRing
    before: KeyRing


class KeysFile:
    """The keys file at ``path`` and the last good ring read from it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.ring = KeyRing(closed=True)
        self._digest: str | None = None
        self._failed: str | None = None
        #: A poll in the follower's thread and one for SIGHUP on the loop never interleave.
        self._lock = threading.Lock()

    def load(self) -> KeyRing:
        """The first read, at start-up: a broken file raises ``ConfigError`` (no gateway
        starts on keys it cannot read)."""
        digest, text = self._read()
        self.ring = self._parse(text)
        self._digest = digest
        return self.ring

    @property
    def failing(self) -> bool:
        """The last read found the file broken (the last good ring is still in use)."""
        return self._failed is not None

    def poll(self, *, repeat_errors: bool = False) -> KeysChange | None:
        """Re-read the file (blocking: call it in a thread, or for a rare SIGHUP). Returns the
        change when the file holds new, valid keys; None when it is unchanged or broken (then
        the last good ring stays, and the failure is logged: once per broken version, or
        every time with ``repeat_errors``)."""
        with self._lock:
            try:
                digest, text = self._read()
                if digest == self._digest:
                    self._failed = None
                    return None
                ring = self._parse(text)
            except ConfigError as exc:
                self._report(exc, repeat_errors)
                return None
            before, self.ring, self._digest, self._failed = self.ring, ring, digest, None
            return KeysChange(ring, before)

    async def follow(self, every: float, install: Callable[[KeyRing], None]) -> None:
        """Poll every ``every`` seconds for the gateway's lifetime; ``install`` runs on the
        event loop with each new ring."""
        while True:
            await asyncio.sleep(every)
            change = await asyncio.to_thread(self.poll)
            if change is not None:
                install(change.ring)
                log_change(self.path, change, "changed")

    def _read(self) -> tuple[str, str]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            raise ConfigError(f"keys file {self.path} does not exist") from None
        except OSError as exc:
            raise ConfigError(f"cannot read keys file {self.path}: {exc.strerror or exc}") from exc
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"keys file {self.path} is not UTF-8 text: {exc}") from exc
        return hashlib.sha256(raw).hexdigest(), text

    def _parse(self, text: str) -> KeyRing:
        ring = keyring_from_document(parse_keys_document(text, self.path), self.path)
        if ring.key_count == 0:
            log.warning("keys file %s holds no keys: every client request gets 401", self.path)
        return ring

    def _report(self, exc: ConfigError, repeat: bool) -> None:
        message = " ".join(str(exc).split())  # YAML errors span lines: one line in the log
        if message == self._failed and not repeat:
            return
        self._failed = message
        log.error(
            "keys file not reloaded, still using the last good keys (%d tenant(s), %d key(s)): %s",
            len(self.ring.tenants),
            self.ring.key_count,
            message,
        )


def log_change(path: Path, change: KeysChange, why: str) -> None:
    """One line saying what a reload changed, in counts (never keys or hashes)."""
    log.info(
        "keys reloaded from %s (%s): %d tenant(s), %d key(s); before: %d tenant(s), %d key(s)",
        path,
        why,
        len(change.ring.tenants),
        change.ring.key_count,
        len(change.before.tenants),
        change.before.key_count,
    )
