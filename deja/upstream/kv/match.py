"""A request's prompt as the block keys its model's vLLM replicas would cache it under.

Per model (``kv_models``): a local ``tokenizer.json`` (the ``tokenizers`` package, never a
download), a chat template, the block size and vLLM's hash settings. A chat is rendered
message by message, each message's text tokenized on its own and the token ids concatenated:
the templates below start every message with a marker the tokenizer splits on, so this equals
tokenizing the whole rendering (``tests/unit/test_kvroute.py`` checks it on the shipped
tokenizer). Then vLLM's chain hash (:mod:`deja.kvcache.blockhash`), with the tenant's
``cache_salt`` in the first block.

Templates: ``sim`` (the replica simulator's ``<|role|>\\n{content}\\n`` … ``<|assistant|>\\n``)
and ``chatml`` (``<|im_start|>{role}\\n{content}<|im_end|>\\n`` … ``<|im_start|>assistant\\n``,
as Qwen's models use). Jinja templates are not run; a request this cannot render exactly (tools
with ``chatml``, non-text parts, a batch of prompts, a string completion prompt) gets no keys,
and the router falls back to the prefix-hash ring for it.

Cost: a short last message (under ``SHORT_LAST_MESSAGE`` characters: a new question) is not
tokenized at all, since its blocks cannot be resident anywhere yet; two memos keep the rest
short. Message texts → token ids (bounded in tokens; a new text's ids come from
:class:`~deja.upstream.kv.tokens.TextTokens`, a word memo equal to the tokenizer where its
pipeline is reproduced exactly), and
conversation prefixes (the messages so far, with the salt) → the chain state (keys, last
hash, leftover tokens), so turn N+1 of a conversation tokenizes and hashes only its new
messages, and a static system prompt is tokenized once. Measured: ``bench/kv_routing.py``.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tokenizers import Tokenizer

from deja.chat.template import GENERATION_PROMPT, PromptError, render_message
from deja.kvcache.blockhash import BlockHasher, external_key
from deja.upstream.kv.tokens import TextTokens

__all__ = ["BlockMatch", "PromptBlocks", "TemplateName"]

TemplateName = Literal["sim", "chatml"]

_DEFAULT_MEMO_TOKENS = 4_000_000
#: A last message shorter than this (characters, ~256 tokens) is not tokenized (see ``_chat``).
SHORT_LAST_MESSAGE = 1024
_DEFAULT_MEMO_KEYS = 1_000_000


@dataclass(frozen=True, slots=True)
class BlockMatch:
    """The block keys of a prompt's full blocks, and its length in tokens."""

    keys: array[int]
    prompt_tokens: int
    block_size: int

    def mostly(self, blocks: int) -> bool:
        """A replica holding ``blocks`` of these holds at least half of the prompt (the rule
        for a holder's capacity floor, its place first, and the admission's holder queue)."""
        return blocks > 0 and 2 * blocks * self.block_size >= self.prompt_tokens


@dataclass(frozen=True, slots=True)
class _Chain:
    keys: array[int]
    parent: bytes | None
    tail: tuple[int, ...]
    tokens: int
    #: What each message of the prefix was (its content, or its rendering): a memo hit is
    #: checked against it, so a hash collision of the cheap signatures costs a miss, never
    #: wrong keys.
    source: tuple[Any, ...] = ()


_EMPTY = _Chain(array("Q"), None, (), 0)
_PLAIN = frozenset({"role", "content"})


def _identity(message: Any, render: Any) -> tuple[Any, Any]:
    """A message's memo signature (cheap: never the whole text) and what verifies it."""
    if isinstance(message, Mapping) and message.keys() <= _PLAIN:
        content = message.get("content")
        if isinstance(content, str):
            head, tail = content[:64], content[-64:]
            return (message.get("role"), len(content), head, tail), content
    rendered = render(message)
    return rendered, rendered


class _Unrenderable(Exception):
    """A message the template cannot render exactly."""


def _render_sim(message: Any) -> str:
    """One message as the simulator renders it (:mod:`deja.chat.template`, the one copy)."""
    try:
        return render_message(message)
    except PromptError as exc:
        raise _Unrenderable from exc


def _render_chatml(message: Any) -> str:
    if not isinstance(message, Mapping) or message.get("tool_calls"):
        raise _Unrenderable
    content = message.get("content")
    if isinstance(content, list):
        if not all(isinstance(p, Mapping) and p.get("type") == "text" for p in content):
            raise _Unrenderable
        content = "".join(str(p.get("text") or "") for p in content)
    elif content is None:
        content = ""
    elif not isinstance(content, str):
        raise _Unrenderable
    return f"<|im_start|>{message.get('role')}\n{content}<|im_end|>\n"


_TEMPLATES = {
    "sim": (_render_sim, GENERATION_PROMPT),
    "chatml": (_render_chatml, "<|im_start|>assistant\n"),
}


