"""The shipped verifier: a MiniLM cross-encoder on ONNX Runtime (int8, CPU) that scores "do
these two questions ask the same thing?" as one logit per (query, cached question) pair.

Why a cross-encoder: cosine similarity of two independently embedded questions cannot tell "Is
it safe to eat raw eggs?" from "Is it not safe to eat raw eggs?" (0.989); a model that reads both
questions together can. Trained by ``training/verifier`` (see docs/verifier-model-card.md), its
file ships in the repository with a sha256 that is checked at load: a corrupt or mismatched file
never scores anything.

Inference runs on the verifier's own single thread, never on the event loop. One lookup's
candidates are scored in one call to that thread, pair by pair (the input is ``[CLS] query
[SEP] cached [SEP]``, at most ``max_tokens`` tokens).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort  # type: ignore[import-untyped]
from tokenizers import Tokenizer

from deja.errors import VerifierError, describe
from deja.files import file_sha256
from deja.semantic import lexicon as lex

#: Where the shipped verifier lives (package data).
SHIPPED_DIR = Path(__file__).resolve().parents[1] / "models" / "verifier"
MODEL_FILE = "verifier-int8.onnx"
TOKENIZER_FILE = "tokenizer.json"
SUMS_FILE = "SHA256SUMS"
INPUTS = ("input_ids", "attention_mask", "token_type_ids")

_ENDED = re.compile(r"[?.!？！。][\"'”’»)\]]*$")


def verifier_text(text: str) -> str:
    """``text`` as the verifier reads it: a question typed without its question mark gets one
    ("how do i cook rice in a microwave", "¿cómo llego al museo"); any other text is read as
    written. A question is a text that opens with "¿" or with a word of
    :data:`~deja.semantic.lexicon.QUESTION_STARTS`.

    The model learnt on Quora questions, nearly all of which end with "?", and the table's τ
    was measured on them. Without the mark it calls most close variants paraphrases: of 35 close
    but different queries typed in lower case ("how do i cook rice in a microwave" / "… in an
    oven"), the default setting served 9 as typed and 4 read so. Statements keep their form:
    with a mark added to every text, held-out STS sentence pairs lost 46 of 238 paraphrases
    served (``docs/verifier-model-card.md``, "Queries as people type them")."""
    text = text.rstrip()
    if _ENDED.search(text):
        return text
    words = text.lstrip("¿¡\"'“‘( ").split(maxsplit=1)
    asks = text.startswith("¿") or (bool(words) and words[0].casefold() in lex.QUESTION_STARTS)
    return text + "?" if asks else text


def check_sums(folder: Path) -> dict[str, str]:
    """Verify every file listed in ``folder/SHA256SUMS``; returns name → sha256. Raises
    ``VerifierError`` naming the first missing or mismatched file."""
    sums_path = folder / SUMS_FILE
    try:
        lines = sums_path.read_text().splitlines()
    except OSError as exc:
        raise VerifierError(f"verifier checksums {sums_path}: {describe(exc)}") from exc
    sums: dict[str, str] = {}
    for line in filter(None, (ln.strip() for ln in lines)):
        expected, _, name = line.partition("  ")
        name = name.lstrip("*")
        path = folder / name
        try:
            actual = file_sha256(path)
        except OSError as exc:
            raise VerifierError(f"verifier file {path}: {describe(exc)}") from exc
        if actual != expected:
            raise VerifierError(
                f"verifier file {path} does not match its sha256 (expected {expected[:12]}…, "
                f"found {actual[:12]}…): corrupt or replaced"
            )
        sums[name] = actual
    for required in (MODEL_FILE, TOKENIZER_FILE):
        if required not in sums:
            raise VerifierError(f"{sums_path} lists no sha256 for {required}")
    return sums


class CrossEncoder:
    """Synchronous scorer: tokenizer + session. Thread-safe (ONNX Runtime sessions are)."""

    def __init__(self, session: Any, tokenizer: Tokenizer, max_tokens: int) -> None:
        self.session = session
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens

    @classmethod
    def load(cls, folder: Path, *, max_tokens: int, threads: int = 1) -> CrossEncoder:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            session = ort.InferenceSession(
                str(folder / MODEL_FILE), sess_options=options, providers=["CPUExecutionProvider"]
            )
            tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise VerifierError(f"cannot load the verifier from {folder}: {describe(exc)}") from exc
        names = {i.name for i in session.get_inputs()}
        if not set(INPUTS) <= names:
            raise VerifierError(f"verifier model inputs {sorted(names)} are not {list(INPUTS)}")
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_tokens)
        return cls(session, tokenizer, max_tokens)

    def logits(self, query: str, cached: Sequence[str]) -> npt.NDArray[np.float64]:
        """One logit per cached question, in order (probability = sigmoid).

        Each pair runs on its own, unpadded: dynamic int8 quantisation scales activations over
        the whole input tensor, so in a padded batch a pair's score would depend on its
        batch-mates (up to 0.5 logit here), and the calibration table was measured pair by
        pair. Measured on this machine, four pairs one after the other took 9.5 ms p50, one
        padded batch of four 11.7 ms."""
        out = np.empty(len(cached), dtype=np.float64)
        asked = verifier_text(query)
        for i, text in enumerate(cached):
            enc = self.tokenizer.encode(asked, verifier_text(text))
            ids = np.asarray([enc.ids], dtype=np.int64)
            feeds = {
                "input_ids": ids,
                "attention_mask": np.ones_like(ids),
                "token_type_ids": np.asarray([enc.type_ids], dtype=np.int64),
            }
            out[i] = float(np.asarray(self.session.run(["logits"], feeds)[0]).reshape(-1)[0])
        return out


class OnnxVerifier:
    """The :class:`~deja.semantic.verifier.Verifier` on ONNX Runtime, on its own thread."""

    def __init__(self, encoder: CrossEncoder, model_id: str) -> None:
        self.encoder = encoder
        self.model_id = model_id
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="deja-verifier")

    async def logits(self, query: str, cached: Sequence[str]) -> list[float]:
        if not cached:
            return []
        loop = asyncio.get_running_loop()
        try:
            out = await loop.run_in_executor(self._executor, self.encoder.logits, query, cached)
        except Exception as exc:  # a failed run is a VerifierError: the lookup becomes a miss
            raise VerifierError(f"verifier failed: {describe(exc)}") from exc
        return [float(x) for x in out]

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(
            None, lambda: self._executor.shutdown(wait=True, cancel_futures=True)
        )


def load_verifier(folder: Path = SHIPPED_DIR, *, max_tokens: int, threads: int = 1) -> OnnxVerifier:
    """Check the files' sha256, then load. Raises ``VerifierError`` in one clear sentence."""
    sums = check_sums(folder)
    encoder = CrossEncoder.load(folder, max_tokens=max_tokens, threads=threads)
    return OnnxVerifier(encoder, model_id=f"minilm-ce-{sums[MODEL_FILE][:12]}")
