"""The data disk's free space, and the reserve below which deja writes nothing there.

Qdrant Edge writes its segments through memory maps: when the filesystem under ``data_dir``
fills, the next page it touches is a ``SIGBUS`` and the process dies without a log line
(measured: a 40 MB tmpfs filled to 300 KB free ended a store of 384-dim points after one
write; on a 20 MB filesystem the two empty collections, ~20 MB each, could not be created and
the gateway exited 135). No exception can catch that, so the only defence is not to write:

* at start-up :func:`startup_line` states what the configuration needs (the reserve plus each
  Edge collection still to be created) against what is free, and the composition root leaves
  Edge off when it does not fit;
* while serving, :class:`DiskSpace` is checked before every Edge write (on the store's own
  thread, a ``statvfs`` of ~2 µs) and refreshed every second in the background; below the
  reserve it is *low*: the pipeline stops storing answers, the Edge stores refuse writes with
  ``DiskFullError``, lookups still serve what is stored. It resumes once the free space is
  back above the reserve plus a quarter (hysteresis, so a disk hovering at the line logs one
  transition, not one per write).

Each transition is one log line; the state is in ``/readyz`` (``disk``), ``/admin`` and the
``deja_disk_*`` metrics, read at scrape time.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Iterable
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from deja.errors import DiskFullError

log = logging.getLogger("deja.disk")

MIB = 1024 * 1024
#: What one new, empty Qdrant Edge collection takes on disk: 19.2 MiB measured on tmpfs
#: (its payload indexes are preallocated), with a margin.
EDGE_COLLECTION_BYTES = 24 * MIB
#: How often the background watch re-reads the free space.
WATCH_SECONDS = 1.0


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on ``path``'s filesystem."""
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def _mib(n: int) -> str:
    return f"{n / MIB:.1f} MiB"


class DiskSpace:
    """Whether deja may write under ``path``: free space against a reserve, with hysteresis.

    Thread-safe: the Edge stores check it on their own threads, the watch on the loop's.
    """

    def __init__(self, path: Path, reserve_bytes: int) -> None:
        self.path = path
        self.reserve = reserve_bytes
        self.resume = reserve_bytes + reserve_bytes // 4
        self.free = -1
        self.low = False
        self.skipped = 0
        self._lock = threading.Lock()

    @property
    def writable(self) -> bool:
        """False while the disk is below its reserve (the last reading; no I/O)."""
        return not self.low

    def refresh(self) -> bool:
        """Read the free space, move between ok and low (one log line per move); returns
        whether writing is allowed. An unreadable filesystem counts as low."""
        try:
            free = free_bytes(self.path)
        except OSError as exc:
            free = 0
            why = f"cannot read free space on {self.path}: {exc.strerror or exc}"
        else:
            why = f"{_mib(free)} free on {self.path}, below the reserve of {_mib(self.reserve)}"
        with self._lock:
            self.free = free
            if not self.low and free < self.reserve:
                self.low = True
                log.error("data disk low: %s; storing and indexing paused, serving goes on", why)
            elif self.low and free >= self.resume:
                self.low = False
                log.warning(
                    "data disk ok again: %s free on %s; storing and indexing resumed",
                    _mib(free),
                    self.path,
                )
            return not self.low

    def check(self, what: str) -> None:
        """Raise ``DiskFullError`` unless a write of ``what`` may go ahead (reads the disk)."""
        if not self.refresh():
            with self._lock:
                self.skipped += 1
            raise DiskFullError(
                f"{what} not written: the data disk has {_mib(max(self.free, 0))} free, "
                f"below the reserve of {_mib(self.reserve)}"
            )

    def status(self) -> dict[str, object]:
        """The body of ``/readyz``'s ``disk`` entry and the admin view."""
        return {
            "ok": not self.low,
            "free_bytes": self.free,
            "reserve_bytes": self.reserve,
            "writes_skipped": self.skipped,
        }

    async def watch(self, every: float = WATCH_SECONDS) -> None:
        """Refresh forever (a background task; cancelled at shutdown)."""
        while True:
            await asyncio.to_thread(self.refresh)
            await asyncio.sleep(every)


def startup_line(space: DiskSpace, new_collections: int) -> tuple[bool, str]:
    """Whether the Edge collections still to be created fit above the reserve, and the one
    line that says how much is needed against how much is free."""
    space.refresh()
    need = space.reserve + new_collections * EDGE_COLLECTION_BYTES
    fits = space.free >= need
    line = (
        f"data disk: {_mib(space.free)} free on {space.path}; needs {_mib(need)} "
        f"(reserve {_mib(space.reserve)}"
        + (
            f" + {new_collections} new Qdrant Edge collection(s) × {_mib(EDGE_COLLECTION_BYTES)}"
            if new_collections
            else ""
        )
        + ")"
    )
    if not fits and new_collections:
        line += ": Qdrant Edge (semantic cache, corpora) stays off until restarted with more room"
    return fits, line


class DiskCollector(Collector):
    """``deja_disk_*``, read from the :class:`DiskSpace` at scrape time."""

    def __init__(self, space: DiskSpace) -> None:
        self._space = space

    def collect(self) -> Iterable[Metric]:
        space = self._space
        free = GaugeMetricFamily("deja_disk_free_bytes", "Free bytes on the data dir's disk")
        free.add_metric([], float(max(space.free, 0)))
        reserve = GaugeMetricFamily(
            "deja_disk_reserve_bytes", "Free space kept on the data disk (disk_reserve_mb)"
        )
        reserve.add_metric([], float(space.reserve))
        low = GaugeMetricFamily(
            "deja_disk_low", "1 while the data disk is below its reserve: nothing is stored"
        )
        low.add_metric([], 1.0 if space.low else 0.0)
        skipped = CounterMetricFamily(
            "deja_disk_writes_skipped", "Vector writes refused because the data disk was low"
        )
        skipped.add_metric([], float(space.skipped))
        return [free, reserve, low, skipped]
