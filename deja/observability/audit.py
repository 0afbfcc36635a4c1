"""The recent admin actions, in memory, for the console's Audit page.

``app/api/admin.py`` writes one JSON line per admin action on the ``deja.audit`` logger (the
durable record, wherever the logs go) and hands the same record here. The ring keeps the last
``SIZE`` of this process, so an operator sees what was just changed without a log pipeline.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

import orjson

audit_log = logging.getLogger("deja.audit")

#: Actions kept.
SIZE = 500


class AuditTrail:
    """A bounded ring of audit records, newest last."""

    def __init__(self, size: int = SIZE) -> None:
        self._records: deque[dict[str, Any]] = deque(maxlen=size)

    def add(self, record: dict[str, Any]) -> None:
        self._records.append(record)

    def write(self, action: str, who: str, **details: Any) -> dict[str, Any]:
        """One action: its JSON line on the ``deja.audit`` logger, and the ring."""
        record = {"at": round(time.time(), 3), "who": who, "action": action, **details}
        audit_log.info(orjson.dumps(record).decode())
        self.add(record)
        return record

    def recent(self, limit: int = 100, action: str | None = None) -> list[dict[str, Any]]:
        """Newest first; ``action`` keeps one kind (``cache.invalidate``) or a family
        (``cache``)."""
        out = []
        for record in reversed(self._records):
            name = str(record.get("action", ""))
            if action is not None and name != action and not name.startswith(action + "."):
                continue
            out.append(record)
            if len(out) >= limit:
                break
        return out
