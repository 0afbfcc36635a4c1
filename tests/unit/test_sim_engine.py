"""Unit tests of the simulator's pure logic (sim.engine), no I/O."""

from __future__ import annotations

import hashlib

import pytest

from sim.engine import (
    ANSWER_PREFIX,
    PrefixCache,
    PromptError,
    answer_digest,
    answer_pieces,
    answer_text,
    generate,
    render_chat,
    render_completion_prompts,
    tokenize,
)


def test_tokenizer_splits_words_and_punctuation() -> None:
    assert len(tokenize("Hello, world!")) == 4
    assert tokenize("Hello, world!") == tokenize("Hello ,   world !")
    assert tokenize("a a")[0] == tokenize("a a")[1]
    assert tokenize("") == []


def test_tokenizer_is_stable_across_processes() -> None:
    # Ids come from blake2b of each piece (not the per-process salted hash()).
    def expected(piece: str) -> int:
        return int.from_bytes(hashlib.blake2b(piece.encode(), digest_size=4).digest(), "little")

    assert tokenize("stable ids, please") == [expected(p) for p in ("stable", "ids", ",", "please")]


def test_render_chat_handles_content_shapes() -> None:
    text = render_chat(
        [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url"}]},
            {"role": "assistant", "content": None},
        ]
    )
    assert "<|system|>\nbe brief\n" in text
    assert "look" in text and "[image_url]" in text
    assert text.endswith("<|assistant|>\n")
    with pytest.raises(PromptError):
        render_chat([])
    with pytest.raises(PromptError):
        render_chat([{"content": "no role"}])


def test_multi_turn_rendering_keeps_a_token_prefix() -> None:
    first = [{"role": "user", "content": "hi there"}]
    second = [*first, {"role": "assistant", "content": "hello"}, {"role": "user", "content": "ok"}]
    a, b = tokenize(render_chat(first)), tokenize(render_chat(second))
    # The first turn minus its generation prompt tag is a prefix of the second turn.
    tag = len(tokenize("<|assistant|>"))
    assert b[: len(a) - tag] == a[:-tag]


def test_render_completion_prompts() -> None:
    [one] = render_completion_prompts("hi")
    assert one.token_ids == tokenize("hi") and one.text == "hi"
    assert len(render_completion_prompts(["a", "b"])) == 2
    [ids] = render_completion_prompts([1, 2, 3])
    assert ids.token_ids == [1, 2, 3]
    assert len(render_completion_prompts([[1, 2], [3]])) == 2
    for bad in (None, 3, [], [{"x": 1}]):
        with pytest.raises(PromptError):
            render_completion_prompts(bad)


def test_prefix_cache_hits_same_prefix() -> None:
    cache = PrefixCache(block_size=4, capacity=100)
    tokens = list(range(10))  # two full blocks + a partial one
    assert cache.lookup_and_insert(tokens) == 0
    assert len(cache) == 2
    assert cache.lookup_and_insert(tokens) == 8
    assert cache.lookup_and_insert([*tokens[:8], 99, 98, 97, 96]) == 8
    assert cache.lookup_and_insert(tokens[:5]) == 4
    assert cache.queries == 10 + 10 + 12 + 5
    assert cache.hits == 8 + 8 + 4


def test_prefix_cache_chained_hashes() -> None:
    cache = PrefixCache(block_size=4, capacity=100)
    cache.lookup_and_insert([1, 2, 3, 4, 5, 6, 7, 8])
    # Same second block behind a different first block: no hit at all.
    assert cache.lookup_and_insert([9, 9, 9, 9, 5, 6, 7, 8]) == 0
    # A miss in the first block stops the hit even if later blocks were cached.
    assert (
        cache.block_hashes([1, 2, 3, 4, 5, 6, 7, 8])[1]
        != cache.block_hashes([9, 9, 9, 9, 5, 6, 7, 8])[1]
    )


def test_prefix_cache_lru_eviction() -> None:
    cache = PrefixCache(block_size=2, capacity=3)
    a, b, c, d = [1, 1], [2, 2], [3, 3], [4, 4]
    for blk in (a, b, c):
        cache.lookup_and_insert(blk)
    assert cache.lookup_and_insert(a) == 2  # touch a: b is now least recently used
    cache.lookup_and_insert(d)  # evicts b
    assert len(cache) == 3 and cache.evictions == 1
    assert cache.lookup_and_insert(a) == 2
    assert cache.lookup_and_insert(c) == 2
    assert cache.lookup_and_insert(d) == 2
    assert cache.lookup_and_insert(b) == 0


def test_answer_is_deterministic_and_prompt_specific() -> None:
    prompt = "<|user|>\nWhat is the capital of France?\n<|assistant|>\n"
    text = answer_text(prompt)
    assert text == answer_text(prompt)
    digest = hashlib.sha256(prompt.encode()).hexdigest()[:12]
    assert answer_digest(prompt) == digest
    assert text.startswith(f"{ANSWER_PREFIX}{digest}: ")
    assert text.startswith("[simulated deja-sim] answer ")
    words = text.split(": ", 1)[1].split()
    assert 12 <= len(words) <= 40
    assert answer_digest(prompt + " ") != digest
    assert len({answer_digest(f"prompt {i}") for i in range(200)}) == 200
    assert "".join(answer_pieces(prompt)) == text


def test_generate_truncates_with_length() -> None:
    full = generate("p")
    assert full.finish_reason == "stop" and full.text == answer_text("p")
    assert full.num_tokens == len(answer_text("p").split())
    short = generate("p", max_tokens=3)
    assert short.finish_reason == "length" and short.num_tokens == 3
    assert short.text == " ".join(answer_text("p").split()[:3])
    assert generate("p", max_tokens=full.num_tokens).finish_reason == "stop"


def test_generate_ignore_eos_runs_to_max_tokens() -> None:
    natural = generate("p").num_tokens
    long = generate("p", max_tokens=natural + 50, ignore_eos=True)
    assert long.num_tokens == natural + 50 and long.finish_reason == "length"
    assert long.text.startswith(answer_text("p")) and not long.text.endswith(" ")
    assert generate("p", max_tokens=3, ignore_eos=True).num_tokens == 3
