"""Markdown: headings (ATX ``#`` and setext underlines) become the section structure; fenced
code blocks stay whole (a ``#`` inside one is not a heading); YAML front matter and HTML
comments are dropped. The rest is kept as written: links and emphasis cost a few tokens but
carry meaning a reader of the retrieved text may need."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from deja.corpus.parsing.base import Outline, ParsedDocument, decode_text, default_title

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_INLINE_MARKS = re.compile(r"[`*_]+")


def heading_text(raw: str) -> str:
    """A heading as a path element: inline code and emphasis marks removed."""
    return " ".join(_INLINE_MARKS.sub("", raw).split())


@dataclass
class _Builder:
    """Collects paragraphs under the current heading path."""

    outline: Outline = field(default_factory=Outline)
    lines: list[str] = field(default_factory=list)
    first_h1: str | None = None
    first_heading: str | None = None

    def end_paragraph(self) -> None:
        if self.lines:
            self.outline.paragraphs.append("\n".join(self.lines))
            self.lines = []

    def heading(self, level: int, text: str) -> None:
        self.end_paragraph()
        self.end_section()
        if not text:
            return
        if level == 1 and self.first_h1 is None:
            self.first_h1 = text
        if self.first_heading is None:
            self.first_heading = text
        self.outline.enter(level, text)

    def end_section(self) -> None:
        self.end_paragraph()
        self.outline.close_section()


def _strip_front_matter(lines: list[str]) -> list[str]:
    if not lines or lines[0].strip() != "---":
        return lines
    for end, line in enumerate(lines[1:200], start=1):
        if line.strip() in ("---", "..."):
            return lines[end + 1 :]
    return lines


def parse_markdown(name: str, data: bytes) -> ParsedDocument:
    text = _COMMENT.sub("", decode_text(data))
    lines = _strip_front_matter(text.split("\n"))
    doc = _Builder()
    fence: str | None = None
    for line in lines:
        if fence is not None:  # inside a code block: everything is text until the closing fence
            doc.lines.append(line)
            if line.strip().startswith(fence):
                fence = None
                doc.end_paragraph()
            continue
        opening = _FENCE.match(line)
        if opening:
            doc.end_paragraph()
            fence = opening.group(1)
            doc.lines.append(line)
            continue
        atx = _ATX.match(line)
        if atx:
            doc.heading(len(atx.group(1)), heading_text(atx.group(2) or ""))
            continue
        setext = _SETEXT.match(line)
        if setext and len(doc.lines) == 1:
            underlined = doc.lines.pop()
            doc.heading(1 if setext.group(1)[0] == "=" else 2, heading_text(underlined))
            continue
        if not line.strip() or (setext and not doc.lines):  # blank line or thematic break
            doc.end_paragraph()
            continue
        doc.lines.append(line)
    doc.end_section()
    title = doc.first_h1 or doc.first_heading or default_title(name)
    return ParsedDocument.build(title, "markdown", doc.outline.sections)
