"""Deriving the re-quantised (dynamic int8) model from the installed int8 file, once, with a
probe check that the derived model still agrees with the source on this CPU."""

from __future__ import annotations

import base64
import json
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

from deja.embedding.onnx.encoder import (
    DIM,
    Encoder,
    Vector,
    make_session,
)
from deja.errors import EmbedderError
from deja.files import file_sha256

log = logging.getLogger("deja.embedder")

#: Names the derivation recipe in the cache file name: change it whenever the derivation does.
#: pc2: pc1 without the softmax NaN guards (same vectors, bit for bit; ~9% less CPU a chunk).
#: pc3: pc2 with 7-bit weights (``reduce_range``), so that CPUs with and without VNNI give the
#: same vectors (see :func:`derive_dynint8`).
RECIPE = "pc3"
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


def derived_model_path(cache_dir: Path, source: Path) -> Path:
    """Where the re-quantised model derived from ``source`` is cached."""
    return cache_dir / f"minilm-dynint8-{RECIPE}-{file_sha256(source)[:12]}.onnx"


# --- deriving the re-quantised model ---------------------------------------------------------


class DerivationError(EmbedderError):
    """The re-quantised model could not be derived or failed its check."""


def _probe_vectors(encoder: Encoder, texts: tuple[str, ...] = _PROBE_TEXTS) -> Vector:
    return encoder.each(list(texts))


def _check_probes(encoder: Encoder, reference: Vector) -> float:
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


def drop_nan_guards(graph: Any) -> int:
    """Remove the exporter's ``Where(IsNaN(p), 0, p)`` after each attention softmax: it only
    acts on a fully masked row, which a text of at least one token (``[CLS]``) never has, so
    the vectors stay bit for bit the same, and the two ops cost ~9% of a 150-token run.
    Returns how many guards were removed."""
    producer = {out: node for node in graph.node for out in node.output}
    replaced: dict[str, str] = {}
    dropped: list[Any] = []
    for node in graph.node:
        if node.op_type != "Where" or len(node.input) != 3:
            continue
        test = producer.get(node.input[0])
        probs = producer.get(node.input[2])
        if test is None or test.op_type != "IsNaN" or test.input[0] != node.input[2]:
            continue
        if probs is None or probs.op_type != "Softmax":
            continue
        replaced[node.output[0]] = node.input[2]
        dropped += [node, test]
    outputs = {out.name for out in graph.output}
    if outputs & set(replaced):
        return 0  # a guard's result is a graph output: leave the graph as it is
    for node in dropped:
        graph.node.remove(node)
    for node in graph.node:
        for i, name in enumerate(node.input):
            node.input[i] = replaced.get(name, name)
    return len(replaced)


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
    """Write ``dest``: ``source`` with its MatMul weights folded to fp32, its softmax NaN
    guards removed, and re-quantised by ONNX Runtime's dynamic int8 quantisation (per output
    channel, 7-bit weights). The file carries the source model's vectors of a few probe texts,
    and is only written if it reproduces them (cosine >= 0.97) on this CPU. Written
    atomically. Returns the worst probe cosine."""
    try:
        import onnx
        from onnxruntime.quantization import (  # type: ignore[import-untyped]
            QuantType,
            quantize_dynamic,
        )
    except ImportError as exc:
        raise DerivationError(f"re-quantising needs the onnx package ({exc})") from exc

    reference = _probe_vectors(Encoder(make_session(source), tokenizer))
    model = onnx.load(str(source))
    if _fold_int8_matmul_weights(model.graph) == 0:
        raise DerivationError(f"{source} has no int8 MatMul weights of a known form")
    drop_nan_guards(model.graph)
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
                # 7-bit weights: AVX2's vpmaddubsw (no VNNI) cannot saturate a uint8 x int7
                # pair sum, so it computes the same integers as VNNI and the vectors, and the
                # semantic table fitted on them, do not depend on the CPU.
                reduce_range=True,
            )
        worst = _check_probes(Encoder(make_session(quantised), tokenizer), reference)
        result = onnx.load(str(quantised))
        vectors = base64.b64encode(reference.tobytes()).decode()
        probe = {"texts": list(_PROBE_TEXTS), "vectors": vectors}
        for key, value in {
            _PROBE_KEY: json.dumps(probe),
            "deja.source_sha256": file_sha256(source),
            "deja.recipe": RECIPE,
        }.items():
            entry = result.metadata_props.add()
            entry.key, entry.value = key, value
        onnx.save(result, str(final))
        os.replace(final, dest)
    return worst


def load_dynint8(source: Path, cache_dir: Path, tokenizer: Tokenizer, threads: int) -> Encoder:
    dest = derived_model_path(cache_dir, source)
    if dest.exists():
        try:
            encoder = Encoder(make_session(dest, threads=threads), tokenizer)
            _check_probes(encoder, _stored_probes(encoder.session))
            return encoder
        except Exception as exc:
            log.warning("cached model %s unusable (%s); deriving it again", dest, exc)
    # Minutes on a slow CPU, once per model dir: say what is happening before and after, so a
    # first start does not look hung.
    log.info(
        "deriving the embedding model (first start only): re-quantising %s to dynamic int8 "
        "into %s ...",
        source.name,
        dest,
    )
    started = time.monotonic()
    worst = derive_dynint8(source, dest, tokenizer)
    log.info(
        "derived the embedding model in %.1f s: %s (worst probe cosine %.4f)",
        time.monotonic() - started,
        dest.name,
        worst,
    )
    return Encoder(make_session(dest, threads=threads), tokenizer)
