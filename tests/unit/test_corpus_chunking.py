"""Chunking: the token budget (heading path included), overlap between neighbours, sections
as hard boundaries, paragraphs kept whole when they fit. Counters are passed in: a plain word
count here (exact arithmetic), the MiniLM tokenizer in tests/integration/test_corpora.py."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable

import pytest

from deja.corpus.chunking import ChunkText, chunk_document, word_counter
from deja.corpus.parsing import ParsedDocument, Section


def words(text: str) -> int:
    return len(text.split())


def body(chunk: ChunkText) -> str:
    assert chunk.text.startswith(chunk.title + "\n\n")
    return chunk.text[len(chunk.title) + 2 :]


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(f"w{rng.randrange(10_000)}" for _ in range(n)) + "."


def document(seed: int = 1) -> ParsedDocument:
    rng = random.Random(seed)
    sections = [
        Section(("Doc",), tuple(sentence(rng, rng.randrange(3, 30)) for _ in range(12))),
        Section(
            ("Doc", "Long"),
            (
                " ".join(sentence(rng, 12) for _ in range(20)),  # one paragraph of 260 words
                sentence(rng, 5),
            ),
        ),
        Section(("Doc", "Long", "Tiny"), ("Just this.",)),
    ]
    return ParsedDocument("Doc", "text", tuple(sections))


@pytest.mark.parametrize("count", [words, word_counter])
@pytest.mark.parametrize(("max_tokens", "overlap"), [(40, 8), (64, 0), (200, 32)])
def test_every_chunk_fits_the_budget_with_its_heading(
    count: Callable[[str], int], max_tokens: int, overlap: int
) -> None:
    chunks = chunk_document(document(), max_tokens=max_tokens, overlap=overlap, count=count)
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert all(count(c.text) <= max_tokens for c in chunks)
    assert {c.title for c in chunks} == {"Doc", "Doc > Long", "Doc > Long > Tiny"}


def test_paragraphs_that_fit_are_never_cut_and_everything_is_kept() -> None:
    doc = document()
    chunks = chunk_document(doc, max_tokens=60, overlap=0, count=words)
    bodies = [body(c) for c in chunks]
    for paragraph in doc.sections[0].paragraphs:
        assert any(paragraph in b for b in bodies)
    # Without overlap the chunks hold every word exactly once, in order.
    assert " ".join(" ".join(b.split()) for b in bodies).split() == doc.text().split()


def test_neighbours_in_a_section_share_at_most_overlap_tokens() -> None:
    chunks = chunk_document(document(), max_tokens=40, overlap=8, count=words)
    shared = 0
    for before, after in itertools.pairwise(chunks):
        if before.title != after.title:
            assert not body(after).startswith(body(before)[-20:])
            continue
        b, a = body(before).split(), body(after).split()
        k = max((n for n in range(0, 9) if n and b[-n:] == a[:n]), default=0)
        assert k <= 8
        shared += k > 0
    assert shared >= 5  # overlap is actually used


def test_sections_never_share_a_chunk_and_small_ones_stay_whole() -> None:
    chunks = chunk_document(document(), max_tokens=200, overlap=32, count=words)
    tiny = [c for c in chunks if c.title == "Doc > Long > Tiny"]
    assert [body(c) for c in tiny] == ["Just this."]


def test_a_huge_word_is_cut_by_characters() -> None:
    blob = "x" * 500
    doc = ParsedDocument("D", "text", (Section(("D",), (blob,)),))
    chunks = chunk_document(doc, max_tokens=50, overlap=0, count=word_counter)
    assert all(word_counter(c.text) <= 50 for c in chunks)
    assert "".join(body(c) for c in chunks) == blob


def test_an_over_long_heading_path_is_shortened() -> None:
    path = ("Title", *(f"level {i} heading with many words" for i in range(10)), "Leaf")
    doc = ParsedDocument("Title", "text", (Section(path, ("short text",)),))
    (chunk,) = chunk_document(doc, max_tokens=32, overlap=0, count=words)
    assert chunk.title == "Title > … > Leaf"
    assert words(chunk.text) <= 32


def test_overlap_must_stay_below_the_budget() -> None:
    with pytest.raises(ValueError):
        chunk_document(document(), max_tokens=10, overlap=10, count=words)
