"""PDF through pypdf (pure Python): the text layer of each page, one section per page (``Title >
page 3``), so a retrieved chunk says where in the file it is. A PDF without a text layer (a scan)
has nothing to retrieve and is refused, as is one that needs a password."""

from __future__ import annotations

import io

from pypdf import PdfReader
from pypdf.errors import DependencyError, PdfReadError

from deja.corpus.parsing.base import (
    ParsedDocument,
    Section,
    default_title,
    split_paragraphs,
)
from deja.errors import DocumentError

#: A first line longer than this is prose, not a title.
_MAX_TITLE_CHARS = 120


def _reader(data: bytes) -> PdfReader:
    if not data.lstrip()[:5].startswith(b"%PDF-"):
        raise DocumentError("the file is not a PDF (no %PDF- header)")
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise DocumentError("the PDF is encrypted: it needs a password to be read")
        return reader
    except DependencyError as exc:
        raise DocumentError(f"the PDF is encrypted with a scheme deja cannot open: {exc}") from exc
    except (PdfReadError, ValueError, KeyError, TypeError, OSError) as exc:
        raise DocumentError(f"the PDF cannot be read: {exc}") from exc


def parse_pdf(name: str, data: bytes) -> ParsedDocument:
    reader = _reader(data)
    pages: list[list[str]] = []
    try:
        for page in reader.pages:
            pages.append(split_paragraphs(page.extract_text() or ""))
        meta = reader.metadata
        meta_title = (meta.title if meta is not None else None) or ""
    except DocumentError:
        raise
    except Exception as exc:  # pypdf raises many kinds on a damaged file
        raise DocumentError(f"the PDF cannot be read: {exc}") from exc
    if not any(pages):
        raise DocumentError("the PDF has no text layer (a scanned image?): nothing to index")
    title = " ".join(str(meta_title).split()) or _first_line(pages) or default_title(name)
    sections = [
        Section((title, f"page {number}"), tuple(paragraphs))
        for number, paragraphs in enumerate(pages, start=1)
    ]
    return ParsedDocument.build(title, "pdf", sections)


def _first_line(pages: list[list[str]]) -> str:
    for paragraphs in pages:
        for paragraph in paragraphs:
            line = paragraph.strip().split("\n", 1)[0].strip()
            return line if len(line) <= _MAX_TITLE_CHARS else ""
    return ""
