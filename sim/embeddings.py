"""``POST /v1/embeddings`` of the simulated replica, in vLLM's response shape.

vLLM serves embeddings from a pooling model (``vllm serve MODEL --task embed``) at the same
OpenAI route: ``{"id": "embd-…", "object": "list", "created", "model", "data": [{"index",
"object": "embedding", "embedding"}], "usage": {"prompt_tokens", "total_tokens"}}``, with
``encoding_format`` ``float`` (a list) or ``base64`` (little-endian float32 bytes; the openai
SDK asks for it by default and decodes it). The simulator's vector is a deterministic function
of the model and the input text (unit length, :data:`EMBEDDING_DIM` floats), so a test can tell
the right cached vector from a wrong one. It carries no meaning: never measure retrieval on it.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import secrets
import time
from typing import Any

import numpy as np
import orjson
from starlette.requests import Request
from starlette.responses import Response

from sim.responses import json_response
from sim.state import SimHandlers

__all__ = ["EMBEDDING_DIM", "EmbeddingHandlers", "sim_vector"]

#: Length of the simulator's vectors (all-MiniLM-L6-v2's, a common small vLLM embed model).
EMBEDDING_DIM = 384
#: Characters per simulated token (the usage figure; the simulator has no tokenizer).
CHARS_PER_TOKEN = 4


def sim_vector(model: str, text: str, dim: int = EMBEDDING_DIM) -> np.ndarray[Any, Any]:
    """The simulator's embedding of ``text``: seeded by a hash of model and text, unit length."""
    seed = int.from_bytes(hashlib.sha256(f"{model}\x00{text}".encode()).digest()[:8], "little")
    vector = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return vector / np.linalg.norm(vector)


def _inputs(value: Any) -> list[str] | None:
    """The input as a list of strings; None when it is none of str, list of str (token ids
    are not simulated)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return list(value)
    return None


class EmbeddingHandlers(SimHandlers):
    """The embeddings route of one simulated replica (faults apply as to generation)."""

    async def embeddings(self, request: Request) -> Response:
        faults = self.state.faults
        if faults.added_latency_ms > 0:
            await asyncio.sleep(faults.added_latency_ms / 1000.0)
        if faults.error_rate > 0 and self.state.rng.random() < faults.error_rate:
            status = faults.error_status
            return self.error(status, "injected fault", "server_error" if status >= 500 else "")
        try:
            payload = orjson.loads(await request.body())
        except orjson.JSONDecodeError as exc:
            return self.error(400, f"Invalid JSON body: {exc}")
        if not isinstance(payload, dict):
            return self.error(400, "The request body must be a JSON object.")
        model = payload.get("model")
        if model != self.config.model:
            return self.error(
                404, f"The model `{model}` does not exist.", param="model", code="model_not_found"
            )
        texts = _inputs(payload.get("input"))
        if texts is None:
            return self.error(400, "'input' must be a string or a non-empty list of strings.")
        encoding = payload.get("encoding_format") or "float"
        if encoding not in ("float", "base64"):
            return self.error(400, "'encoding_format' must be float or base64.")
        data = []
        for index, text in enumerate(texts):
            vector = sim_vector(self.config.model, text)
            shown: Any = (
                base64.b64encode(vector.astype("<f4").tobytes()).decode()
                if encoding == "base64"
                else vector.tolist()
            )
            data.append({"index": index, "object": "embedding", "embedding": shown})
        tokens = sum(max(1, len(t) // CHARS_PER_TOKEN) for t in texts)
        body = {
            "id": f"embd-{secrets.token_hex(16)}",
            "object": "list",
            "created": int(time.time()),
            "model": self.config.model,
            "data": data,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0},
        }
        return json_response(body, 200, self.replica_header)
