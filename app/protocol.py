"""The HTTP protocol ``deja serve`` runs: uvicorn's httptools protocol plus a header-read
deadline and a connection cap (issue 19, finding 4).

uvicorn has neither: its keep-alive timer starts only after a response, so a connection that
sends its headers a byte at a time is held for ever, and ``limit_concurrency`` answers 503 to
requests but still accepts every connection. 1,100 such connections with the open-file limit at
1,024 made every normal request fail, the replica probes fail and the keys file unreadable
("Too many open files"). Here:

* a connection must finish a request's headers within ``header_timeout`` seconds of opening
  (or of its previous response), else it is closed;
* at most ``max_connections`` are open (the server also raises its soft open-file limit and
  keeps the cap below it, so files and replica sockets always find a descriptor); a new
  connection at the cap evicts the one that has waited longest for its headers, so slow
  clients churn among themselves and never lock out a normal one; only when every connection
  is busy with a request is the new one closed.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from deja.observability.throttle import Throttle

log = logging.getLogger("deja.server")
log.addFilter(Throttle(burst=3, window=60.0))
#: Descriptors kept free below the soft limit for everything but client connections.
FD_RESERVE = 256


def raise_fd_limit() -> int:
    """Raise the soft open-file limit to the hard one; returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


def connection_cap(wanted: int, soft_limit: int) -> int:
    """``wanted``, kept ``FD_RESERVE`` descriptors below the open-file limit."""
    return max(16, min(wanted, soft_limit - FD_RESERVE))


class Waiting:
    """One server's connections waiting for a request's headers, oldest first (a dict keeps
    insertion order, so eviction at the cap is O(1) however many slow clients churn), and
    the one timer that closes those past the deadline. One timer per server, not one per
    request: a keep-alive exact hit arms none (``loop.call_later`` and its cancel were ~5%
    of the CPU of a hit); a slow client is closed between ``timeout`` and ``timeout`` plus
    ``SWEEP_SHARE`` of it after it started waiting."""

    #: The sweep runs every this share of the header deadline (at most once a second).
    SWEEP_SHARE = 0.25

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        self.loop = loop
        self.timeout = timeout
        self.every = min(1.0, timeout * self.SWEEP_SHARE)
        self.since: dict[GuardedProtocol, float] = {}
        self._timer: asyncio.TimerHandle | None = None

    def add(self, protocol: GuardedProtocol) -> None:
        since = self.since
        since.pop(protocol, None)
        since[protocol] = time.monotonic()
        if self._timer is None:
            self._timer = self.loop.call_later(self.every, self._sweep)

    def remove(self, protocol: GuardedProtocol) -> None:
        self.since.pop(protocol, None)

    def oldest(self) -> GuardedProtocol | None:
        return next(iter(self.since), None)

    def _sweep(self) -> None:
        self._timer = None
        deadline = time.monotonic() - self.timeout
        late = []
        for protocol, since in self.since.items():
            if since > deadline:
                break
            late.append(protocol)
        for protocol in late:
            del self.since[protocol]
            protocol.headers_too_slow()
        if self.since:
            self._timer = self.loop.call_later(self.every, self._sweep)


class GuardedProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` with the header deadline and the connection cap."""

    header_timeout: float = 10.0
    max_connections: int = 1000

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        waiting: Waiting | None = getattr(self.server_state, "waiting", None)
        if waiting is None:
            waiting = Waiting(self.loop, self.header_timeout)
            self.server_state.waiting = waiting  # type: ignore[attr-defined]
        self._waiting = waiting

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections and not self._evict():
            log.warning("connection cap %d reached: refusing new connections", self.max_connections)
            transport.abort()
            return
        self._waiting.add(self)

    def _evict(self) -> bool:
        """Close the connection that has waited longest for its headers (not this one)."""
        oldest = self._waiting.oldest()
        if oldest is None:
            return False
        self._waiting.remove(oldest)
        oldest.transport.abort()
        return True

    def headers_too_slow(self) -> None:
        """The header deadline passed (``Waiting``'s sweep, which already forgot this one)."""
        if not self.transport.is_closing():
            self.transport.abort()

    def on_headers_complete(self) -> None:
        self._waiting.remove(self)
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        pipelined = bool(self.pipeline)  # the next request's headers are already in
        super().on_response_complete()
        if not pipelined and not self.transport.is_closing():
            self._waiting.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._waiting.remove(self)
        super().connection_lost(exc)


def guarded_protocol(header_timeout: float, max_connections: int) -> type[GuardedProtocol]:
    """The protocol class uvicorn is given (``Config(http=...)``), with these limits."""
    return type(
        "DejaHttpProtocol",
        (GuardedProtocol,),
        {"header_timeout": header_timeout, "max_connections": max_connections},
    )
