"""One gateway process per data directory: its embedded stores (Qdrant Edge's write-ahead log)
are single-writer, so a second process is refused at start-up with one clear line."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from deja.errors import DataDirInUseError

LOCK_FILE = "deja.lock"


class DataDirLock:
    """An exclusive ``flock`` on ``data_dir/deja.lock``, holding the owner's pid. The kernel
    drops it when the process dies, so a crash never leaves a stale lock."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise DataDirInUseError(
                f"data dir {self.path.parent} is in use by another deja process (pid {owner}); "
                "stop it or set DEJA_DATA_DIR to another folder"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None

    def check_free(self) -> None:
        """Raise ``DataDirInUseError`` when another process holds the lock (and hold nothing)."""
        self.acquire()
        self.release()
