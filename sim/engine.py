"""Pure logic of the simulated vLLM replica: tokenizer, prompt rendering, prefix cache and
deterministic answers. Nothing here does I/O or sleeps; the scheduler and the step-time model
live in :mod:`sim.scheduler` and :mod:`sim.cost`.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from deja.chat.template import PromptError, render_chat

__all__ = [
    "ANSWER_PREFIX",
    "Generation",
    "PrefixCache",
    "PromptError",
    "RenderedPrompt",
    "answer_digest",
    "answer_pieces",
    "answer_text",
    "generate",
    "render_chat",
    "render_completion_prompts",
    "tokenize",
]

_TOKEN_RE = re.compile(r"\w+|[^\w\s]")
_PIECE_RE = re.compile(r"\S+\s*")

ANSWER_PREFIX = "[simulated deja-sim] answer "
"""Every simulated answer starts with this, followed by ``answer_digest(prompt) + ": "``."""

_VOCAB: tuple[str, ...] = (
    "alpha", "amber", "anchor", "apple", "arrow", "aspen", "atlas", "autumn",
    "basil", "beacon", "birch", "bloom", "breeze", "bridge", "brook", "cedar",
    "cinder", "cloud", "comet", "copper", "coral", "crystal", "delta", "dune",
    "ember", "falcon", "fern", "field", "flint", "forest", "garnet", "glacier",
    "harbor", "hazel", "horizon", "island", "ivory", "jasper", "juniper", "lagoon",
    "lantern", "lemon", "lilac", "maple", "meadow", "mesa", "mint", "nebula",
    "oak", "ocean", "olive", "orbit", "pebble", "pine", "prairie", "quartz",
    "raven", "river", "sage", "shadow", "spruce", "summit", "thistle", "willow",
)  # fmt: skip


# --------------------------------------------------------------------------- tokenizer


@lru_cache(maxsize=65536)
def _piece_id(piece: str) -> int:
    return int.from_bytes(hashlib.blake2b(piece.encode(), digest_size=4).digest(), "little")


def tokenize(text: str) -> list[int]:
    """Toy tokenizer: split on ``\\w+|[^\\w\\s]`` and hash each piece to a 32-bit id.

    The ids come from blake2b, so they are stable across processes and machines.
    """
    return [_piece_id(piece) for piece in _TOKEN_RE.findall(text)]


# --------------------------------------------------------------------------- rendering


@dataclass(frozen=True, slots=True)
class RenderedPrompt:
    """One completion prompt: the text the answer derives from, and its token ids."""

    text: str
    token_ids: list[int]


def _is_token_list(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(t, int) and not isinstance(t, bool) for t in value
    )


def _from_token_ids(ids: list[int]) -> RenderedPrompt:
    return RenderedPrompt(text="<|token_ids|>" + " ".join(map(str, ids)), token_ids=list(ids))


def render_completion_prompts(prompt: Any) -> list[RenderedPrompt]:
    """Render a ``/v1/completions`` ``prompt``: a string, a list of strings, a list of
    token ids, or a list of token-id lists. Returns one :class:`RenderedPrompt` per prompt.

    A token-id prompt is used as is for the prefix cache; its text (from which the answer
    derives) is ``"<|token_ids|>"`` followed by the ids separated by spaces.
    """
    if isinstance(prompt, str):
        return [RenderedPrompt(text=prompt, token_ids=tokenize(prompt))]
    if isinstance(prompt, list) and prompt:
        if _is_token_list(prompt):
            return [_from_token_ids(prompt)]
        rendered: list[RenderedPrompt] = []
        for item in prompt:
            if isinstance(item, str):
                rendered.append(RenderedPrompt(text=item, token_ids=tokenize(item)))
            elif _is_token_list(item) and item:
                rendered.append(_from_token_ids(item))
            else:
                raise PromptError("each prompt must be a string or a list of token ids")
        return rendered
    raise PromptError("'prompt' must be a string, a list of strings or a list of token ids")


# --------------------------------------------------------------------------- answers


def answer_digest(prompt: str) -> str:
    """First 12 hex characters of sha256 of the full rendered prompt."""
    return hashlib.sha256(prompt.encode()).hexdigest()[:12]


@lru_cache(maxsize=4096)
def answer_text(prompt: str) -> str:
    """The full deterministic answer for a rendered prompt.

    ``"[simulated deja-sim] answer {digest}: "`` followed by 12–40 filler words chosen
    from a small vocabulary by a RNG seeded with the digest.
    """
    digest = answer_digest(prompt)
    rng = random.Random(int(digest, 16))
    count = rng.randint(12, 40)
    words = " ".join(rng.choice(_VOCAB) for _ in range(count))
    return f"{ANSWER_PREFIX}{digest}: {words}"


def answer_pieces(prompt: str) -> list[str]:
    """The answer split into completion "tokens": each word with its following space.

    ``"".join(answer_pieces(p)) == answer_text(p)``.
    """
    return _PIECE_RE.findall(answer_text(prompt))


@dataclass(frozen=True, slots=True)
class Generation:
    """What the simulated model generates for one sequence."""

    pieces: list[str]
    finish_reason: str

    @property
    def text(self) -> str:
        """The generated text (the pieces concatenated)."""
        return "".join(self.pieces)

    @property
    def num_tokens(self) -> int:
        """Completion tokens: one per piece."""
        return len(self.pieces)


def generate(prompt: str, max_tokens: int | None = None, *, ignore_eos: bool = False) -> Generation:
    """Generate the answer for ``prompt``; ``max_tokens`` truncates it to that many
    pieces (the last one without its trailing space) with ``finish_reason="length"``,
    otherwise the reason is ``"stop"``.

    ``ignore_eos`` (vLLM's sampling extra, used by load generators to fix the output length)
    keeps generating past the answer's end, repeating its last words, up to ``max_tokens``.
    """
    pieces = answer_pieces(prompt)
    if ignore_eos and max_tokens is not None and max_tokens > len(pieces):
        tail = [p.strip() + " " for p in pieces[-5:]]
        extra = (tail[i % len(tail)] for i in range(max_tokens - len(pieces)))
        pieces = [*pieces[:-1], pieces[-1].strip() + " ", *extra]
        pieces[-1] = pieces[-1].rstrip()
        return Generation(pieces=pieces, finish_reason="length")
    if max_tokens is not None and max_tokens < len(pieces):
        kept = pieces[: max(max_tokens, 0)]
        if kept:
            kept[-1] = kept[-1].rstrip()
        return Generation(pieces=kept, finish_reason="length")
    return Generation(pieces=pieces, finish_reason="stop")


# --------------------------------------------------------------------------- prefix cache


_ROOT_HASH = b"\x00" * 16


def _block_hash(parent: bytes, block: Sequence[int]) -> bytes:
    h = hashlib.blake2b(parent, digest_size=16)
    h.update(",".join(map(str, block)).encode())
    return h.digest()


class PrefixCache:
    """vLLM-style automatic prefix cache over full blocks of ``block_size`` tokens.

    A block is identified by a chained hash (of its parent block's hash and its own token
    ids), so a block only matches when the whole prefix before it matches too. At most
    ``capacity`` blocks are kept; the least recently used block is evicted first.
    Counters are in tokens, like vLLM's ``prefix_cache_queries`` / ``prefix_cache_hits``.
    """

    def __init__(self, block_size: int, capacity: int) -> None:
        if block_size < 1 or capacity < 1:
            raise ValueError("block_size and capacity must be >= 1")
        self.block_size = block_size
        self.capacity = capacity
        self._blocks: OrderedDict[bytes, None] = OrderedDict()
        self.queries = 0
        """Prompt tokens looked up so far."""
        self.hits = 0
        """Prompt tokens found cached so far."""
        self.evictions = 0
        """Blocks evicted so far (LRU)."""

    def __len__(self) -> int:
        return len(self._blocks)

    def block_hashes(self, tokens: Sequence[int]) -> list[bytes]:
        """Chained hashes of the full blocks of ``tokens`` (a trailing partial block has none)."""
        hashes: list[bytes] = []
        parent = _ROOT_HASH
        size = self.block_size
        for start in range(0, len(tokens) - size + 1, size):
            parent = _block_hash(parent, tokens[start : start + size])
            hashes.append(parent)
        return hashes

    def __contains__(self, block_hash: object) -> bool:
        return block_hash in self._blocks

    def lookup_and_insert(self, tokens: Sequence[int]) -> int:
        """Return how many leading prompt tokens were already cached (the hit stops at the
        first missing block), then insert or touch all full blocks and evict LRU blocks
        beyond the capacity.
        """
        hashes = self.block_hashes(tokens)
        hit_blocks = 0
        for block_hash in hashes:
            if block_hash not in self._blocks:
                break
            hit_blocks += 1
        hit_tokens = hit_blocks * self.block_size
        self.queries += len(tokens)
        self.hits += hit_tokens
        for block_hash in hashes:
            if block_hash in self._blocks:
                self._blocks.move_to_end(block_hash)
            else:
                self._blocks[block_hash] = None
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)
            self.evictions += 1
        return hit_tokens
