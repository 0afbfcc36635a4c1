"""What the KV-routing tests share: the shipped WordPiece tokenizer as a model's
``tokenizer.json`` and the block hasher the simulator is configured with."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer

from deja.kvcache.blockhash import BlockHasher

TOKENIZER = str(Path(__file__).resolve().parents[1] / "deja/models/verifier/tokenizer.json")
HASHER = BlockHasher("sha256", "0", 16)


def bare_tokenizer() -> Tokenizer:
    """The tokenizer as the replica runs it: no padding, no truncation."""
    tok = Tokenizer.from_file(TOKENIZER)
    tok.no_padding()
    tok.no_truncation()
    return tok
