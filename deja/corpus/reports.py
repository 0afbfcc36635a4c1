"""What goes into an ingestion and what comes out of it: files in, one report line per file."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from deja.corpus.base import DocumentChange

Status = Literal["added", "updated", "unchanged", "failed"]


@dataclass(frozen=True, slots=True)
class SourceFile:
    """One file to ingest. ``document`` is its id in the corpus: the path relative to the
    ingest root (``docs/architecture.md``). ``content_type`` may be None: the id's extension
    then decides the format."""

    document: str
    data: bytes
    content_type: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    #: Where it came from, for listings (default: the document id).
    source: str = ""


@dataclass(frozen=True, slots=True)
class FileReport:
    """The outcome for one file. ``version`` is the document's version after the call,
    ``old_version`` the one it replaced (``updated``); ``reason`` says why it ``failed``;
    ``invalidated`` counts the cached answers dropped because of the change."""

    document: str
    status: Status
    version: int | None = None
    old_version: int | None = None
    chunks: int = 0
    reason: str | None = None
    invalidated: int = 0
    invalidation_error: str | None = None
    #: Nothing was written: ``status`` and ``invalidated`` say what would happen.
    dry_run: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "document": self.document,
            "status": self.status,
            "version": self.version,
            "old_version": self.old_version,
            "chunks": self.chunks,
            "reason": self.reason,
            "invalidated": self.invalidated,
            "invalidation_error": self.invalidation_error,
            **({"dry_run": True} if self.dry_run else {}),
        }


@dataclass(slots=True)
class IngestReport:
    tenant: str
    corpus: str
    files: list[FileReport] = field(default_factory=list)

    @property
    def failed(self) -> list[FileReport]:
        return [f for f in self.files if f.status == "failed"]

    @property
    def invalidated(self) -> int:
        return sum(f.invalidated for f in self.files)

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(("added", "updated", "unchanged", "failed"), 0)
        for f in self.files:
            counts[f.status] += 1
        return counts

    def as_json(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "corpus": self.corpus,
            "counts": self.counts(),
            "chunks": sum(f.chunks for f in self.files if f.status in ("added", "updated")),
            "invalidated": self.invalidated,
            "files": [f.as_json() for f in self.files],
        }


@dataclass(frozen=True, slots=True)
class Removal:
    """A removed document: its last version, its chunk count, the answers invalidated."""

    change: DocumentChange
    chunks: int
    invalidated: int
    invalidation_error: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "tenant": self.change.tenant,
            "corpus": self.change.corpus,
            "document": self.change.document,
            "version": self.change.old_version,
            "chunks": self.chunks,
            "invalidated": self.invalidated,
            "invalidation_error": self.invalidation_error,
        }
