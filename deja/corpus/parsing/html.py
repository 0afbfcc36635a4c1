"""HTML: the main text of a page, its headings (``h1``-``h6``) as the section structure.

What a reader of the page would skip is dropped: ``nav``, ``header``, ``footer``, ``aside``,
scripts, styles, forms, elements marked hidden, and the ARIA landmarks of the same kind
(``role="navigation"``, ``banner``, ``contentinfo``, ``complementary``, ``search``). When the page
marks its main content (``<main>``, ``role="main"``; Sphinx's ``div.body`` does), only that is
read, which also drops sidebars that carry no landmark. Sphinx's ``¶`` heading anchors
(``a.headerlink``) are dropped too. Uses the standard library's tolerant ``html.parser``.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

from deja.corpus.parsing.base import (
    Outline,
    ParsedDocument,
    decode_text,
    default_title,
)

SKIPPED_TAGS = frozenset(
    {
        "nav",
        "header",
        "footer",
        "aside",
        "script",
        "style",
        "noscript",
        "template",
        "svg",
        "form",
        "button",
        "select",
        "iframe",
        "head",
    }
)
SKIPPED_ROLES = frozenset({"navigation", "banner", "contentinfo", "complementary", "search"})
SKIPPED_CLASSES = frozenset({"headerlink"})
#: Tags whose start and end separate paragraphs.
BLOCK_TAGS = frozenset(
    {
        "p",
        "div",
        "section",
        "article",
        "main",
        "li",
        "ul",
        "ol",
        "dl",
        "dt",
        "dd",
        "table",
        "tr",
        "blockquote",
        "pre",
        "figure",
        "figcaption",
        "hr",
        "body",
    }
)
HEADINGS = {f"h{n}": n for n in range(1, 7)}
VOID_TAGS = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}
)
_MAIN_MARK = re.compile(rb"<main[\s>]|role\s*=\s*[\"']?main\b", re.I)
_SPACES = re.compile(r"[ \t\r\f\v]+")


class _Region:
    """An element being tracked (skipped, or the main content) and its nesting depth."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.depth = 1

    def start(self, tag: str) -> None:
        if tag == self.tag:
            self.depth += 1

    def end(self, tag: str) -> bool:
        """True when this closes the region."""
        if tag == self.tag:
            self.depth -= 1
        return self.depth == 0


class _MainText(HTMLParser):
    def __init__(self, *, main_only: bool) -> None:
        super().__init__(convert_charrefs=True)
        self.main_only = main_only
        self.skip: _Region | None = None
        self.main: _Region | None = None
        self.outline = Outline()
        self.buffer: list[str] = []
        self.heading: tuple[int, list[str]] | None = None
        self.pre = 0
        self.title_parts: list[str] | None = None
        self.page_title = ""
        self.first_h1: str | None = None

    # --- structure ------------------------------------------------------------------------------
    def _reading(self) -> bool:
        return self.skip is None and (not self.main_only or self.main is not None)

    def end_paragraph(self) -> None:
        text = "".join(self.buffer)
        self.buffer = []
        if not self.pre:
            text = "\n".join(_SPACES.sub(" ", line).strip() for line in text.split("\n"))
        if text.strip():
            self.outline.paragraphs.append(text.strip("\n"))

    def end_section(self) -> None:
        self.end_paragraph()
        self.outline.close_section()

    def _skips(self, tag: str, attrs: dict[str, str | None]) -> bool:
        classes = set((attrs.get("class") or "").split())
        return (
            tag in SKIPPED_TAGS
            or (attrs.get("role") or "").lower() in SKIPPED_ROLES
            or bool(classes & SKIPPED_CLASSES)
            or "hidden" in attrs
            or attrs.get("aria-hidden") == "true"
        )

    # --- HTMLParser -----------------------------------------------------------------------------
    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title" and self.title_parts is None and not self.page_title:
            self.title_parts = []
        named = dict(attrs)
        if self.skip is not None:
            if tag not in VOID_TAGS:
                self.skip.start(tag)
            return
        if self.main is not None and tag not in VOID_TAGS:
            self.main.start(tag)
        elif self.main_only and (tag == "main" or (named.get("role") or "") == "main"):
            self.main = _Region(tag)
        if tag not in VOID_TAGS and tag != "title" and self._skips(tag, named):
            self.skip = _Region(tag)
            return
        self._open(tag)

    def _open(self, tag: str) -> None:
        if not self._reading():
            return
        if tag in HEADINGS:
            self.end_section()
            self.heading = (HEADINGS[tag], [])
        elif tag == "br":
            self.buffer.append("\n")
        elif tag in ("td", "th"):
            self.buffer.append(" ")
        elif tag in BLOCK_TAGS:
            self.end_paragraph()
            if tag == "pre":
                self.pre += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "title" and self.title_parts is not None:
            self.page_title = " ".join("".join(self.title_parts).split())
            self.title_parts = None
        if self.skip is not None:
            if self.skip.end(tag):
                self.skip = None
            return
        if self._reading():
            self._close(tag)
        if self.main is not None and self.main.end(tag):
            self.end_paragraph()
            self.main = None

    def _close(self, tag: str) -> None:
        if tag in HEADINGS and self.heading is not None:
            level, parts = self.heading
            self.heading = None
            text = " ".join("".join(parts).split())
            if text:
                if level == 1 and self.first_h1 is None:
                    self.first_h1 = text
                self.outline.enter(level, text)
        elif tag in BLOCK_TAGS:
            self.end_paragraph()
            if tag == "pre" and self.pre:
                self.pre -= 1

    def handle_data(self, data: str) -> None:
        if self.title_parts is not None:
            self.title_parts.append(data)
            return
        if not self._reading():
            return
        if self.heading is not None:
            self.heading[1].append(data)
        elif self.pre:
            self.buffer.append(data)
        else:
            self.buffer.append(data.replace("\n", " "))


def parse_html(name: str, data: bytes) -> ParsedDocument:
    parser = _MainText(main_only=bool(_MAIN_MARK.search(data)))
    parser.feed(decode_text(data))
    parser.close()
    parser.end_section()
    title = parser.first_h1 or parser.page_title or default_title(name)
    return ParsedDocument.build(title, "html", parser.outline.sections)
