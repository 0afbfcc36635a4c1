"""The fast token path (:mod:`deja.upstream.kv.tokens`) against the tokenizer's own encoding:
on rendered conversations as the replica renders them, on texts built to trip it, and its
run-time check turning it off when it disagrees."""

from __future__ import annotations

import random

import pytest
from tokenizers import Tokenizer

from deja.kvcache.blockhash import external_key
from deja.upstream.kv import tokens as kvtokens
from deja.upstream.kv.match import PromptBlocks
from deja.upstream.kv.tokens import TextTokens
from sim.engine import render_chat
from tests.kvsupport import HASHER, TOKENIZER, bare_tokenizer


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return bare_tokenizer()


def whole(tokenizer: Tokenizer, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False).ids)


SAFE = ["Hello", "world", "don't", "e-mail", "x1y2", "3.14", "snake_case", "CamelCase", "(a)",
        "[b]", "{c}", "#tag", "@user", "50%", "a+b=c", "~tilde", "`tick`", "unbelievable",
        "antidisestablishment", "q?", "!!", "...", "tab\there", "line\nbreak", "  spaces  ",
        "UPPER", "MiXeD", "[cls", "sep]", "<|user|>\n", "x" * 120]  # fmt: skip
#: What the fast path must leave to the tokenizer: non-ASCII, controls, added tokens.
TRICKY = ["naïve", "日本", "🙂", "[CLS]", "[cls]", "x[SEP]y", "[Mask]", "\x01ctrl", "del\x7f",
          "cr\r\nlf", "\u00a0nbsp", "zwj\u200d", "\x0bvt", "\x1cfs", "nel\x85x"]  # fmt: skip


#: Non-ASCII the fast path takes piece by piece: accents, quotes, dashes, CJK, Unicode spaces,
#: a combining mark, a Greek question mark (NFD gives ";"), full-width forms, casing that
#: changes length.
UNICODE = ["don’t", "—", "“quoted”", "café", "naïve", "İstanbul", "straße", "ΩMEGA", "a\u037eb",
           "e\u0301", "\u0301lead", "日本語", "中文字", "🙂ok", "x\u00a0y", "p\u3000q", "r\u2028s",
           "ｆｕｌｌ", "［cls］", "zwj\u200dx", "…", "€5", "naïve.", "«fr»", "ǅ",
           "ﬁne"]  # fmt: skip


def sentence(rng: random.Random, n: int, tricky: float = 0.02) -> str:
    return " ".join(rng.choice(TRICKY if rng.random() < tricky else SAFE) for _ in range(n))


def test_the_fast_path_equals_the_tokenizer_on_texts_built_to_trip_it(
    tokenizer: Tokenizer,
) -> None:
    fast = TextTokens(Tokenizer.from_file(TOKENIZER))
    assert fast.fast
    rng = random.Random(7)
    for _ in range(400):
        text = sentence(rng, rng.randint(0, 40))
        assert list(fast.encode(text)) == whole(tokenizer, text), text
    counts = fast.describe()
    assert fast.fast and counts["fast"] > 50 and counts["whole"] > 50  # both paths taken


def test_rendered_conversations_give_the_same_block_keys_as_the_whole_prompt(
    tokenizer: Tokenizer,
) -> None:
    blocks = PromptBlocks(Tokenizer.from_file(TOKENIZER), "sim", HASHER)
    rng = random.Random(3)
    vocab = [w for w in tokenizer.get_vocab() if w.isascii() and w.isalpha()][:4000]
    for chat in range(12):
        messages = [{"role": "system", "content": " ".join(rng.sample(vocab, 300))}]
        for turn in range(4):
            text = " ".join(rng.choice(vocab) + rng.choice(["", ".", ",", "!"]) for _ in range(300))
            messages.append({"role": "user", "content": f"Chat {chat} turn {turn}: {text}"})
            match = blocks.match("chat", {"messages": list(messages)}, "t:x")
            assert match is not None
            ids = whole(tokenizer, render_chat(messages))
            expected = [external_key(h) for h in HASHER.chain(ids, cache_salt="t:x")]
            assert list(match.keys) == expected and match.prompt_tokens == len(ids)
            answer = sentence(rng, 30, 0.1)  # some with non-ASCII, controls: the whole path
            messages.append({"role": "assistant", "content": answer})
    assert blocks.text_tokens.describe()["fast"] > 0


