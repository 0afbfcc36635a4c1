"""A closed-loop load over HTTP against one OpenAI-compatible replica (vLLM or the simulator):
``concurrency`` streamed ``/v1/completions`` requests in flight, each replaced as it ends.

Each request asks for exactly its output length (``max_tokens`` with vLLM's ``ignore_eos``) on
a prompt of about its prompt length in words, unique from its first word so no prefix is shared.
Times are the client's: TTFT is send → first token chunk, ITL the gap between token chunks.
Figures cover the completions after the first ``warmup``, as in simulated time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import aiohttp
import orjson

from deja.errors import ReplicaError
from sim.virtual import LogHistogram, VirtualRequest

__all__ = ["DriveResult", "drive", "prompt_text"]

_WORDS = (
    "river", "stone", "cloud", "maple", "ember", "quartz", "harbor", "meadow", "lantern",
    "copper", "willow", "summit", "falcon", "cedar", "orbit", "prairie", "garnet", "breeze",
)  # fmt: skip
_MAX_ERRORS_BEFORE_FIRST_SUCCESS = 10


def prompt_text(index: int, tokens: int) -> str:
    """About ``tokens`` words (the simulator counts one token per word), unique from the first."""
    words = [f"r{index}"]
    words.extend(_WORDS[(index + k) % len(_WORDS)] for k in range(max(tokens - 1, 0)))
    return " ".join(words)


@dataclass(slots=True)
class DriveResult:
    """Client-side figures of the measured window."""

    completed: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    ttft: LogHistogram = field(default_factory=LogHistogram)
    itl: LogHistogram = field(default_factory=LogHistogram)
    errors: int = 0
    first_error: str | None = None

    @property
    def throughput(self) -> float:
        return self.output_tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass
class _Load:
    """Shared state of the workers."""

    warmup: int
    target: int
    result: DriveResult = field(default_factory=DriveResult)
    next_index: int = 0
    completed: int = 0
    window_start: float = -1.0
    done: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def measuring(self) -> bool:
        return self.window_start >= 0 and not self.done.is_set()

    def finished_one(self, ttft: float | None, now: float) -> None:
        self.completed += 1
        if self.completed == self.warmup:
            self.window_start = now
        elif self.completed > self.warmup and not self.done.is_set():
            self.result.completed += 1
            if ttft is not None:
                self.result.ttft.add(ttft)
            if self.completed >= self.target:
                self.result.seconds = now - self.window_start
                self.done.set()

    def failed(self, message: str) -> None:
        self.result.errors += 1
        if self.result.first_error is None:
            self.result.first_error = message
        if self.completed == 0 and self.result.errors >= _MAX_ERRORS_BEFORE_FIRST_SUCCESS:
            self.done.set()


async def _one(
    session: aiohttp.ClientSession, url: str, model: str, index: int, r: VirtualRequest, load: _Load
) -> None:
    body = {
        "model": model,
        "prompt": prompt_text(index, r.prompt_len),
        "max_tokens": r.output_len,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
    }
    sent = time.monotonic()
    first: float | None = None
    last = sent
    async with session.post(url, data=orjson.dumps(body)) as resp:
        if resp.status != 200:
            text = (await resp.text())[:200]
            load.failed(f"HTTP {resp.status}: {text}")
            return
        async for line in resp.content:
            if not line.startswith(b"data: {"):
                continue
            now = time.monotonic()
            if b'"text":""' in line or b'"choices":[]' in line:
                continue
            if first is None:
                first = now
            elif load.measuring:
                load.result.itl.add(now - last)
            last = now
            if load.measuring:
                load.result.output_tokens += 1
    load.finished_one(None if first is None else first - sent, time.monotonic())


async def drive(
    base_url: str,
    model: str,
    requests: Sequence[VirtualRequest],
    concurrency: int,
    *,
    measured: int,
    warmup: int,
    session: aiohttp.ClientSession,
) -> DriveResult:
    """Run the load until ``warmup + measured`` requests completed; raise
    :class:`ReplicaError` when the replica fails every request."""
    url = base_url.rstrip("/") + "/v1/completions"
    load = _Load(warmup=warmup, target=warmup + measured)
    if warmup == 0:
        load.window_start = time.monotonic()

    async def worker() -> None:
        while not load.done.is_set():
            index = load.next_index
            load.next_index += 1
            try:
                await _one(session, url, model, index, requests[index % len(requests)], load)
            except (aiohttp.ClientError, TimeoutError) as exc:
                load.failed(f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(0.05)

    workers = [asyncio.create_task(worker()) for _ in range(concurrency)]
    try:
        await load.done.wait()
    finally:
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
    if load.result.completed == 0:
        raise ReplicaError(f"{base_url}: no request succeeded ({load.result.first_error})")
    return load.result
