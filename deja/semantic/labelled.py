"""Pairs ops labelled in the console: a query and the cached question it was (or nearly was)
served, marked "same" (one answer serves both) or "different".

They are the gateway's own calibration data: ``calibration_jsonl`` writes them in the format ``deja
calibrate --pairs FILE`` reads (``{"a": cached, "b": asked, "duplicate": bool}``), and
``subscribe`` hands each label to whoever keeps per-entry evidence: the labels already on disk
when it subscribes, then each label added, changed or removed, by this process or (seen when
the file is re-read: on the next call, or every ``follow`` interval) by another one. A label
dropped past the bound counts as removed.

A pair is one (tenant, model, asked question, cached question): labelling it again replaces
its label (``pair_id`` names it). At most ``MAX_LABELS`` are kept, the oldest dropped first:
10,000 pairs of ≤ 2 × 500 characters is ≤ 10 MB, and more than a team labels by hand.

**On disk** (``data_dir/labelled-pairs.jsonl``): one JSON line per label or removal, appended
with a single ``write`` under an exclusive ``flock`` (``--workers N`` processes sharing the
data dir append to one file), and rewritten atomically (``deja.files.write_atomic``) once it
holds twice the bound. A process re-reads the file when its size or modification time moved
since its own last write, so every worker lists every worker's labels. A line that does not
parse (a torn tail after a crash) is skipped and counted.

All file work runs in a worker thread, one operation at a time (an ``asyncio.Lock``); the
subscribers run on the event loop after the change is on disk.
"""

from __future__ import annotations

import asyncio
import dataclasses
import fcntl
import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deja.files import write_atomic

log = logging.getLogger("deja")

#: How many labelled pairs are kept (the oldest go first).
MAX_LABELS = 10_000
#: The file under the data dir.
FILE_NAME = "labelled-pairs.jsonl"
#: Question texts are cut to this many characters (the near-miss ring's own limit).
TEXT_LIMIT = 500


def pair_id(tenant: str, model: str, question: str, cached_question: str) -> str:
    """The name of one labelled pair: 16 hex digits of the sha256 of its four texts."""
    raw = json.dumps([tenant, model, question, cached_question], ensure_ascii=False)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Label:
    """One labelled pair: ``question`` was asked, ``cached_question`` is the cached entry's
    (``entry_id``); ``same``: one answer serves both. ``similarity`` (cosine) and ``score``
    (the verifier's decision score) are what the gateway measured, None when not known;
    ``who`` names the admin key that labelled it."""

    at: float
    tenant: str
    model: str
    question: str
    cached_question: str
    entry_id: str
    similarity: float | None
    score: float | None
    same: bool
    who: str

    @property
    def id(self) -> str:
        return pair_id(self.tenant, self.model, self.question, self.cached_question)

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, **dataclasses.asdict(self), "label": self.label}

    @property
    def label(self) -> str:
        return "same" if self.same else "different"

    def calibration_row(self) -> dict[str, Any]:
        """The row ``deja calibrate --pairs`` reads (``a`` cached, ``b`` asked), with the
        label's context beside it (the reader ignores other fields)."""
        return {
            "a": self.cached_question,
            "b": self.question,
            "duplicate": self.same,
            "tenant": self.tenant,
            "model": self.model,
            "entry_id": self.entry_id,
        }


def _parse(line: str) -> Label | str | None:
    """A label, a removed pair's id, or None for a line that does not parse."""
    try:
        row = json.loads(line)
        if "removed" in row:
            return str(row["removed"])
        row.pop("id", None)
        row.pop("label", None)
        label = Label(**row)
    except (ValueError, TypeError, AttributeError):
        return None
    if not isinstance(label.same, bool) or not isinstance(label.question, str):
        return None
    return label


Subscriber = Callable[[Label], None]
#: A change the subscribers hear of: the label, and whether it was added (else removed).
Change = tuple[Label, bool]


def changes(before: dict[str, Label], after: dict[str, Label]) -> list[Change]:
    """What turned ``before`` into ``after``: labels gone, then labels new or changed."""
    gone = [(x, False) for key, x in before.items() if key not in after]
    return gone + [(x, True) for key, x in after.items() if before.get(key) != x]


