"""Token ids of a message's text as the model's ``tokenizer.json`` gives them, faster.

A Hugging Face tokenizer costs about 1.7 µs per word here (104 µs for a 60-word message, 3.7 µs
for one word), most of it the pipeline run for every word of every call. For the tokenizers
whose pipeline this module can reproduce, :class:`TextTokens` splits the text on whitespace
itself and looks each piece's ids up in a memo, so a new chat turn costs a ``str.split`` and
one dict lookup per piece.

Reproduced: a ``BertNormalizer`` (or none) with a ``BertPreTokenizer`` and a ``WordPiece``
model (BERT-style ``tokenizer.json`` files, as the simulator's). That pipeline never joins
what whitespace separates, so a whitespace-separated piece has the same ids alone as in its
text; the memo is keyed by the piece (lowercased first when the normalizer lowercases and
the text is ASCII). The pieces the memo lacks get their ids

- when ASCII, here: every non-alphanumeric character isolated (all printable ASCII that is not
  a letter or a digit is BERT punctuation), then WordPiece's greedy longest-match-first rule
  over the vocabulary (:class:`_WordPiece`: 0.2 µs for a vocabulary word, 1–6 µs for one it
  must split; a cold 1,500-token text in 1.9–3.2 ms against 4.4 ms through the
  tokenizer in one sitting);
- otherwise (accents, curly quotes, dashes, CJK): from one tokenizer call over those pieces
  joined by spaces, each token assigned to its piece by offset.

The whole text goes through the tokenizer instead when it holds a control character other
than tab and newline (the normalizer deletes or maps them, and ``str.split`` disagrees with it
on some), or may hold an added token (``[CLS]``: matched before normalizing).

Checked: ``tests/unit/test_kv_tokens.py`` compares both paths on rendered conversations and on
adversarial texts, and at run time the first :data:`VERIFY_FIRST` fast encodings and one in
:data:`VERIFY_EVERY` after them are compared with the tokenizer's own; a mismatch turns the
fast path off for good (and is logged), so a tokenizer this module misjudges costs speed,
never wrong ids.

Memory: the memo holds at most ``max_words`` pieces (default 65,536; 130 bytes each measured
with ``tracemalloc``, so about 8 MiB) and is cleared when full.
"""

from __future__ import annotations

import json
import logging
import re
from array import array
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, cast

from tokenizers import Tokenizer

__all__ = ["VERIFY_EVERY", "VERIFY_FIRST", "TextTokens"]

log = logging.getLogger("deja.kvroute")

#: Fast encodings compared with the tokenizer's own at the start, then one in this many.
VERIFY_FIRST = 32
VERIFY_EVERY = 256
_DEFAULT_MAX_WORDS = 65_536

#: What sends a text to the tokenizer whole: a C0 control other than tab and newline, DEL,
#: and NEL (``str.split`` splits on NEL and \x1c-\x1f; the normalizer deletes them).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x85]")
_WORDS_LOWER = re.compile(r"[a-z0-9]+|[^a-z0-9\s]")
_WORDS_CASED = re.compile(r"[A-Za-z0-9]+|[^A-Za-z0-9\s]")


class _WordPiece:
    """One word's ids as the ``tokenizers`` crate's WordPiece model gives them: the longest
    vocabulary entry from the word's start, then from where it ended (with the continuing
    prefix, ``##``), and the unknown token for the whole word when a rest matches nothing or
    the word is longer than ``max_input_chars_per_word``."""

    __slots__ = ("max_chars", "prefix", "unk", "vocab")

    def __init__(self, model: dict[str, Any]) -> None:
        self.vocab: dict[str, int] = model["vocab"]
        self.prefix: str = model.get("continuing_subword_prefix") or "##"
        self.max_chars: int = int(model.get("max_input_chars_per_word") or 100)
        self.unk: int = self.vocab[model.get("unk_token") or "[UNK]"]

    def ids(self, word: str) -> list[int]:
        if len(word) > self.max_chars:
            return [self.unk]
        vocab, prefix = self.vocab, self.prefix
        out: list[int] = []
        start, n = 0, len(word)
        while start < n:
            end = n
            while end > start:
                found = vocab.get(word[start:end] if start == 0 else prefix + word[start:end])
                if found is not None:
                    out.append(found)
                    break
                end -= 1
            else:
                return [self.unk]
            start = end
        return out


@dataclass(frozen=True, slots=True)
class _Pipeline:
    """The part of a tokenizer's pipeline this module reproduces."""

    words: re.Pattern[str]  # the pre-tokenizer's words in ASCII (lowercased, when ``lower``)
    lower: bool
    added: re.Pattern[str] | None  # the added tokens' texts, any case
    #: Characters an added token starts with, both cases; a text with none of them holds no
    #: added token (a cheap test before ``added``).
    added_starts: frozenset[str]
    #: Whether a non-ASCII text may take the fast path: every added token starts with ASCII
    #: punctuation, which no other character normalizes to.
    unicode: bool
    wordpiece: _WordPiece

    def may_hold_added(self, text: str) -> bool:
        return any(c in text for c in self.added_starts)


