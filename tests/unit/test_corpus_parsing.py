"""Parsing Markdown, plain text, HTML and PDF into a title and sections, and every way a file
is refused (``DocumentError`` with a reason)."""

from __future__ import annotations

import pytest

from deja.corpus.parsing import ParsedDocument, detect_format, parse_document
from deja.errors import DocumentError
from tests.pdfs import encrypt_pdf, make_pdf

MAX = 1_000_000


def parse(name: str, data: bytes | str, content_type: str | None = None) -> ParsedDocument:
    raw = data.encode() if isinstance(data, str) else data
    return parse_document(name, raw, content_type=content_type, max_bytes=MAX)


def paths(doc: ParsedDocument) -> list[tuple[str, ...]]:
    return [s.path for s in doc.sections]


# --- Markdown ----------------------------------------------------------------------------------
MARKDOWN = """---
title: front matter is dropped
---
# Guide

Intro paragraph,
two lines.

Second paragraph.

## Install
<!-- a comment that is dropped -->
Run `pip install deja`.

```bash
# not a heading: inside a fence
make run
```

### On *macOS*

Use brew.

Usage
-----

Setext heading body.

# Appendix

Last words.
"""


def test_markdown_headings_become_the_section_paths() -> None:
    doc = parse("docs/guide.md", MARKDOWN)
    assert doc.title == "Guide" and doc.format == "markdown"
    assert paths(doc) == [
        ("Guide",),
        ("Guide", "Install"),
        ("Guide", "Install", "On macOS"),
        ("Guide", "Usage"),
        ("Guide", "Appendix"),  # a second H1 still hangs under the document's title
    ]
    assert doc.sections[0].paragraphs == ("Intro paragraph,\ntwo lines.", "Second paragraph.")
    install = doc.sections[1].paragraphs
    assert install[0] == "Run `pip install deja`."
    assert install[1].startswith("```bash\n# not a heading") and install[1].endswith("```")
    assert "front matter" not in doc.text() and "comment" not in doc.text()


def test_markdown_without_h1_takes_its_first_heading_or_the_file_name() -> None:
    assert parse("a.md", "## Only H2\n\ntext").title == "Only H2"
    doc = parse("notes/plain.md", "just text\n\nmore text")
    assert doc.title == "plain.md"
    assert paths(doc) == [("plain.md",)]


def test_markdown_thematic_break_is_not_a_heading() -> None:
    doc = parse("a.md", "# T\n\npara one\n\n---\n\npara two\n")
    assert paths(doc) == [("T",)]
    assert doc.sections[0].paragraphs == ("para one", "para two")


# --- plain text ---------------------------------------------------------------------------------
def test_text_is_one_section_of_paragraphs_under_the_file_name() -> None:
    doc = parse("dir/notes.txt", "first para\nline two\n\n\n  second para  \r\n")
    assert doc.title == "notes.txt"
    assert doc.sections[0].paragraphs == ("first para\nline two", "second para")


def test_text_encodings_utf8_bom_and_utf16_are_read_others_refused() -> None:
    assert parse("a.txt", "\ufeffcafé".encode()).text() == "café"
    assert parse("a.txt", "naïve".encode("utf-16")).text() == "naïve"
    with pytest.raises(DocumentError, match="not UTF-8"):
        parse("a.txt", "caf\xe9".encode("latin-1"))
    with pytest.raises(DocumentError, match="binary"):
        parse("a.txt", b"abc\x00def")


# --- HTML ---------------------------------------------------------------------------------------
HTML = """<!doctype html><html><head><title>Page title</title>
<style>body { color: red }</style><script>var nav = "menu";</script></head>
<body>
<header><a href="/">Site logo</a></header>
<nav><ul><li>Home</li><li>Docs</li></ul></nav>
<div role="navigation">Breadcrumbs here</div>
<h1>Real Title<a class="headerlink" href="#t">¶</a></h1>
<p>First &amp; <b>bold</b>
paragraph.</p>
<aside>Related links</aside>
<h2>Section A</h2>
<p>Text A.</p><ul><li>item one</li><li>item two</li></ul>
<pre>  indented
    code</pre>
<div hidden>secret hidden text</div>
<h3>Sub</h3><p>Deep text<br>next line</p>
<footer>Copyright footer</footer>
</body></html>"""


