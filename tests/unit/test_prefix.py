"""Prefix hashes: what makes two requests share a routing key, and what keeps them apart."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deja.upstream.prefix import PrefixConfig, chat_tokens, prefix_hash, tokenize_into
from sim.engine import render_chat

STATIC = PrefixConfig()
BLOCKS = PrefixConfig(mode="blocks", block_size=4, max_blocks=3)  # small: 12 tokens make the key

SYSTEM = {"role": "system", "content": "You are a terse assistant for ACME support."}
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Find an order.",
            "parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
        },
    }
]


def chat(*messages: dict[str, Any], model: str = "m", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": list(messages), **extra}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


turns = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant"]), "content": st.text(max_size=40)}
    ),
    max_size=5,
)


# --------------------------------------------------------------------------- static mode


@given(turns, turns)
@settings(max_examples=50, deadline=None)
def test_static_ignores_user_and_assistant_turns(
    a: list[dict[str, Any]], b: list[dict[str, Any]]
) -> None:
    assert prefix_hash("chat", chat(SYSTEM, *a), STATIC) == prefix_hash("chat", chat(SYSTEM, *b))
    assert prefix_hash("chat", chat(*a, tools=TOOLS)) == prefix_hash("chat", chat(*b, tools=TOOLS))


def test_static_depends_on_system_prompt_tools_and_model() -> None:
    base = prefix_hash("chat", chat(SYSTEM, user("hi")))
    assert base is not None and len(base) == 16
    other_system = {"role": "system", "content": "You are verbose."}
    assert prefix_hash("chat", chat(other_system, user("hi"))) != base
    assert prefix_hash("chat", chat(SYSTEM, user("hi"), tools=TOOLS)) != base
    assert prefix_hash("chat", chat(SYSTEM, user("hi"), model="other")) != base
    # A second instruction message, or a developer message instead of a system one, differs too.
    developer = {"role": "developer", "content": SYSTEM["content"]}
    assert prefix_hash("chat", chat(developer, user("hi"))) != base
    assert prefix_hash("chat", chat(SYSTEM, developer, user("hi"))) != base
    # Only the leading instructions count: a system message later on does not move the key, so
    # a conversation keeps its replica as it grows.
    assert prefix_hash("chat", chat(SYSTEM, user("hi"), {"role": "system", "content": "x"})) == base


def test_static_without_system_or_tools_has_no_prefix() -> None:
    assert prefix_hash("chat", chat(user("hi"))) is None
    assert prefix_hash("chat", chat(user("hi"), tools=[])) is None
    assert prefix_hash("chat", chat(user("hi"), SYSTEM)) is None  # not leading
    assert prefix_hash("chat", chat()) is None
    assert prefix_hash("chat", {"model": "m"}) is None
    assert prefix_hash("chat", chat(user("hi"), tools=TOOLS)) is not None


def test_key_order_does_not_matter() -> None:
    one = {"model": "m", "messages": [SYSTEM, user("q")], "tools": TOOLS, "temperature": 0}
    reordered_tools = [
        {"function": {"parameters": t["function"]["parameters"], "name": "lookup",
                      "description": "Find an order."}, "type": "function"}
        for t in TOOLS
    ]  # fmt: skip
    two = {
        "tools": reordered_tools,
        "messages": [{"content": SYSTEM["content"], "role": "system"}, user("q")],
        "model": "m",
    }
    for config in (STATIC, BLOCKS):
        assert prefix_hash("chat", one, config) == prefix_hash("chat", two, config)


def test_static_sampling_parameters_do_not_matter() -> None:
    base = prefix_hash("chat", chat(SYSTEM, user("q")))
    assert prefix_hash("chat", chat(SYSTEM, user("q"), temperature=0.3, max_tokens=5)) == base


# --------------------------------------------------------------------------- blocks mode


@given(st.text(max_size=80), st.text(max_size=80))
@settings(max_examples=50, deadline=None)
def test_blocks_same_first_k_blocks_share_the_key(suffix_a: str, suffix_b: str) -> None:
    # The system prompt (14 tokens) and a shared RAG document run past the key's 8 blocks of 4
    # tokens: whatever the user asks after them is ignored.
    config = PrefixConfig(mode="blocks", block_size=4, max_blocks=8)
    document = "Context: " + " ".join(f"fact{i}" for i in range(30))
    a = chat(SYSTEM, user(document + " " + suffix_a))
    b = chat(SYSTEM, user(document), user(suffix_b))
    key = prefix_hash("chat", a, config)
    assert key is not None
    assert key == prefix_hash("chat", b, config)
    other_document = document.replace("fact3", "rumour3")
    assert key != prefix_hash("chat", chat(SYSTEM, user(other_document + suffix_a)), config)


def test_blocks_different_early_block_changes_the_key() -> None:
    document = " ".join(f"w{i}" for i in range(40))
    base = prefix_hash("chat", chat(user(document)), BLOCKS)
    tokens = document.split()
    # The role tag "<|user|>" is 5 tokens, so word i is token i + 5: block (i + 5) // 4.
    for position in (0, 3, 6):  # blocks 1, 2 and 2
        changed = tokens.copy()
        changed[position] = "CHANGED"
        assert prefix_hash("chat", chat(user(" ".join(changed))), BLOCKS) != base, position
    assert prefix_hash("chat", chat({"role": "tool", "content": document}), BLOCKS) != base
    # A change after the first 3 blocks (12 tokens) is past the key.
    for position in (7, 20):
        changed = tokens.copy()
        changed[position] = "CHANGED"
        assert prefix_hash("chat", chat(user(" ".join(changed))), BLOCKS) == base, position


def test_blocks_depend_on_model_tools_roles_and_images() -> None:
    doc = " ".join(f"w{i}" for i in range(40))
    base = prefix_hash("chat", chat(user(doc)), BLOCKS)
    assert prefix_hash("chat", chat(user(doc), model="other"), BLOCKS) != base
    assert prefix_hash("chat", chat(user(doc), tools=TOOLS), BLOCKS) != base
    assert prefix_hash("chat", chat({"role": "system", "content": doc}), BLOCKS) != base

    def with_image(url: str) -> str | None:
        parts = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": doc}]
        return prefix_hash("chat", chat({"role": "user", "content": parts}), BLOCKS)

    assert with_image("http://x/1.png") != with_image("http://x/2.png")
    assert with_image("http://x/1.png") == with_image("http://x/1.png")


def test_blocks_text_parts_equal_plain_content() -> None:
    parts = [{"type": "text", "text": "hello there"}, {"type": "text", "text": "general"}]
    as_parts = prefix_hash("chat", chat({"role": "user", "content": parts}), BLOCKS)
    assert as_parts == prefix_hash("chat", chat(user("hello there\ngeneral")), BLOCKS)


def test_blocks_short_prompts_hash_their_partial_block() -> None:
    config = PrefixConfig(mode="blocks", block_size=16, max_blocks=32)
    # "<|user|>\nhi\n<|assistant|>\n" is 11 tokens: less than one block.
    short = prefix_hash("chat", chat(user("hi")), config)
    assert short is not None
    assert short != prefix_hash("chat", chat(user("ho")), config)
    assert short == prefix_hash("chat", chat(user("hi")), config)
    assert prefix_hash("completion", {"model": "m", "prompt": "hi"}, config) is not None
    assert prefix_hash("completion", {"model": "m", "prompt": "a"}, config) != (
        prefix_hash("completion", {"model": "m", "prompt": "b"}, config)
    )


def test_blocks_only_full_blocks_count_once_there_is_one() -> None:
    config = PrefixConfig(mode="blocks", block_size=4, max_blocks=8)
    # 6 tokens: one full block [a b c d] and a partial one that is not part of the key.
    one = prefix_hash("completion", {"model": "m", "prompt": "a b c d e f"}, config)
    assert one == prefix_hash("completion", {"model": "m", "prompt": "a b c d x"}, config)
    assert one != prefix_hash("completion", {"model": "m", "prompt": "a b c d e f g h"}, config)


@given(
    st.text(alphabet=st.sampled_from([*"ab_1.,!?-( )\n\t", "é", "中", "\u00a0", "²"])),
    st.integers(1, 64),
)
@settings(max_examples=200, deadline=None)
def test_tokenizer_is_the_documented_regex_up_to_the_limit(text: str, limit: int) -> None:
    out: list[str] = []
    tokenize_into(out, text, limit)
    assert out == re.findall(r"\w+|[^\w\s]", text)[:limit]


def test_tokenizer_takes_only_what_it_needs_from_a_long_piece() -> None:
    blob = "x," * 100_000  # one whitespace-free piece of 200k tokens
    out = ["earlier"]
    assert tokenize_into(out, "a " + blob, 10)
    assert out == ["earlier", "a", *(["x", ","] * 4)]


def test_chat_rendering_matches_the_simulator() -> None:
    messages = [
        SYSTEM,
        {"role": "user", "name": "bob", "content": [{"type": "text", "text": "a, b!"}, "c"]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "1", "function": {}}]},
        {"role": "tool", "tool_call_id": "1", "content": "42"},
    ]
    expected = re.findall(r"\w+|[^\w\s]", render_chat(messages))
    assert chat_tokens(messages, 10_000) == expected
    assert chat_tokens(messages, 7) == expected[:7]


# --------------------------------------------------------------------------- completions


@pytest.mark.parametrize("config", [STATIC, BLOCKS])
def test_completion_prompts(config: PrefixConfig) -> None:
    def key(prompt: Any, model: str = "m") -> str | None:
        return prefix_hash("completion", {"model": model, "prompt": prompt}, config)

    doc = " ".join(f"w{i}" for i in range(40))
    assert key(doc + " question one") == key(doc + " question two")
    assert key(doc) != key("x " + doc)
    assert key(doc) != key(doc, model="other")
    # A batch routes by its first prompt.
    assert key([doc + " a", "something else"]) == key(doc)
    # Token ids are used as they are, and never collide with the same digits as text.
    ids = list(range(100))
    assert key(ids) == key([*ids[:96], 999])  # the same full blocks (6 of 16, or 3 of 4)
    assert key(ids) != key([999, *ids[1:]])
    assert key([ids, [7, 8]]) == key(ids)
    assert key(ids) != key(" ".join(map(str, ids)))
    # Nothing to hash.
    assert key("") is None
    assert key([]) is None
    assert key(None) is None


def test_completion_static_falls_back_to_blocks() -> None:
    body = {"model": "m", "prompt": "Summarise: " + "x " * 200}
    assert prefix_hash("completion", body, STATIC) == prefix_hash(
        "completion", body, PrefixConfig(mode="blocks")
    )


def test_long_prompts_only_read_what_they_need() -> None:
    config = PrefixConfig(mode="blocks")
    huge = "word " * 200_000
    assert prefix_hash("completion", {"model": "m", "prompt": huge}, config) == prefix_hash(
        "completion", {"model": "m", "prompt": huge[:5000]}, config
    )


@pytest.mark.parametrize(
    "kwargs",
    [{"mode": "nope"}, {"block_size": 0}, {"max_blocks": 0}],
)
def test_invalid_config_is_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        PrefixConfig(**kwargs)


def test_huge_integers_do_not_break_hashing() -> None:
    tools = [{"type": "function", "function": {"name": "f", "x": 2**80}}]
    assert prefix_hash("chat", chat(user("q"), tools=tools)) is not None
