"""Log a dependency's outage once, and its recovery once, however many requests hit it."""

from __future__ import annotations

import logging

from deja.errors import describe


class Outage:
    """A latch per dependency: the first failure logs a warning, later ones stay quiet until
    a success logs the recovery. ``what`` names the dependency and the consequence."""

    def __init__(self, log: logging.Logger, what: str, recovered: str) -> None:
        self._log = log
        self._what = what
        self._recovered = recovered
        self.down = False

    def failed(self, exc: BaseException) -> None:
        if not self.down:
            self._log.warning("%s: %s", self._what, describe(exc))
        self.down = True

    def ok(self) -> None:
        if self.down:
            self._log.info("%s", self._recovered)
        self.down = False
