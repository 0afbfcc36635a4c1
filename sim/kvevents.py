"""The simulated replica's KV-cache event publisher: vLLM's ``ZmqEventPublisher``
(``vllm/distributed/kv_events.py``) for the events of :mod:`sim.blocks`.

Behind vLLM's flag, ``--kv-events-config`` (the same JSON keys: ``enable_kv_cache_events``,
``publisher`` ``"zmq"``, ``endpoint``, ``replay_endpoint``, ``buffer_steps``, ``hwm``,
``max_queue_size``, ``topic``). Like vLLM's, it runs on a thread of its own fed by a queue, so
the engine loop only enqueues: a PUB socket sends ``[topic, seq, payload]`` (the wire format in
:mod:`deja.kvcache.wire`), the last ``buffer_steps`` batches are kept, and a ROUTER socket
replays them from a requested sequence number. An endpoint with ``*`` (or ``ipc://``,
``inproc://``) is bound, any other is connected to, as vLLM does.

Faults for tests (``PUT /sim/faults``): ``kv_events_drop`` batches are left off the PUB socket
(still buffered, so a replay finds them: "lost events"); ``kv_events_paused`` sends nothing and
buffers nothing ("stopped publishing"; its sequence numbers still advance).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from itertools import count
from typing import Literal

import orjson
import zmq
from pydantic import BaseModel, ConfigDict

from deja.kvcache.wire import END_SEQ, KVEventBatch, encode_batch, encode_seq

__all__ = ["KVEventPublisher", "KVEventsConfig", "parse_kv_events_config"]

log = logging.getLogger("sim")

_POLL_S = 0.05
_CLOSE_TIMEOUT_S = 1.0


class KVEventsConfig(BaseModel):
    """vLLM's ``KVEventsConfig`` (``vllm/config/kv_events.py``), same keys and defaults."""

    model_config = ConfigDict(extra="forbid")

    enable_kv_cache_events: bool = False
    publisher: Literal["null", "zmq"] = "null"
    endpoint: str = "tcp://*:5557"
    replay_endpoint: str | None = None
    buffer_steps: int = 10_000
    hwm: int = 100_000
    max_queue_size: int = 100_000
    topic: str = ""


def parse_kv_events_config(text: str) -> KVEventsConfig | None:
    """The flag's JSON, or None when events are off (empty, disabled or the null publisher)."""
    if not text:
        return None
    config = KVEventsConfig.model_validate(orjson.loads(text))
    if not config.enable_kv_cache_events or config.publisher != "zmq":
        return None
    return config


def _attach(socket: zmq.Socket[bytes], endpoint: str) -> None:
    if "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://")):
        socket.bind(endpoint)
    else:
        socket.connect(endpoint)


class KVEventPublisher:
    """PUB + ROUTER replay on a thread; :meth:`publish` never blocks the engine loop."""

    def __init__(self, config: KVEventsConfig, *, data_parallel_rank: int = 0) -> None:
        self.config = config
        self._rank = data_parallel_rank
        self._queue: queue.Queue[KVEventBatch | None] = queue.Queue(config.max_queue_size)
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=config.buffer_steps)
        self._ctx = zmq.Context()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.set_hwm(config.hwm)
        self._replay: zmq.Socket[bytes] | None = None
        try:
            _attach(self._pub, config.endpoint)
            if config.replay_endpoint:
                self._replay = self._ctx.socket(zmq.ROUTER)
                self._replay.bind(config.replay_endpoint)
        except zmq.ZMQError:
            self._close_sockets()
            raise
        self._topic = config.topic.encode()
        self._seq = count()
        self.dropped_full = 0
        """Batches refused because the queue was full (as vLLM, the engine never waits)."""
        self.drop = 0
        """Fault: leave this many next batches off the PUB socket (still replayable)."""
        self.paused = False
        """Fault: send and buffer nothing (sequence numbers still advance)."""
        self._running = True
        self._thread = threading.Thread(target=self._run, name="sim-kv-events", daemon=True)
        self._thread.start()

    @property
    def endpoints(self) -> tuple[str, str | None]:
        """The bound PUB and replay addresses (a ``:0`` port resolved)."""
        pub = self._pub.getsockopt_string(zmq.LAST_ENDPOINT)
        replay = self._replay.getsockopt_string(zmq.LAST_ENDPOINT) if self._replay else None
        return pub, replay

    def publish(self, batch: KVEventBatch) -> None:
        """Queue one step's events."""
        if batch.data_parallel_rank is None:
            batch.data_parallel_rank = self._rank
        try:
            self._queue.put_nowait(batch)
        except queue.Full:
            self.dropped_full += 1

    def close(self) -> None:
        """Send what is queued (up to a second), then close the sockets."""
        if not self._running:
            return
        self._running = False
        self._queue.put(None)
        self._thread.join(_CLOSE_TIMEOUT_S)
        self._close_sockets()

    def _close_sockets(self) -> None:
        self._pub.close(linger=0)
        if self._replay is not None:
            self._replay.close(linger=0)
        self._ctx.term()

    def _run(self) -> None:
        while True:
            if self._replay is not None and self._replay.poll(0):
                self._serve_replay()
            try:
                batch = self._queue.get(timeout=_POLL_S)
            except queue.Empty:
                if not self._running:
                    return
                continue
            if batch is None:
                return
            self._send(batch)

    def _send(self, batch: KVEventBatch) -> None:
        seq = next(self._seq)
        if self.paused:
            return
        payload = encode_batch(batch)
        self._buffer.append((seq, payload))
        if self.drop > 0:
            self.drop -= 1
            return
        try:
            self._pub.send_multipart((self._topic, encode_seq(seq), payload))
        except zmq.ZMQError as exc:  # vLLM logs and backs off; so do we
            log.warning("KV event publish failed: %s", exc)
            time.sleep(0.1)

    def _serve_replay(self) -> None:
        assert self._replay is not None
        frames = self._replay.recv_multipart()
        if len(frames) != 3:
            log.warning("invalid KV event replay request (%d frames)", len(frames))
            return
        client, _, start_frame = frames
        start = int.from_bytes(start_frame, "big")
        for seq, payload in self._buffer:
            if seq >= start:
                self._replay.send_multipart((client, b"", encode_seq(seq), payload))
        self._replay.send_multipart((client, b"", END_SEQ, b""))
