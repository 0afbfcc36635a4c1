"""Optional embedder on sentence-transformers (``pip install deja[st]``, which brings PyTorch).

The model is loaded from a local path, or by a name already in the local Hugging Face cache:
nothing is downloaded at run time. sentence-transformers is imported only by
:func:`load_st_embedder`, never when this module is imported.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from deja.errors import EmbedderError

INSTALL_HINT = "install the optional extra: pip install 'deja[st]'"


class StEmbedder:
    """The :class:`~deja.embedding.base.Embedder` on a ``SentenceTransformer`` model. Inference
    runs on a dedicated single-thread executor owned by the embedder."""

    def __init__(self, model: Any, *, model_id: str, dim: int) -> None:
        self.model_id = model_id
        self.dim = dim
        self._model = model
        self._closed = False
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="deja-embed-st")

    def _encode(self, texts: list[str]) -> list[list[float]]:
        if self._model is None:
            raise EmbedderError("the embedder is closed")
        vectors = self._model.encode(
            texts, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
        return [list(map(float, row)) for row in vectors]

    async def embed(self, text: str) -> list[float]:
        """One text's unit vector, computed on the embedder's thread."""
        if self._closed:
            raise EmbedderError("the embedder is closed")
        loop = asyncio.get_running_loop()
        try:
            vectors = await loop.run_in_executor(self._executor, self._encode, [text])
        except EmbedderError:
            raise
        except Exception as exc:
            raise EmbedderError(f"embedding failed: {exc}") from exc
        return vectors[0]

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        """Unit vectors for ``texts``, in the caller's thread."""
        if self._closed:
            raise EmbedderError("the embedder is closed")
        if not texts:
            return []
        try:
            return self._encode(texts)
        except EmbedderError:
            raise
        except Exception as exc:
            raise EmbedderError(f"embedding failed: {exc}") from exc

    async def close(self) -> None:
        """Stop the thread (after a running call) and drop the model."""
        if self._closed:
            return
        self._closed = True
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(
            None, lambda: self._executor.shutdown(wait=True, cancel_futures=True)
        )
        self._model = None


def load_st_embedder(model: str | None, *, device: str = "cpu") -> StEmbedder:
    """Load a sentence-transformers model from a local path or the local Hugging Face cache
    (offline: never downloads). Raises :class:`EmbedderError` with an install hint when
    sentence-transformers is missing, or when the model is not available locally."""
    if not model:
        raise EmbedderError(
            "embedder=sentence-transformers needs embedder_model: a local model path or the "
            "name of a model already in the local Hugging Face cache"
        )
    # Before the import: huggingface_hub reads these when it is first imported.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        st = importlib.import_module("sentence_transformers")
    except ImportError as exc:
        raise EmbedderError(
            f"embedder=sentence-transformers needs the sentence-transformers package; "
            f"{INSTALL_HINT} ({exc})"
        ) from exc
    local = Path(model).expanduser()
    source = str(local) if local.exists() else model
    try:
        st_model = st.SentenceTransformer(source, device=device, local_files_only=True)
    except Exception as exc:
        raise EmbedderError(
            f"cannot load the sentence-transformers model {model!r} from local files "
            f"(nothing is downloaded at run time): {exc}"
        ) from exc
    # sentence-transformers 6 renamed the method; 3-5 only have the old name.
    dimension = getattr(st_model, "get_embedding_dimension", None)
    dim = dimension() if dimension is not None else st_model.get_sentence_embedding_dimension()
    if not dim:
        raise EmbedderError(f"the model {model!r} does not say its embedding dimension")
    name = local.name if local.exists() else model
    return StEmbedder(st_model, model_id=f"st-{name.replace('/', '-')}", dim=int(dim))
