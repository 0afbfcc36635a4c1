"""The RAG request path without I/O: the context order, the prompt template, the semantic
scope of a RAG request, the X-Deja-Corpus / X-Deja-Context-Id checks, the sources header."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from deja.cache.keys import cache_key
from deja.corpus.base import Chunk, RetrievedChunk, context_order, sources_of
from deja.corpus.prompt import context_block, with_context
from deja.errors import InvalidRequestError
from deja.request import CachePolicy, GatewayRequest
from deja.semantic.scope import semantic_query
from deja.upstream.prefix import PrefixConfig, prefix_hash
from middleware.retrieve import retrieval_query, source_records, sources_header
from middleware.validate import validate


def chunk(document: str, index: int, score: float, version: int = 1) -> RetrievedChunk:
    text = f"text of {document} part {index}"
    return RetrievedChunk(Chunk("t", "docs", document, version, index, text, "Guide"), score)


CHUNKS = [
    chunk("b.md", 2, 0.9),
    chunk("a.md", 7, 0.8),
    chunk("b.md", 0, 0.7),
    chunk("a.md", 1, 0.6),
]


def request(*messages: dict[str, Any], **kw: Any) -> GatewayRequest:
    body = {"model": "m", "messages": list(messages)}
    return validate("chat", orjson.dumps(body), tenant="t", policy=CachePolicy(), **kw)


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def test_context_order_is_document_then_index_never_score() -> None:
    ordered = [(r.chunk.document, r.chunk.index) for r in context_order(CHUNKS)]
    assert ordered == [("a.md", 1), ("a.md", 7), ("b.md", 0), ("b.md", 2)]
    shuffled = CHUNKS[:]
    for seed in range(5):
        random.Random(seed).shuffle(shuffled)
        rescored = [RetrievedChunk(r.chunk, random.Random(seed).random()) for r in shuffled]
        assert context_block(rescored) == context_block(CHUNKS)


def test_template_puts_static_prompt_then_instructions_then_context_first() -> None:
    body = {
        "model": "m",
        "temperature": 0,
        "messages": [{"role": "system", "content": "Be brief."}, user("How do I install?")],
    }
    built = with_context(body, CHUNKS, "STATIC PROMPT")
    system, rest = built["messages"][0], built["messages"][1:]
    assert system["role"] == "system"
    text = system["content"]
    assert text.index("STATIC PROMPT") < text.index("Be brief.") < text.index("Context:")
    assert (
        text.index("[a.md#1]\ntext of a.md part 1")
        < text.index("[a.md#7]")
        < text.index("[b.md#0]")
    )
    assert rest == [user("How do I install?")]
    assert built["temperature"] == 0 and body["messages"][0]["content"] == "Be brief."


def test_same_chunks_make_the_same_prefix_key_for_different_questions() -> None:
    config = PrefixConfig()
    one = with_context({"model": "m", "messages": [user("how to install?")]}, CHUNKS, "P")
    two = with_context({"model": "m", "messages": [user("installation steps")]}, CHUNKS[::-1], "P")
    other = with_context({"model": "m", "messages": [user("how to install?")]}, CHUNKS[:2], "P")
    assert prefix_hash("chat", one, config) == prefix_hash("chat", two, config)
    assert prefix_hash("chat", one, config) != prefix_hash("chat", other, config)


def test_empty_retrieval_says_so() -> None:
    built = with_context({"model": "m", "messages": [user("q")]}, [], "P")
    assert "no matching documents" in built["messages"][0]["content"]


def test_rag_scope_is_corpus_and_conversation_never_chunks() -> None:
    plain = semantic_query(request(user("how do I install?")), "conversation")
    docs = semantic_query(request(user("how do I install?"), corpus="docs"), "conversation")
    other = semantic_query(request(user("how do I install?"), corpus="other"), "conversation")
    assert plain and docs and other
    assert len({plain.scope, docs.scope, other.scope}) == 3


def test_context_id_replaces_the_context_hash() -> None:
    def scoped(system: str, context_id: str | None) -> Any:
        req = request({"role": "system", "content": system}, user("q?"), context_id=context_id)
        found = semantic_query(req, "conversation")
        assert found is not None
        return found.scope

    assert scoped("chunk A then B", "v7") == scoped("chunk B then A", "v7")
    assert scoped("chunk A then B", "v7") != scoped("chunk A then B", "v8")
    assert scoped("chunk A then B", None) != scoped("chunk B then A", None)


def test_exact_key_is_partitioned_by_corpus() -> None:
    plain = request(user("q"))
    docs = request(user("q"), corpus="docs")
    keys = {cache_key(r.tenant, r.endpoint, r.body, r.key_namespace) for r in (plain, docs)}
    assert len(keys) == 2
    # No namespace can forge the corpus partition: the separator never survives the check.
    for forged in ("\x1fcorpus=docs", "corpus=docs", "\u241fcorpus=docs"):
        try:
            req = request(user("q"), namespace=forged)
        except InvalidRequestError:
            continue
        assert cache_key(req.tenant, req.endpoint, req.body, req.key_namespace) not in keys


def test_corpus_defaults_and_checks() -> None:
    assert request(user("q"), model_corpus={"m": "handbook"}).corpus == "handbook"
    assert request(user("q"), default_corpus="all").corpus == "all"
    assert request(user("q"), corpus="mine", model_corpus={"m": "x"}).corpus == "mine"
    for bad in ("", "../etc", "a b", "x" * 65):
        with pytest.raises(InvalidRequestError) as info:
            request(user("q"), corpus=bad)
        assert info.value.param == "X-Deja-Corpus"
    with pytest.raises(InvalidRequestError):
        validate(
            "completion",
            orjson.dumps({"model": "m", "prompt": "q"}),
            tenant="t",
            policy=CachePolicy(),
            corpus="docs",
        )
    with pytest.raises(InvalidRequestError):
        request(user("q"), context_id="\n")


def test_retrieval_query_is_the_last_user_message() -> None:
    req = request(
        user("first"),
        {"role": "assistant", "content": "a"},
        user("second"),
        {"role": "assistant", "content": None, "tool_calls": []},
    )
    assert retrieval_query(req) == "second"


def test_sources_header_and_records() -> None:
    refs = tuple(
        sources_of([chunk("b.md", 0, 1, 3), chunk("a,b é.md", 1, 1), chunk("b.md", 4, 1, 3)])
    )
    records = source_records(refs)
    assert [r["document"] for r in records] == ["a,b é.md", "b.md"]
    header = sources_header(records)
    assert header == "a%2Cb%20%C3%A9.md@1, b.md@3"
    header.encode("latin-1")


def test_corpus_filter_is_parsed_sorted_and_part_of_the_scope() -> None:
    one = request(user("q"), corpus="docs", corpus_filter="lang=en, product=deja")
    two = request(user("q"), corpus="docs", corpus_filter="product=deja,lang=en")
    other = request(user("q"), corpus="docs", corpus_filter="lang=es")
    assert one.corpus_filter == (("lang", "en"), ("product", "deja")) == two.corpus_filter
    scopes = [semantic_query(r, "conversation") for r in (one, two, other)]
    assert scopes[0] == scopes[1] != scopes[2]
    assert one.key_namespace == two.key_namespace != other.key_namespace
    for bad in ("lang", "=en", "a=b=c", ",".join(f"k{i}=v" for i in range(9))):
        with pytest.raises(InvalidRequestError) as info:
            request(user("q"), corpus="docs", corpus_filter=bad)
        assert info.value.param == "X-Deja-Corpus-Filter"
    with pytest.raises(InvalidRequestError):
        request(user("q"), corpus_filter="lang=en")  # no corpus to filter