def test_html_keeps_main_text_and_headings_drops_navigation() -> None:
    doc = parse("site/page.html", HTML)
    assert doc.title == "Real Title" and doc.format == "html"
    assert paths(doc) == [
        ("Real Title",),
        ("Real Title", "Section A"),
        ("Real Title", "Section A", "Sub"),
    ]
    text = doc.text()
    for dropped in ("Site logo", "Home", "Breadcrumbs", "Related", "Copyright", "color", "menu"):
        assert dropped not in text
    assert "secret hidden" not in text and "¶" not in text
    assert doc.sections[0].paragraphs == ("First & bold paragraph.",)
    assert doc.sections[1].paragraphs == ("Text A.", "item one", "item two", "  indented\n    code")
    assert doc.sections[2].paragraphs == ("Deep text\nnext line",)


def test_html_with_a_main_landmark_reads_only_the_main_content() -> None:
    page = """<html><body><div class="sidebar">Sidebar without landmark</div>
    <div class="body" role="main"><div><h1>Doc</h1><p>Main text.</p></div></div>
    <div>After main</div></body></html>"""
    doc = parse("p.htm", page)
    assert doc.title == "Doc"
    assert doc.text() == "Main text."


def test_html_title_falls_back_to_the_title_element() -> None:
    doc = parse("p.html", "<html><head><title> The  Page </title></head><body><p>x</p></body>")
    assert doc.title == "The Page"


def test_html_with_only_navigation_is_empty() -> None:
    with pytest.raises(DocumentError, match="no text"):
        parse("p.html", "<html><body><nav>Home Docs</nav><footer>c</footer></body></html>")


# --- PDF ----------------------------------------------------------------------------------------
def test_pdf_pages_become_sections_titled_from_the_metadata() -> None:
    data = make_pdf([["Intro line.", "Second (line)."], [], ["Page three text."]], title="Manual")
    doc = parse("m.pdf", data)
    assert doc.title == "Manual" and doc.format == "pdf"
    assert paths(doc) == [("Manual", "page 1"), ("Manual", "page 3")]
    assert "Second (line)." in doc.text() and "Page three text." in doc.text()


def test_pdf_without_a_title_uses_its_first_line() -> None:
    assert parse("m.pdf", make_pdf([["Deja handbook", "body"]])).title == "Deja handbook"


def test_pdf_encrypted_with_a_password_is_refused_but_an_empty_password_is_read() -> None:
    data = make_pdf([["Confidential text."]])
    with pytest.raises(DocumentError, match="encrypted"):
        parse("locked.pdf", encrypt_pdf(data, "secret"))
    assert "Confidential text." in parse("open.pdf", encrypt_pdf(data, "")).text()


def test_pdf_without_text_damaged_or_fake_is_refused() -> None:
    with pytest.raises(DocumentError, match="no text layer"):
        parse("scan.pdf", make_pdf([[]]))
    with pytest.raises(DocumentError, match="cannot be read"):
        parse("cut.pdf", make_pdf([["some text"]])[:150])
    with pytest.raises(DocumentError, match="not a PDF"):
        parse("fake.pdf", b"hello, not a pdf")


# --- format, size, emptiness ---------------------------------------------------------------------
def test_format_from_a_specific_content_type_else_the_extension() -> None:
    assert detect_format("a.txt", "text/markdown; charset=utf-8") == "markdown"
    assert detect_format("x", "application/pdf") == "pdf"
    assert detect_format("a.HTM", "application/octet-stream") == "html"
    assert detect_format("a.md", "text/plain") == "markdown"
    assert detect_format("README", "text/plain") == "text"
    with pytest.raises(DocumentError, match="unsupported file type"):
        detect_format("a.docx", None)


def test_empty_and_oversized_files_are_refused_with_the_limit_named() -> None:
    with pytest.raises(DocumentError, match="empty"):
        parse("a.md", b"")
    with pytest.raises(DocumentError, match="no text"):
        parse("a.md", b"  \n\n \n")
    big = make_pdf([["x" * 50] * 40] * 50)
    with pytest.raises(DocumentError, match="corpus_max_file_bytes"):
        parse_document("big.pdf", big, max_bytes=len(big) - 1)