class PromptBlocks:
    """Block keys of requests to one model (one per configured model; no I/O)."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        template: TemplateName,
        hasher: BlockHasher,
        *,
        memo_tokens: int = _DEFAULT_MEMO_TOKENS,
        memo_keys: int = _DEFAULT_MEMO_KEYS,
    ) -> None:
        if template not in _TEMPLATES:
            raise ValueError(f"unknown chat template {template!r}; known: {', '.join(_TEMPLATES)}")
        self.text_tokens = TextTokens(tokenizer)  # (turns truncation and padding off)
        self.tokenizer = tokenizer
        self.template = template
        self._render, self._generation_prompt = _TEMPLATES[template]
        self.hasher = hasher
        self._texts: OrderedDict[str, array[int]] = OrderedDict()
        self._text_tokens = 0
        self._memo_tokens = memo_tokens
        self._chains: OrderedDict[int, _Chain] = OrderedDict()
        self._chain_keys = 0
        self._memo_keys = memo_keys

    @classmethod
    def from_file(cls, path: str, template: TemplateName, hasher: BlockHasher) -> PromptBlocks:
        return cls(Tokenizer.from_file(path), template, hasher)

    def match(self, endpoint: str, body: Mapping[str, Any], salt: str | None) -> BlockMatch | None:
        """The prompt's block keys, or None when it cannot be reproduced exactly."""
        try:
            if endpoint == "chat":
                chain = self._chat(body.get("messages"), salt, body.get("tools"))
            else:
                chain = self._completion(body.get("prompt"), salt)
        except _Unrenderable:
            return None
        if chain is None:
            return None
        return BlockMatch(chain.keys, chain.tokens, self.hasher.block_size)

    # ------------------------------------------------------------------ chat

    def _chat(self, messages: Any, salt: str | None, tools: Any) -> _Chain | None:
        if not isinstance(messages, list) or not messages:
            return None
        if tools and self.template != "sim":  # the simulator ignores tools; real templates don't
            return None
        render = self._render
        marks: list[int] = []
        sources: list[Any] = []
        mark = hash(salt)
        for message in messages:
            signature, source = _identity(message, render)
            mark = hash((mark, signature))
            marks.append(mark)
            sources.append(source)
        chains = self._chains
        chain, start = _EMPTY, 0
        for i in range(len(marks) - 1, -1, -1):
            found = chains.get(marks[i])
            if found is not None and all(
                a is b or a == b for a, b in zip(found.source, sources[: i + 1], strict=True)
            ):
                chains.move_to_end(marks[i])
                chain, start = found, i + 1
                break
        last = len(messages) - 1
        for i in range(start, len(messages)):
            text = render(messages[i])
            if i == last and len(text) < SHORT_LAST_MESSAGE:
                # A short new turn is new text: no replica can hold its blocks yet (a repeat is
                # the exact cache's), so it is not tokenized now; if the conversation goes on,
                # the next turn's request tokenizes it as part of its prefix.
                return _Chain(chain.keys, chain.parent, chain.tail, chain.tokens + len(text) // 4)
            chain = self._extend(chain, self._tokens(text), salt)
            chain = _Chain(
                chain.keys, chain.parent, chain.tail, chain.tokens, (*chain.source, sources[i])
            )
            self._remember(marks[i], chain)
        # A long last message was hashed: the generation prompt closes the chat (not memoised).
        return self._extend(chain, self._tokens(self._generation_prompt), salt)

    # ------------------------------------------------------------------ completions

    def _completion(self, prompt: Any, salt: str | None) -> _Chain | None:
        if (
            isinstance(prompt, list)
            and prompt
            and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
        ):
            return self._extend(_EMPTY, array("I", prompt) if max(prompt) < 2**32 else prompt, salt)
        return None  # a string is tokenized by vLLM with special tokens: not reproduced here

    # ------------------------------------------------------------------ internals

    def _tokens(self, text: str) -> array[int]:
        memo = self._texts
        ids = memo.get(text)
        if ids is not None:
            memo.move_to_end(text)
            return ids
        ids = self.text_tokens.encode(text)
        memo[text] = ids
        self._text_tokens += len(ids)
        while self._text_tokens > self._memo_tokens and memo:
            _, old = memo.popitem(last=False)
            self._text_tokens -= len(old)
        return ids

    def _extend(self, chain: _Chain, ids: Any, salt: str | None) -> _Chain:
        size = self.hasher.block_size
        tokens = chain.tail + tuple(ids)
        full = len(tokens) - len(tokens) % size
        keys, parent = chain.keys, chain.parent
        if full:
            first_block = len(chain.keys) == 0
            hashes = self.hasher.chain(
                tokens[:full], cache_salt=salt if first_block else None, parent=parent
            )
            keys = array("Q", chain.keys)
            keys.extend(external_key(h) for h in hashes)
            parent = hashes[-1]
        return _Chain(keys, parent, tokens[full:], chain.tokens + len(ids), chain.source)

    def _remember(self, mark: int, chain: _Chain) -> None:
        chains = self._chains
        if mark in chains:
            return
        chains[mark] = chain
        self._chain_keys += len(chain.keys)
        while self._chain_keys > self._memo_keys and chains:
            _, old = chains.popitem(last=False)
            self._chain_keys -= len(old.keys)