def test_unicode_text_takes_the_fast_path_with_the_tokenizers_ids(tokenizer: Tokenizer) -> None:
    fast = TextTokens(Tokenizer.from_file(TOKENIZER))
    rng = random.Random(5)
    plain = [w for w in SAFE if "[" not in w]  # "[": a non-ASCII text with it goes whole
    for _ in range(400):
        text = " ".join(rng.choice(UNICODE if rng.random() < 0.3 else plain) for _ in range(30))
        assert list(fast.encode(text)) == whole(tokenizer, text), text
    assert fast.fast and fast.describe()["whole"] == 0
    assert list(fast.encode("naïve [CLS] café")) == whole(tokenizer, "naïve [CLS] café")
    assert fast.describe()["whole"] == 1


def test_words_the_memo_never_saw_split_as_the_tokenizer_splits_them(
    tokenizer: Tokenizer,
) -> None:
    """A new word is split by WordPiece over the vocabulary, without the tokenizer: random
    strings, glued vocabulary pieces, words at and past the 100-character limit."""
    fast = TextTokens(Tokenizer.from_file(TOKENIZER))
    rng = random.Random(11)
    letters = "abcdefghijklmnopqrstuvwxyz0123456789"
    pieces = [w.removeprefix("##") for w in tokenizer.get_vocab() if w.isascii() and "[" not in w]
    for _ in range(1500):
        glued = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 6)))
        noise = "".join(rng.choice(letters) for _ in range(rng.randint(1, 24)))
        edge = "q" * rng.randint(98, 102)
        text = f"{glued} {noise.upper()} {edge}, {glued}{noise}!"
        assert list(fast.encode(text)) == whole(tokenizer, text), text
    assert fast.fast and fast.describe()["fast"] == 1500


def test_a_disagreement_turns_the_fast_path_off_and_returns_the_tokenizers_ids(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tokenizers.normalizers import BertNormalizer

    fast = TextTokens(Tokenizer.from_file(TOKENIZER))
    fast.encode("hello world")
    # the tokenizer changes under it (now case-sensitive): a misjudged pipeline
    cased = Tokenizer.from_file(TOKENIZER)
    cased.normalizer = BertNormalizer(lowercase=False)  # type: ignore[assignment]
    cased.no_padding()
    fast.tokenizer = cased
    monkeypatch.setattr(kvtokens, "VERIFY_FIRST", 0)
    monkeypatch.setattr(kvtokens, "VERIFY_EVERY", 1)
    assert list(fast.encode("Hello World")) == whole(cased, "Hello World")
    assert not fast.fast
    assert list(fast.encode("Hello again")) == whole(cased, "Hello again")


def test_the_word_memo_is_bounded(tokenizer: Tokenizer) -> None:
    fast = TextTokens(Tokenizer.from_file(TOKENIZER), max_words=50)
    rng = random.Random(1)
    vocab = [w for w in tokenizer.get_vocab() if w.isascii() and w.isalpha()][:2000]
    for _ in range(40):
        text = " ".join(rng.sample(vocab, 20))
        assert list(fast.encode(text)) == whole(tokenizer, text)
        assert fast.describe()["words"] <= 50
    long = " ".join(rng.sample(vocab, 80))  # more words than the memo holds: the whole path
    assert list(fast.encode(long)) == whole(tokenizer, long)


def test_other_tokenizer_families_take_the_whole_path() -> None:
    tok = Tokenizer.from_file(TOKENIZER)
    from tokenizers.pre_tokenizers import Whitespace

    tok.pre_tokenizer = Whitespace()  # type: ignore[assignment]
    other = TextTokens(tok)
    assert not other.fast
    assert list(other.encode("a b, c")) == list(tok.encode("a b, c", add_special_tokens=False).ids)


@pytest.mark.parametrize(
    "message",
    [
        {"role": "user", "content": "plain"},
        {"content": "key order", "role": "assistant"},
        {"role": "user", "content": "named", "name": "ann"},
        {"role": "tool", "content": "x", "tool_call_id": "c1"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": None},
        {"role": "user", "content": ""},
    ],
)
def test_a_plain_message_renders_as_its_segments_do(message: dict[str, object]) -> None:
    """render_message's shortcut for {"role", "content"} gives the segments' rendering."""
    from deja.chat.template import message_segments, render_message

    assert render_message(message) == "".join(t for t, _ in message_segments(message, strict=True))


def test_a_message_without_a_role_is_refused_by_the_shortcut_too() -> None:
    from deja.chat.template import PromptError, render_message

    for message in ({"role": "", "content": "x"}, {"role": 3, "content": "x"}, {"content": "x"}):
        with pytest.raises(PromptError):
            render_message(message)
