"""A trainable checkpoint from a shipped int8 verifier, for when its fp32 checkpoint is gone (the
repository keeps only the int8 ONNX in ``deja/models/verifier/``; a checkpoint is ~90 MB).

Every ``MatMulInteger`` weight is dequantised per output channel (``(q - zero_point) * scale``)
and named after the bias its output is added to; biases and layer norms are fp32 in the file
already. The word, position and token-type embeddings are quantised per tensor in the file, so
they are not read from it: training froze them (``train --freeze-layers 0``), so they are the
base model's, rounded to fp16 as the GPU run had them. The result scores like the int8 model
(validation AUC a little higher, as fp32 is); exported again by ``training.verifier.export`` it
gives back the shipped file byte for byte (checked on sha256 cc38c04e…). ``train --init``
starts from it::

    .venv-train/bin/python -m training.verifier.recover --out runs/recovered.pt
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from training.verifier.common import ARTIFACTS
from training.verifier.model import CrossEncoder, build

#: How far downstream of a MatMulInteger its bias Add may be (cast, scale multiply, add).
BIAS_DEPTH = 4


def _bias_of(node: Any, consumers: dict[str, list[Any]], inits: dict[str, Any]) -> str | None:
    """The ``….bias`` initializer added to ``node``'s output within ``BIAS_DEPTH`` nodes."""
    frontier, depth = [node], 0
    while frontier and depth <= BIAS_DEPTH:
        nxt = []
        for n in frontier:
            for out in n.output:
                for c in consumers[out]:
                    bias = next((x for x in c.input if x.endswith(".bias") and x in inits), None)
                    if bias is not None:
                        return bias
                    nxt.append(c)
        frontier, depth = nxt, depth + 1
    return None


def recover(onnx_path: Path) -> CrossEncoder:
    """The verifier of ``onnx_path`` as a torch model (eval mode)."""
    graph = onnx.load(str(onnx_path)).graph
    inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    consumers: dict[str, list[Any]] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            consumers[name].append(node)
    model = build(pretrained=True)
    state = model.state_dict()
    weights: dict[str, torch.Tensor] = {}
    for node in graph.node:
        if node.op_type != "MatMulInteger" or node.input[1] not in inits:
            continue
        stem = node.input[1].removesuffix("_quantized")
        q = inits[node.input[1]].astype(np.float32)
        w = (q - inits[stem + "_zero_point"].astype(np.float32)) * inits[stem + "_scale"]
        bias = _bias_of(node, consumers, inits)
        if bias is None:
            raise ValueError(f"{onnx_path}: no bias follows {node.input[1]}")
        name = bias.removesuffix(".bias") + ".weight"
        if name not in state or tuple(state[name].shape) != w.T.shape:
            raise ValueError(f"{onnx_path}: {node.input[1]} does not fit {name}")
        weights[name] = torch.from_numpy(np.ascontiguousarray(w.T, dtype=np.float32))
    for name, value in inits.items():
        if name in state and value.dtype == np.float32:
            weights[name] = torch.from_numpy(value.copy()).reshape(state[name].shape)
    for name in state.keys() - weights.keys():
        if not name.startswith("bert.embeddings.") or "LayerNorm" in name:
            raise ValueError(f"{onnx_path}: nothing in the file for {name}")
        weights[name] = state[name].half().float()  # frozen in training: the base, at fp16
    model.load_state_dict(weights)
    return model.eval()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--onnx", type=Path, default=ARTIFACTS / "verifier-int8.onnx")
    ap.add_argument("--out", type=Path, required=True, help="the checkpoint to write (.pt)")
    args = ap.parse_args(argv)
    model = recover(args.onnx)
    meta = {"head_input": model.head_input, "recovered_from": str(args.onnx)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model": model.state_dict(), "meta": meta}, args.out)
    print(f"[recover] {args.onnx} -> {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