class LabelledPairs:
    """The labelled pairs of one gateway; ``path`` None keeps them in memory only."""

    def __init__(self, path: Path | None, size: int = MAX_LABELS) -> None:
        self.path = path
        self.size = size
        self.skipped = 0
        self._labels: dict[str, Label] = {}
        self._lines = 0
        self._seen: tuple[int, int] | None = None
        self._subscribers: list[tuple[Subscriber, Subscriber | None]] = []
        self._lock = asyncio.Lock()

    @classmethod
    def load(cls, path: Path | None, size: int = MAX_LABELS) -> LabelledPairs:
        """The pairs kept in ``path`` (none yet: an empty store); at start-up, before serving."""
        pairs = cls(path, size)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            with pairs._locked():
                pairs._reread()
            if pairs.skipped:
                log.warning("labelled pairs: %d unreadable line(s) in %s", pairs.skipped, path)
        return pairs

    def subscribe(
        self, added: Subscriber, removed: Subscriber | None = None, *, replay: bool = False
    ) -> Callable[[], None]:
        """Call ``added`` with each label added (a changed label too) and ``removed`` with each
        label removed or dropped past the bound, this process's or another's, on the event loop
        after the change is saved; with ``replay``, first call ``added`` with each label this
        process holds now. Returns the call that unsubscribes. A callback must not raise: its
        exception reaches the caller of ``add``, ``remove``, ``recent`` or ``refresh`` (the
        change stays saved)."""
        pair = (added, removed)
        self._subscribers.append(pair)
        if replay:
            for label in list(self._labels.values()):
                added(label)
        return lambda: self._subscribers.remove(pair)

    def __len__(self) -> int:
        return len(self._labels)

    def get(self, tenant: str, model: str, question: str, cached_question: str) -> Label | None:
        """This pair's label as this process last read it (no file access)."""
        return self._labels.get(
            pair_id(tenant, model, question[:TEXT_LIMIT], cached_question[:TEXT_LIMIT])
        )

    async def add(self, label: Label) -> Label:
        """Save ``label`` (replacing the pair's earlier one), then tell the subscribers."""
        label = dataclasses.replace(
            label,
            question=label.question[:TEXT_LIMIT],
            cached_question=label.cached_question[:TEXT_LIMIT],
        )
        async with self._lock:
            _, seen = await asyncio.to_thread(self._write, label, label.as_json())
        self._tell([*seen, (label, True)])
        return label

    async def remove(self, pair: str) -> Label | None:
        """Forget the pair named ``pair``; its label, or None when there was none."""
        async with self._lock:
            before, seen = await asyncio.to_thread(self._write, pair, {"removed": pair})
        self._tell(seen if before is None else [*seen, (before, False)])
        return before

    async def recent(self, *, tenant: str | None = None, limit: int | None = None) -> list[Label]:
        """Newest first, optionally of one tenant (every process's, through the file)."""
        labels = await self.refresh()
        kept = [x for x in reversed(labels) if tenant is None or x.tenant == tenant]
        return kept if limit is None else kept[:limit]

    async def refresh(self) -> list[Label]:
        """Every label, oldest first, after re-reading the file if another process wrote to
        it (the subscribers hear what changed)."""
        async with self._lock:
            labels, seen = await asyncio.to_thread(self._current)
        self._tell(seen)
        return labels

    async def follow(self, seconds: float) -> None:
        """Re-read the file every ``seconds`` (a background task), so that another process's
        labels reach the subscribers without a call here."""
        while True:
            await asyncio.sleep(seconds)
            try:
                await self.refresh()
            except OSError as exc:  # a full or unreadable disk: try again next time
                log.warning("labelled pairs: cannot re-read %s: %s", self.path, exc)

    def _tell(self, seen: list[Change]) -> None:
        for label, added in seen:
            for on_added, on_removed in list(self._subscribers):
                if added:
                    on_added(label)
                elif on_removed is not None:
                    on_removed(label)

    # ------------------------------------------------------------- the file, in a thread

    def _current(self) -> tuple[list[Label], list[Change]]:
        seen: list[Change] = []
        if self.path is not None:
            with self._locked():
                seen = self._refresh()
        return list(self._labels.values()), seen

    def _write(
        self, change: Label | str, line: dict[str, Any]
    ) -> tuple[Label | None, list[Change]]:
        """Apply one change in memory and append its line, under the file's lock; the label it
        replaced or removed, and what else changed (other processes' labels, labels dropped
        past the bound)."""
        with self._locked():
            seen = self._refresh()
            before, dropped = self._apply(change)
            seen += [(x, False) for x in dropped]
            if self.path is None:
                return before, seen
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(line, ensure_ascii=False) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
            self._lines += 1
            if self._lines > 2 * self.size:
                self._compact()
            self._seen = self._stat()
            return before, seen

    def _apply(self, change: Label | str) -> tuple[Label | None, list[Label]]:
        """The label replaced or removed, and the labels dropped past the bound."""
        if isinstance(change, str):
            return self._labels.pop(change, None), []
        before = self._labels.pop(change.id, None)
        self._labels[change.id] = change
        dropped: list[Label] = []
        while len(self._labels) > self.size:
            dropped.append(self._labels.pop(next(iter(self._labels))))
        return before, dropped

    def _refresh(self) -> list[Change]:
        if self.path is not None and self._stat() != self._seen:
            return self._reread()
        return []

    def _reread(self) -> list[Change]:
        """Rebuild the labels from the file; what changed since this process's last view."""
        before, self._labels = self._labels, {}
        self._lines = self.skipped = 0
        for line in self._file_lines():
            parsed = _parse(line)
            if parsed is None:
                self.skipped += 1
            else:
                self._apply(parsed)
            self._lines += 1
        self._seen = self._stat()
        return changes(before, self._labels)

    def _file_lines(self) -> Iterator[str]:
        assert self.path is not None
        try:
            with self.path.open(encoding="utf-8", errors="replace") as handle:
                yield from (line for line in handle if line.strip())
        except FileNotFoundError:
            return

    def _compact(self) -> None:
        assert self.path is not None
        lines = [json.dumps(x.as_json(), ensure_ascii=False) + "\n" for x in self._labels.values()]
        write_atomic(self.path, "".join(lines).encode())
        self._lines = len(lines)

    def _stat(self) -> tuple[int, int] | None:
        assert self.path is not None
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return st.st_size, st.st_mtime_ns

    def _locked(self) -> AbstractContextManager[None]:
        if self.path is None:
            return nullcontext()
        return _FileLock(self.path.with_name(self.path.name + ".lock"))


def calibration_jsonl(labels: list[Label]) -> bytes:
    """``labels`` as the JSONL file ``deja calibrate --pairs`` reads, oldest first."""
    rows = sorted(labels, key=lambda x: x.at)
    return "".join(
        json.dumps(x.calibration_row(), ensure_ascii=False) + "\n" for x in rows
    ).encode()


class _FileLock(AbstractContextManager[None]):
    """An exclusive ``flock`` on a side file (the data file itself is replaced on compaction,
    so it cannot carry the lock)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = -1

    def __enter__(self) -> None:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)  # closing releases the flock
