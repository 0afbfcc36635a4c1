"""Cutting a parsed document into chunks: by structure first, then by a token budget.

Each section (the text under one heading path) is chunked on its own: its paragraphs are packed
greedily into chunks of at most ``max_tokens`` tokens, the heading path included, so every
chunk starts with where it comes from (``deja > Admin API and CLI``) and reads on its own; a
paragraph is cut (at sentences, then lines, then words, then characters) only when it alone is
over the budget. Consecutive chunks of a section share up to ``overlap`` tokens: the next one
starts with the tail of the previous one, so a sentence cut at a boundary is still whole in one
of them. Chunks never span sections.

Tokens are counted with the embedder's own tokenizer when deja has it (the MiniLM WordPiece
tokenizer, ``tokenizer_counter``), so a chunk never exceeds what the model reads (256 word
pieces for MiniLM; the default budget of 200 leaves room for the question-side prompt of other
embedders and for the tokenizer's special tokens). For another embedder ``word_counter``
approximates: words and punctuation marks, times 1.25 — WordPiece gave 1.17-1.24 pieces per
such unit on this project's docs (prose with tables and code); the factor errs on the long side
so that chunks stay under the model's limit.

Everything here is a pure function of its inputs (the counter is passed in), so it is tested
without a model.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tokenizers import Tokenizer

from deja.corpus.parsing import ParsedDocument, Section

TokenCounter = Callable[[str], int]

#: Pieces per word-or-punctuation unit (see the module docstring).
WORD_FACTOR = 1.25
_UNITS = re.compile(r"\w+|[^\w\s]")
_SENTENCE_END = re.compile(r"(?<=[.!?:;])\s+")
HEADING_SEPARATOR = " > "


def word_counter(text: str) -> int:
    """The word approximation of a token count (no tokenizer needed)."""
    return math.ceil(len(_UNITS.findall(text)) * WORD_FACTOR)


def tokenizer_counter(tokenizer: Tokenizer) -> TokenCounter:
    """Exact counts with ``tokenizer`` (special tokens excluded); truncation is turned off on
    the tokenizer, so pass one that is used for nothing else."""
    tokenizer.no_truncation()
    tokenizer.no_padding()

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    return count


@dataclass(frozen=True, slots=True)
class ChunkText:
    """One chunk before it is embedded: ``text`` begins with ``title`` (the heading path)."""

    index: int
    title: str
    text: str


@dataclass(frozen=True, slots=True)
class _Unit:
    text: str
    tokens: int
    joiner: str  # what separates it from the unit before it: "\n\n" between paragraphs


def recipe(max_tokens: int, overlap: int, counter_name: str) -> str:
    """Names the chunking of a document: stored with it, so a change of settings re-chunks."""
    return f"chunks-v1:{max_tokens}:{overlap}:{counter_name}"


def chunk_document(
    doc: ParsedDocument, *, max_tokens: int, overlap: int, count: TokenCounter
) -> list[ChunkText]:
    """The document's chunks in reading order, indexed from 0; each at most ``max_tokens``
    tokens (heading path included) by ``count``."""
    if not 0 <= overlap < max_tokens:
        raise ValueError("overlap must be at least 0 and below max_tokens")
    chunks: list[ChunkText] = []
    for section in doc.sections:
        title = _fit_heading(section.path, max_tokens // 2, count)
        budget = max_tokens - count(title + "\n\n")
        for body in _pack(_units(section, budget, count), budget, overlap, count):
            chunks.append(ChunkText(len(chunks), title, f"{title}\n\n{body}"))
    return chunks


def _fit_heading(path: Sequence[str], limit: int, count: TokenCounter) -> str:
    """The heading path, shortened to ``First > … > Last`` and then cut if over ``limit``."""
    title = HEADING_SEPARATOR.join(path)
    if count(title) <= limit:
        return title
    if len(path) > 2:
        title = HEADING_SEPARATOR.join((path[0], "…", path[-1]))
        if count(title) <= limit:
            return title
    return _prefix(title.split(" "), limit, count, " ") or title[: max(1, limit)]


def _units(section: Section, budget: int, count: TokenCounter) -> list[_Unit]:
    units: list[_Unit] = []
    for paragraph in section.paragraphs:
        tokens = count(paragraph)
        if tokens <= budget:
            units.append(_Unit(paragraph, tokens, "\n\n"))
            continue
        for i, piece in enumerate(_split(paragraph, budget, count)):
            units.append(_Unit(piece, count(piece), "\n\n" if i == 0 else " "))
    return units


def _split(text: str, budget: int, count: TokenCounter) -> list[str]:
    """``text`` cut into pieces of at most ``budget`` tokens: at sentence ends, then at line
    ends, then between words, then (a single huge "word") between characters."""
    pieces: list[str] = []
    for sentence in _SENTENCE_END.split(text):
        if count(sentence) <= budget:
            pieces.append(sentence)
            continue
        for line in sentence.split("\n"):
            if not line.strip():
                continue
            rest = line.split(" ")
            while rest:
                head = _prefix(rest, budget, count, " ")
                if head:
                    pieces.append(head)
                    rest = rest[len(head.split(" ")) :]
                else:  # the first word alone is over the budget
                    word = rest.pop(0)
                    while word:
                        part = _prefix(list(word), budget, count, "") or word[0]
                        pieces.append(part)
                        word = word[len(part) :]
    return [p for p in pieces if p.strip()]


def _prefix(parts: list[str], budget: int, count: TokenCounter, sep: str) -> str:
    """The longest ``sep``-joined prefix of ``parts`` within ``budget`` tokens ("" if none).
    Binary search: a longer prefix never has fewer tokens."""
    lo, hi = 0, len(parts)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(sep.join(parts[:mid])) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return sep.join(parts[:lo])


def _tail(text: str, limit: int, count: TokenCounter) -> str:
    """The longest run of whole words ending ``text`` within ``limit`` tokens."""
    words = text.split(" ")
    lo, hi = 0, min(len(words), limit)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(" ".join(words[-mid:])) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[-lo:]) if lo else ""


def _pack(units: list[_Unit], budget: int, overlap: int, count: TokenCounter) -> list[str]:
    """Greedy packing of units into bodies of at most ``budget`` tokens, each body after the
    first starting with up to ``overlap`` tokens from the end of the one before."""
    bodies: list[str] = []
    text, tokens = "", 0
    for unit in units:
        if text and tokens + unit.tokens > budget:
            bodies.append(text)
            tail = _tail(text, min(overlap, budget - unit.tokens), count) if overlap else ""
            text, tokens = tail, count(tail) if tail else 0
        text = f"{text}{unit.joiner}{unit.text}" if text else unit.text
        tokens += unit.tokens
    if text:
        bodies.append(text)
    return bodies
