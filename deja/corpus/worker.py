"""Parsing a document in its own, bounded worker process (issue 19, finding 7).

pypdf is pure Python: in the gateway's process a hostile PDF holds the GIL, and one of 33 KB
(200 pages sharing one content stream) took 205 s of CPU, ran on after its client gave up, was
added anyway, and raised exact-hit p99 from 7.6 to 27.5 ms meanwhile. Here each parse runs in
a fresh ``spawn``ed process (nothing inherited from the gateway's threads), one at a time
(ingest is serialised by the corpora's write lock), with:

* ``max_pages``: a PDF with more pages is refused before any page is read;
* ``cpu_seconds``: ``RLIMIT_CPU`` on the worker; past it the kernel ends the worker and the
  file is refused with that reason;
* cancellation: when the ingest is cancelled (its client went away) the worker is killed.

The chunk cap (``max_chunks``) is applied by the caller, after chunking.
"""

from __future__ import annotations

import asyncio
import io
import multiprocessing
import resource
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from deja.corpus.parsing import parse_document
from deja.corpus.parsing.base import ParsedDocument, detect_format
from deja.errors import DocumentError

#: Wall-clock slack over the CPU budget (start-up of the worker, a busy machine).
WALL_SLACK = 2.0


@dataclass(frozen=True, slots=True)
class ParseLimits:
    max_bytes: int
    max_pages: int = 500
    cpu_seconds: int = 30


def _count_pages(data: bytes) -> int:
    from pypdf import PdfReader

    return len(PdfReader(io.BytesIO(data)).pages)


def parse_bounded(
    name: str, data: bytes, content_type: str | None, limits: ParseLimits
) -> ParsedDocument:
    """Parse with the page cap (in whatever process calls it)."""
    if detect_format(name, content_type) == "pdf":
        try:
            pages = _count_pages(data)
        except Exception:  # a damaged file: parse_document says what is wrong with it
            pages = 0
        if pages > limits.max_pages:
            raise DocumentError(
                f"the PDF has {pages} pages, above the limit of {limits.max_pages} "
                "(corpus_max_pages)"
            )
    return parse_document(name, data, content_type=content_type, max_bytes=limits.max_bytes)


def _child(out: Connection, name: str, data: bytes, ctype: str | None, limits: ParseLimits) -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 1))
    try:
        out.send(("ok", parse_bounded(name, data, ctype, limits)))
    except DocumentError as exc:
        out.send(("refused", exc.message))
    except Exception as exc:  # anything else the parser raised: the file's fault
        out.send(("refused", f"the file cannot be parsed: {exc}"))
    finally:
        out.close()


def _wait(conn: Connection, timeout: float) -> Any:
    if not conn.poll(timeout):
        return ("timeout", None)
    try:
        return conn.recv()
    except EOFError:  # the worker died: over its CPU budget (SIGXCPU) or killed
        return ("died", None)


async def parse_isolated(
    name: str, data: bytes, content_type: str | None, limits: ParseLimits
) -> ParsedDocument:
    """``parse_bounded`` in a fresh worker process; ``DocumentError`` for a file over a limit
    or unparseable, the worker killed when this is cancelled."""
    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send, name, data, content_type, limits), daemon=True)
    try:
        await asyncio.to_thread(proc.start)
        send.close()
        kind, value = await asyncio.to_thread(_wait, receive, limits.cpu_seconds + WALL_SLACK + 10)
    finally:
        if proc.is_alive():
            proc.kill()
        await asyncio.to_thread(proc.join, 5)
        receive.close()
    if kind == "ok":
        parsed: ParsedDocument = value
        return parsed
    if kind == "refused":
        raise DocumentError(str(value))
    raise DocumentError(
        f"parsing took more than {limits.cpu_seconds} s of CPU (corpus_parse_cpu_seconds)"
    )
