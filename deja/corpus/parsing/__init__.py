"""Turning a file into a title and ordered sections: Markdown, plain text, HTML and PDF.

``parse_document`` is the one entry point; every way a file can be unusable (empty, over the
size limit, not decodable, encrypted, without text, of an unknown type) is a ``DocumentError``
whose message is the reason shown to the person who ingested it.
"""

from __future__ import annotations

from collections.abc import Callable

from deja.corpus.parsing.base import (
    EXTENSIONS,
    Format,
    ParsedDocument,
    Section,
    check_size,
    detect_format,
    parse_text,
)
from deja.corpus.parsing.html import parse_html
from deja.corpus.parsing.markdown import parse_markdown
from deja.corpus.parsing.pdf import parse_pdf

__all__ = [
    "EXTENSIONS",
    "Format",
    "ParsedDocument",
    "Section",
    "detect_format",
    "parse_document",
]

PARSERS: dict[Format, Callable[[str, bytes], ParsedDocument]] = {
    "markdown": parse_markdown,
    "text": parse_text,
    "html": parse_html,
    "pdf": parse_pdf,
}


def parse_document(
    name: str, data: bytes, *, content_type: str | None = None, max_bytes: int
) -> ParsedDocument:
    """Parse ``data`` (the file called ``name``); CPU-bound, so callers on an event loop run it
    in a thread. Raises ``DocumentError`` with the reason when the file cannot be used."""
    check_size(data, max_bytes)
    fmt = detect_format(name, content_type)
    return PARSERS[fmt](name, data)
