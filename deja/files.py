"""File helpers: content hashes (model files are checked by sha256), and writes that a crash
leaves with either the old or the new content, never a mix."""

from __future__ import annotations

import hashlib
import os
import tempfile
from contextlib import suppress
from pathlib import Path


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_atomic(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``data``: a temp file in the same folder, fsync, rename, fsync the
    folder. ``mode`` (e.g. 0o600) is set before any byte is written; the previous file's owner
    is kept where permitted (a keys file edited via sudo stays readable by the gateway)."""
    target = path.resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        previous = target.stat()
    except FileNotFoundError:
        previous = None
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            if mode is not None:
                os.fchmod(handle.fileno(), mode)
            if previous is not None:
                with suppress(PermissionError):
                    os.fchown(handle.fileno(), previous.st_uid, previous.st_gid)
            handle.write(data)
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
