"""Exact-cache keys: stable under key order, different whenever an answer-changing field differs."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from deja.cache.keys import NON_SEMANTIC_FIELDS, cache_key

json_scalars = st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant"]), "content": st.text(max_size=40)}
    ),
    min_size=1,
    max_size=4,
)
OUTPUT_FIELDS = [
    "temperature",
    "top_p",
    "max_tokens",
    "stop",
    "seed",
    "tools",
    "tool_choice",
    "response_format",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "n",
    "top_k",
    "max_completion_tokens",
    "reasoning_effort",
    "guided_json",
]
bodies = st.fixed_dictionaries(
    {"model": st.text(min_size=1, max_size=10), "messages": messages},
    optional={name: json_values for name in OUTPUT_FIELDS},
)


def _reverse_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _reverse_keys(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [_reverse_keys(v) for v in value]
    return value


@given(bodies)
def test_key_is_stable_under_key_order(body: dict[str, Any]) -> None:
    assert cache_key("t", "chat", body) == cache_key("t", "chat", _reverse_keys(body))


@given(bodies, st.sampled_from(OUTPUT_FIELDS), json_values)
def test_key_changes_with_any_output_affecting_field(
    body: dict[str, Any], field: str, value: Any
) -> None:
    changed = dict(body)
    changed[field] = value
    if field in body and body[field] == value:
        return  # not a change
    if field not in body and value is None:
        changed[field] = "explicit"
    assert cache_key("t", "chat", body) != cache_key("t", "chat", changed)


@given(bodies, st.sampled_from(sorted(NON_SEMANTIC_FIELDS)), json_values)
def test_key_ignores_delivery_fields(body: dict[str, Any], field: str, value: Any) -> None:
    assert cache_key("t", "chat", body) == cache_key("t", "chat", {**body, field: value})


@given(bodies)
def test_key_depends_on_tenant_and_endpoint(body: dict[str, Any]) -> None:
    key = cache_key("a", "chat", body)
    assert key != cache_key("b", "chat", body)
    assert key != cache_key("a", "completion", body)


@given(bodies, st.text(min_size=1, max_size=20))
def test_key_changes_with_message_content(body: dict[str, Any], extra: str) -> None:
    changed = {**body, "messages": [*body["messages"], {"role": "user", "content": extra}]}
    assert cache_key("t", "chat", body) != cache_key("t", "chat", changed)


def test_integer_and_float_sampling_values_share_a_key() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert cache_key("t", "chat", {**body, "temperature": 1}) == cache_key(
        "t", "chat", {**body, "temperature": 1.0}
    )
    assert cache_key("t", "chat", {**body, "temperature": 1}) != cache_key(
        "t", "chat", {**body, "temperature": 0.5}
    )
