"""The semantic scope: everything besides the text of the last user message that could change
the answer makes its own scope (images and other parts, ``name``), so the same words about
another image are never served the first image's answer."""

from __future__ import annotations

from typing import Any

import orjson

from deja.request import CachePolicy
from deja.semantic.scope import SemanticQuery, beyond_text, semantic_query
from middleware.validate import validate

TEXT = {"type": "text", "text": "What is in this picture?"}


def image(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def query(*messages: dict[str, Any]) -> SemanticQuery | None:
    body = {"model": "m", "messages": list(messages)}
    req = validate("chat", orjson.dumps(body), tenant="t", policy=CachePolicy())
    return semantic_query(req, "conversation")


def test_plain_text_keeps_the_context_only_scope() -> None:
    plain = query({"role": "user", "content": "What is in this picture?"})
    parts = query({"role": "user", "content": [TEXT]})
    assert plain is not None and parts is not None
    assert plain.scope == parts.scope  # text parts only: same question, same scope
    assert beyond_text({"role": "user", "content": "hi"}) == {}


def test_another_image_is_another_scope() -> None:
    cat = query({"role": "user", "content": [TEXT, image("data:image/png;base64,Y2F0")]})
    dog = query({"role": "user", "content": [TEXT, image("data:image/png;base64,ZG9n")]})
    cat_again = query({"role": "user", "content": [TEXT, image("data:image/png;base64,Y2F0")]})
    text_only = query({"role": "user", "content": [TEXT]})
    assert cat is not None and dog is not None and cat_again is not None and text_only
    assert cat.text == dog.text == text_only.text  # the embedded text is the same...
    assert cat.scope != dog.scope  # ...but the image is not
    assert cat.scope != text_only.scope
    assert cat.scope == cat_again.scope  # identical images may share an answer


def test_name_and_other_message_fields_count() -> None:
    alice = query({"role": "user", "name": "alice", "content": "What is my plan?"})
    bob = query({"role": "user", "name": "bob", "content": "What is my plan?"})
    nobody = query({"role": "user", "content": "What is my plan?"})
    assert alice is not None and bob is not None and nobody is not None
    assert len({alice.scope, bob.scope, nobody.scope}) == 3


def test_tool_results_skip_the_layer_and_earlier_ones_scope_it() -> None:
    call = {"role": "assistant", "tool_calls": [{"id": "1", "type": "function"}]}
    assert query({"role": "user", "content": "q"}, call, {"role": "tool", "content": "42"}) is None
    first = query(
        {"role": "user", "content": "q"},
        call,
        {"role": "tool", "content": "42"},
        {"role": "user", "content": "and then?"},
    )
    second = query(
        {"role": "user", "content": "q"},
        call,
        {"role": "tool", "content": "43"},
        {"role": "user", "content": "and then?"},
    )
    assert first is not None and second is not None and first.scope != second.scope