def _pipeline(tokenizer: Tokenizer) -> _Pipeline | None:
    """The tokenizer's pipeline when it is one this module reproduces; else None."""
    spec = json.loads(tokenizer.to_str())
    normalizer = spec.get("normalizer")
    pre = spec.get("pre_tokenizer") or {}
    model = spec.get("model") or {}
    if pre.get("type") != "BertPreTokenizer" or model.get("type") != "WordPiece":
        return None
    if (model.get("unk_token") or "[UNK]") not in (model.get("vocab") or {}):
        return None
    if normalizer is None:
        lower = False
    elif normalizer.get("type") == "BertNormalizer":
        lower = bool(normalizer.get("lowercase", True))
    else:
        return None
    added = [a for t in spec.get("added_tokens") or () if (a := str(t.get("content") or ""))]
    # Any case: an added token matched in the normalized (lowercased) text is caught too.
    alternatives = "|".join(re.escape(a) for a in added)
    found = re.compile(alternatives, re.IGNORECASE) if alternatives else None
    starts = frozenset(c for a in added for c in (a[0].lower(), a[0].upper()))
    unicode = all(c.isascii() and not c.isalnum() and not c.isspace() for c in starts)
    words = _WORDS_LOWER if lower else _WORDS_CASED
    return _Pipeline(words, lower, found, starts, unicode, _WordPiece(model))


class TextTokens:
    """``tokenizer.encode(text, add_special_tokens=False).ids`` as an ``array('I')``."""

    def __init__(self, tokenizer: Tokenizer, *, max_words: int = _DEFAULT_MAX_WORDS) -> None:
        # A tokenizer.json may carry truncation and padding (the verifier's pads to 128): a
        # replica tokenizes a prompt whole, so both are turned off.
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self.tokenizer = tokenizer
        #: None: every text goes through the tokenizer (another family, or turned off).
        self._pipeline = _pipeline(tokenizer)
        #: word -> its ids as ``array('I')`` bytes: a text's ids are one ``bytes.join``.
        self._words: dict[str, bytes] = {}
        self._max_words = max_words
        #: Counters: fast encodings, whole-text encodings, fast ones verified.
        self.counts = {"fast": 0, "whole": 0, "verified": 0}

    @property
    def fast(self) -> bool:
        return self._pipeline is not None

    def encode(self, text: str) -> array[int]:
        pipeline = self._pipeline
        if pipeline is not None:
            ids = self._fast(pipeline, text)
            if ids is not None:
                return ids
        self.counts["whole"] += 1
        return self._whole(text)

    def _whole(self, text: str) -> array[int]:
        return array("I", self.tokenizer.encode(text, add_special_tokens=False).ids)

    def _fast(self, pipeline: _Pipeline, text: str) -> array[int] | None:
        """The ids from the memo; None where the text must go through the tokenizer whole."""
        if _CONTROL.search(text):
            return None
        if text.isascii():
            if (
                pipeline.added is not None
                and pipeline.may_hold_added(text)
                and pipeline.added.search(text)
            ):
                return None
            pieces = (text.lower() if pipeline.lower else text).split()
        elif pipeline.unicode and not pipeline.may_hold_added(text):
            pieces = text.split()
        else:
            return None
        if len(pieces) > self._max_words:
            return None
        parts = list(map(self._words.get, pieces))
        if None in parts:
            parts = self._learn(pipeline, pieces)
        ids = array("I")
        ids.frombytes(b"".join(cast("list[bytes]", parts)))  # no None after _learn
        counts = self.counts
        counts["fast"] += 1
        n = counts["fast"]
        if n <= VERIFY_FIRST or n % VERIFY_EVERY == 0:
            return self._verify(text, ids)
        return ids

    def _learn(self, pipeline: _Pipeline, pieces: list[str]) -> list[bytes | None]:
        """Each piece's ids, the pieces not in the memo worked out and remembered: the ASCII
        ones by WordPiece here, the rest in one call of the tokenizer."""
        memo = self._words
        missing = [p for p in dict.fromkeys(pieces) if p not in memo]
        if len(memo) + len(missing) > self._max_words:
            memo.clear()
            missing = list(dict.fromkeys(pieces))
        split, words, lower = pipeline.wordpiece.ids, pipeline.words, pipeline.lower
        rest = []
        for piece in missing:
            if piece.isascii():
                found = words.findall(piece.lower() if lower else piece)
                memo[piece] = array("I", [i for word in found for i in split(word)]).tobytes()
            else:
                rest.append(piece)
        if rest:
            self._learn_together(rest)
        return list(map(memo.get, pieces))

    def _learn_together(self, pieces: list[str]) -> None:
        """The pieces' ids from one tokenizer call over them joined by spaces (no token spans
        a space), each token going to the piece its offset falls in."""
        encoding = self.tokenizer.encode(" ".join(pieces), add_special_tokens=False)
        ends = list(accumulate(len(p) + 1 for p in pieces))  # each piece's end, its space too
        found: list[list[int]] = [[] for _ in pieces]
        index, end = 0, ends[0]
        for token, (start, _) in zip(encoding.ids, encoding.offsets, strict=True):
            while start >= end:  # offsets only grow
                index += 1
                end = ends[index]
            found[index].append(token)
        memo = self._words
        for piece, ids in zip(pieces, found, strict=True):
            memo[piece] = array("I", ids).tobytes()

    def _verify(self, text: str, ids: array[int]) -> array[int]:
        self.counts["verified"] += 1
        whole = self._whole(text)
        if whole != ids:
            self._off(f"disagreed on a {len(text)}-char text ({len(ids)} ids against {len(whole)})")
        return whole

    def tokenizer_only(self) -> None:
        """Send every text through the tokenizer from now on (a comparison's baseline)."""
        self._pipeline = None

    def _off(self, why: str) -> None:
        self._pipeline = None
        self._words.clear()
        log.warning("kv routing: the fast tokenizer path %s; it is off from now on", why)

    def describe(self) -> dict[str, Any]:
        return {"fast": self.fast, "words": len(self._words), **self.counts}
