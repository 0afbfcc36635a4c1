"""Token ids of a message's text as the model's ``tokenizer.json`` gives them, faster.

A Hugging Face tokenizer costs about 2 µs per word here (``bench/kv_routing.py``), most of
it the pipeline run for every word of every call. For the tokenizers whose pipeline this
module can reproduce exactly, :class:`TextTokens` splits the text into the pre-tokenizer's
words itself and looks each word's ids up in a word memo (filled by the tokenizer itself,
one word at a time), so a new chat turn costs a regex pass and one dict lookup per word.

Reproduced exactly: a ``BertNormalizer`` (or none) with a ``BertPreTokenizer`` and a
``WordPiece`` model (BERT-style ``tokenizer.json`` files, as the simulator's), and only for
text that is printable ASCII with spaces, tabs and newlines, that contains none of the
tokenizer's added tokens. There the pipeline is: lowercase (when the normalizer does);
split on whitespace; isolate every non-alphanumeric character (all printable ASCII that is
not a letter or a digit is BERT punctuation); WordPiece each word on its own. Everything
else (another tokenizer family, a non-ASCII text, a control character, an added token's
text) goes through the tokenizer whole, as before.

Checked: ``tests/unit/test_kv_tokens.py`` compares both paths on rendered conversations and on
adversarial texts, and at run time the first :data:`VERIFY_FIRST` fast encodings and one in
:data:`VERIFY_EVERY` after them are compared with the tokenizer's own; a mismatch turns the
fast path off for good (and is logged), so a tokenizer this module misjudges costs speed,
never wrong ids.

Memory: the word memo holds at most ``max_words`` words (default 65,536; about 150 bytes
each, so about 10 MiB) and is cleared when full.
"""

from __future__ import annotations

import json
import logging
import re
from array import array
from typing import Any

from tokenizers import Tokenizer

__all__ = ["VERIFY_EVERY", "VERIFY_FIRST", "TextTokens"]

log = logging.getLogger("deja.kvroute")

#: Fast encodings compared with the tokenizer's own at the start, then one in this many.
VERIFY_FIRST = 32
VERIFY_EVERY = 256
_DEFAULT_MAX_WORDS = 65_536

#: Text the fast path may take: printable ASCII, space, tab, newline.
_UNSAFE = re.compile(r"[^\x20-\x7e\t\n]")
_WORDS_LOWER = re.compile(r"[a-z0-9]+|[^a-z0-9\s]")
_WORDS_CASED = re.compile(r"[A-Za-z0-9]+|[^A-Za-z0-9\s]")


def _fast_words(
    tokenizer: Tokenizer,
) -> tuple[re.Pattern[str], bool, re.Pattern[str] | None] | None:
    """The word pattern, whether to lowercase, and a pattern of the added tokens, when the
    tokenizer's pipeline is one this module reproduces; else None."""
    spec = json.loads(tokenizer.to_str())
    normalizer = spec.get("normalizer")
    pre = spec.get("pre_tokenizer") or {}
    model = spec.get("model") or {}
    if pre.get("type") != "BertPreTokenizer" or model.get("type") != "WordPiece":
        return None
    if normalizer is None:
        lower = False
    elif normalizer.get("type") == "BertNormalizer":
        lower = bool(normalizer.get("lowercase", True))
    else:
        return None
    added = [str(t.get("content") or "") for t in spec.get("added_tokens") or ()]
    # Any case: an added token matched in the normalized (lowercased) text is caught too.
    alternatives = "|".join(re.escape(a) for a in added if a)
    found = re.compile(alternatives, re.IGNORECASE) if alternatives else None
    return (_WORDS_LOWER if lower else _WORDS_CASED), lower, found


class _Misjudged(Exception):
    """The tokenizer did not split a batch of words as this module expects."""


class TextTokens:
    """``tokenizer.encode(text, add_special_tokens=False).ids`` as an ``array('I')``."""

    def __init__(self, tokenizer: Tokenizer, *, max_words: int = _DEFAULT_MAX_WORDS) -> None:
        # A tokenizer.json may carry truncation and padding (the verifier's pads to 128): a
        # replica tokenizes a prompt whole, so both are turned off.
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self.tokenizer = tokenizer
        fast = _fast_words(tokenizer)
        self.fast = fast is not None
        self._pattern, self._lower, self._added = fast or (_WORDS_CASED, False, None)
        #: word -> its ids as ``array('I')`` bytes: a text's ids are one ``bytes.join``.
        self._words: dict[str, bytes] = {}
        self._max_words = max_words
        #: Counters: fast encodings, whole-text encodings, fast ones verified.
        self.counts = {"fast": 0, "whole": 0, "verified": 0}

    def encode(self, text: str) -> array[int]:
        if self.fast and text.isascii() and not _UNSAFE.search(text):
            ids = self._fast(text)
            if ids is not None:
                return ids
        self.counts["whole"] += 1
        return self._whole(text)

    def _whole(self, text: str) -> array[int]:
        return array("I", self.tokenizer.encode(text, add_special_tokens=False).ids)

    def _fast(self, text: str) -> array[int] | None:
        if self._added is not None and self._added.search(text):
            return None
        lowered = text.lower() if self._lower else text
        words = self._pattern.findall(lowered)
        if len(words) > self._max_words:
            return None
        memo = self._words
        try:
            pieces = list(map(memo.__getitem__, words))
        except KeyError:
            try:
                pieces = self._learn(words)
            except _Misjudged:
                self._off("split a batch of words otherwise")
                return None
        ids = array("I")
        ids.frombytes(b"".join(pieces))
        counts = self.counts
        counts["fast"] += 1
        n = counts["fast"]
        if n <= VERIFY_FIRST or n % VERIFY_EVERY == 0:
            return self._verify(text, ids)
        return ids

    def _learn(self, words: list[str]) -> list[bytes]:
        """Each word's ids, the words not in the memo tokenized in one call (joined by
        spaces, every one a word of its own; ``word_ids`` tells whose ids are whose)."""
        memo = self._words
        missing = list(dict.fromkeys(w for w in words if w not in memo))
        if len(memo) + len(missing) > self._max_words:
            memo.clear()
            missing = list(dict.fromkeys(words))
        encoding = self.tokenizer.encode(" ".join(missing), add_special_tokens=False)
        pieces: list[list[int]] = [[] for _ in missing]
        for index, token in zip(encoding.word_ids, encoding.ids, strict=True):
            if index is None or index >= len(pieces):
                raise _Misjudged
            pieces[index].append(token)
        if not all(pieces):
            raise _Misjudged
        for word, ids in zip(missing, pieces, strict=True):
            memo[word] = array("I", ids).tobytes()
        return list(map(memo.__getitem__, words))

    def _verify(self, text: str, ids: array[int]) -> array[int]:
        self.counts["verified"] += 1
        whole = self._whole(text)
        if whole != ids:
            self._off(f"disagreed on a {len(text)}-char text ({len(ids)} ids against {len(whole)})")
        return whole

    def _off(self, why: str) -> None:
        self.fast = False
        self._words.clear()
        log.warning("kv routing: the fast tokenizer path %s; it is off from now on", why)

    def describe(self) -> dict[str, Any]:
        return {"fast": self.fast, "words": len(self._words), **self.counts}
