"""A log filter that bounds the lines one kind of message may write per window.

A rejected or failing request must never be able to write unbounded log: before issue 19 a
keyless ``wrk -c8`` on ``/admin/cache/stats`` wrote 8 MiB in 10 s. Lines are counted per
(logger, message template); past ``burst`` in one ``window`` the rest are dropped, and the
first line of the next window says how many were.
"""

from __future__ import annotations

import logging
import threading
import time


class Throttle(logging.Filter):
    """At most ``burst`` records per message template per ``window`` seconds."""

    def __init__(self, burst: int = 10, window: float = 10.0) -> None:
        super().__init__()
        self.burst = burst
        self.window = window
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], tuple[float, int, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, str(record.msg))
        now = time.monotonic()
        with self._lock:
            start, sent, dropped = self._counts.get(key, (now, 0, 0))
            if now - start >= self.window:
                if dropped:
                    record.msg = f"{record.msg} [{dropped} similar line(s) suppressed]"
                start, sent, dropped = now, 0, 0
            if sent >= self.burst:
                self._counts[key] = (start, sent, dropped + 1)
                return False
            if len(self._counts) > 1024:  # templates are few; never let the table grow
                self._counts.clear()
            self._counts[key] = (start, sent + 1, dropped)
            return True
