"""Running the gateway under uvicorn: checks that fail in one line before any model is loaded,
then the server on the socket those checks bound."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence

import uvicorn

from app.main import create_app
from app.protocol import connection_cap, guarded_protocol, raise_fd_limit
from app.wiring.semantic import check_targets, verifier_table
from app.wiring.stores import embedded_parts, uses_data_dir_exclusively
from config.problems import Problem
from config.settings import ConfigError, Settings
from deja.datadir import DataDirLock


def preflight(settings: Settings) -> socket.socket:
    """Raise ``DataDirInUseError`` when another process holds the data dir, ``VerifierError``
    when the verifier's files are corrupt (and no fallback is configured), or ``OSError`` when
    the port is taken; else return the bound socket (uvicorn would only find out after the
    lifespan had loaded the models)."""
    if settings.workers > 1 and (blockers := embedded_parts(settings)):
        raise ConfigError.of(
            [
                Problem(
                    settings.written_as("workers"),
                    str(settings.workers),
                    "1, unless every store is shared (DEJA_REDIS_URL, DEJA_QDRANT_URL); "
                    f"this configuration uses {'; '.join(blockers)}",
                )
            ]
        )
    if uses_data_dir_exclusively(settings):
        DataDirLock(settings.data_dir).check_free()
    if (
        settings.cache_enabled
        and settings.semantic_enabled
        and settings.semantic_verifier == "onnx"
        and settings.semantic_verifier_fallback == "refuse"
    ):
        # A corrupt or mismatched verifier, or a target it cannot serve: before loading.
        check_targets(settings, verifier_table(settings)[1])
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((settings.host, settings.port))
    except OSError as exc:
        sock.close()
        raise OSError(
            f"cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}"
        ) from None
    return sock


class AnnouncingServer(uvicorn.Server):
    """Says where the gateway listens once it accepts connections, in every mode: uvicorn logs
    no "running on" line for a socket it is handed, and none at all under ``--log-level
    warning``. The line goes straight to stderr, whatever the log level: it is the one line
    every user of ``deja serve`` needs."""

    def __init__(
        self, config: uvicorn.Config, url: str, worker: str = "", notes: Sequence[str] = ()
    ) -> None:
        super().__init__(config)
        self.url = url
        self.worker = worker
        self.notes = notes

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            lines = [listening_line(self.url, self.worker), *self.notes]
            sys.stderr.write("".join(f"{line}\n" for line in lines))
            sys.stderr.flush()


def listening_line(url: str, worker: str = "") -> str:
    """``deja listening on http://127.0.0.1:8080 (Press CTRL+C to quit)``; ``worker`` names the
    process among ``--workers N``."""
    where = f"{worker}, " if worker else ""
    return f"deja listening on {url} ({where}Press CTRL+C to quit)"


def listen_url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def run_server(
    settings: Settings,
    sock: socket.socket,
    reload: Callable[[], Settings] | None = None,
    worker: str = "",
    notes: Sequence[str] = (),
) -> None:
    """Serve on ``sock`` until interrupted; SIGHUP (or POST /admin/replicas/reload) calls
    ``reload``; ``worker`` names this process in the listening line, ``notes`` follow it (the
    console's URL and key)."""
    cap = connection_cap(settings.max_connections, raise_fd_limit())
    config = uvicorn.Config(
        create_app(settings, reload=reload),
        loop="uvloop",
        # httptools with a header-read deadline and a connection cap (app.protocol).
        http=guarded_protocol(settings.header_timeout_seconds, cap),
        lifespan="on",
        access_log=False,
        log_level=settings.log_level,
        # deja reads no client address, so X-Forwarded-* parsing is pure cost on the hot path.
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=10,
    )
    AnnouncingServer(config, listen_url(sock), worker, notes).run(sockets=[sock])


#: A worker that dies is restarted after this long (not in a tight loop if it dies at once).
RESTART_DELAY_SECONDS = 1.0
log = logging.getLogger("deja.server")


def run_workers(
    settings: Settings,
    sock: socket.socket,
    reload: Callable[[], Settings] | None = None,
    notes: Sequence[str] = (),
) -> None:
    """``settings.workers`` forked processes serving on the one bound ``sock`` (the kernel
    spreads connections over the processes accepting on it). The parent only supervises:
    SIGINT/SIGTERM/SIGHUP go to every worker, and a worker that dies is restarted."""
    if settings.workers <= 1:
        run_server(settings, sock, reload, notes=notes)
        return
    children: dict[int, int] = {}
    stopping = False

    def spawn(slot: int) -> None:
        pid = os.fork()
        if pid == 0:  # the worker: default signal handling, its own event loop
            for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(signum, signal.SIG_DFL)
            code = 0
            try:
                worker = f"worker {slot + 1}/{settings.workers}, pid {os.getpid()}"
                run_server(settings, sock, reload, worker, notes if slot == 0 else ())
            except BaseException:
                log.exception("worker %d failed", slot)
                code = 1
            finally:
                os._exit(code)
        children[pid] = slot

    def forward(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = stopping or signum != signal.SIGHUP
        for pid in list(children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, forward)
    for slot in range(settings.workers):
        spawn(slot)
    log.info("deja supervising %d workers (pids %s)", len(children), sorted(children))
    while children:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        if pid not in children or stopping:
            children.pop(pid, None)
            continue
        slot = children.pop(pid)
        log.warning("worker %d (pid %d) exited with %#x; restarting it", slot, pid, status)
        time.sleep(RESTART_DELAY_SECONDS)
        if not stopping:
            spawn(slot)
