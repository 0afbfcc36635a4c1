"""What every parser produces, and what they share: the format of a file, its text, its size.

A parsed document is a title and its sections in reading order. A section is the text under one
heading path (``("Guide", "Install")``), as paragraphs: the units the chunker packs and never
cuts unless one alone is over the token budget. Every section's path starts with the document's
title, so a chunk cut from it can say where it comes from on its own.
"""

from __future__ import annotations

import codecs
import posixpath
import re
from dataclasses import dataclass, field
from typing import Literal

from deja.errors import DocumentError

Format = Literal["markdown", "text", "html", "pdf"]

#: File extension → format (the document id's extension decides when the content type does not).
EXTENSIONS: dict[str, Format] = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
    ".text": "text",
    ".html": "html",
    ".htm": "html",
    ".xhtml": "html",
    ".pdf": "pdf",
}
#: Content types specific enough to override the extension.
CONTENT_TYPES: dict[str, Format] = {
    "text/markdown": "markdown",
    "text/x-markdown": "markdown",
    "text/html": "html",
    "application/xhtml+xml": "html",
    "application/pdf": "pdf",
}
_BLANK_LINES = re.compile(r"\n[ \t]*\n")


@dataclass(frozen=True, slots=True)
class Section:
    """The paragraphs under one heading path."""

    path: tuple[str, ...]
    paragraphs: tuple[str, ...]


@dataclass
class Outline:
    """The heading path being read and the sections finished so far: what every structured
    parser (Markdown, HTML) builds its sections with."""

    sections: list[Section] = field(default_factory=list)
    #: (level, heading text) from the outermost heading in.
    stack: list[tuple[int, str]] = field(default_factory=list)
    #: The paragraphs read under the current heading path.
    paragraphs: list[str] = field(default_factory=list)

    def enter(self, level: int, text: str) -> None:
        """A heading of ``level``: it replaces every open heading of that level or deeper."""
        while self.stack and self.stack[-1][0] >= level:
            self.stack.pop()
        self.stack.append((level, text))

    def close_section(self) -> None:
        """The paragraphs read so far become a section under the current heading path."""
        if self.paragraphs:
            path = tuple(text for _, text in self.stack)
            self.sections.append(Section(path, tuple(self.paragraphs)))
            self.paragraphs = []


@dataclass(frozen=True, slots=True)
class ParsedDocument:
    title: str
    format: Format
    sections: tuple[Section, ...]

    @classmethod
    def build(cls, title: str, fmt: Format, sections: list[Section]) -> ParsedDocument:
        """Drop empty paragraphs and sections, root every path at ``title``; a document with
        no text left is a ``DocumentError``."""
        kept: list[Section] = []
        for section in sections:
            # Leading spaces are kept: they are the indentation of preformatted text.
            paragraphs = tuple(p.strip("\n").rstrip() for p in section.paragraphs if p.strip())
            if not paragraphs:
                continue
            path = tuple(part for part in section.path if part)
            if not path or path[0] != title:
                path = (title, *path)
            kept.append(Section(path, paragraphs))
        if not kept:
            raise DocumentError("no text found in the file")
        return cls(title, fmt, tuple(kept))

    def text(self) -> str:
        """All paragraphs, in order (tests, debugging)."""
        return "\n\n".join(p for s in self.sections for p in s.paragraphs)


def detect_format(name: str, content_type: str | None) -> Format:
    """The format of a file: a specific content type (Markdown, HTML, PDF) wins, else the
    name's extension, else ``text/plain`` means text. Anything else is a ``DocumentError``."""
    media = (content_type or "").split(";")[0].strip().lower()
    if media in CONTENT_TYPES:
        return CONTENT_TYPES[media]
    ext = posixpath.splitext(name.lower())[1]
    if ext in EXTENSIONS:
        return EXTENSIONS[ext]
    if media == "text/plain":
        return "text"
    kinds = ", ".join(sorted(EXTENSIONS))
    raise DocumentError(
        f"unsupported file type ({media or 'no content type'}, extension {ext or 'none'}): "
        f"deja reads {kinds}"
    )


def check_size(data: bytes, max_bytes: int) -> None:
    if not data:
        raise DocumentError("the file is empty")
    if len(data) > max_bytes:
        raise DocumentError(
            f"the file is {len(data):,} bytes, over the {max_bytes:,}-byte limit "
            "(corpus_max_file_bytes)"
        )


def decode_text(data: bytes) -> str:
    """UTF-8 (a BOM is skipped) or UTF-16 with its BOM; anything else is refused rather than
    guessed, since a wrong guess would store garbage that retrieval then serves."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"
    else:
        encoding = "utf-8-sig"
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise DocumentError(
            f"the file is not UTF-8 text (undecodable byte at offset {exc.start})"
        ) from exc
    if "\x00" in text:
        raise DocumentError("the file holds NUL characters: binary data, not text")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def split_paragraphs(text: str) -> list[str]:
    """Paragraphs of plain text: runs of lines between blank lines."""
    return [p.strip() for p in _BLANK_LINES.split(text) if p.strip()]


def default_title(name: str) -> str:
    """A document's title when its content names none: the file's name."""
    return posixpath.basename(name.rstrip("/")) or name


def parse_text(name: str, data: bytes) -> ParsedDocument:
    """Plain text: one section under the file's name, paragraphs between blank lines."""
    title = default_title(name)
    paragraphs = split_paragraphs(decode_text(data))
    return ParsedDocument.build(title, "text", [Section((title,), tuple(paragraphs))])
