"""The shipped verifier on ONNX Runtime: integrity checks, batching, and running off the loop."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import pytest

from deja.errors import VerifierError
from deja.semantic.crossencoder import (
    MODEL_FILE,
    SHIPPED_DIR,
    SUMS_FILE,
    check_sums,
    load_verifier,
    verifier_text,
)
from tests.support import int8_weight_range

pytestmark = pytest.mark.integration

QUERY = "What is the process for configuring the agent?"
CACHED = [
    "How do I configure the agent?",
    "How do I uninstall the agent?",
    "What is the capital of France?",
    "How can I configure the agent on Windows?",
]


def copy_shipped(tmp_path: Path) -> Path:
    folder = tmp_path / "verifier"
    shutil.copytree(SHIPPED_DIR, folder)
    return folder


def test_the_shipped_files_match_their_sha256() -> None:
    sums = check_sums(SHIPPED_DIR)
    assert MODEL_FILE in sums and len(sums[MODEL_FILE]) == 64


def test_the_shipped_model_has_7_bit_weights_so_its_scores_do_not_depend_on_the_cpu() -> None:
    low, high = int8_weight_range(SHIPPED_DIR / MODEL_FILE)
    assert low >= -64 and high <= 64, (low, high)
    assert high - low > 100  # the 7-bit range is used, not a degenerate model


def test_a_corrupt_model_is_refused_in_one_sentence(tmp_path: Path) -> None:
    folder = copy_shipped(tmp_path)
    with (folder / MODEL_FILE).open("r+b") as handle:
        handle.seek(4096)
        handle.write(b"\x00corrupt\x00")
    with pytest.raises(VerifierError, match="does not match its sha256"):
        load_verifier(folder, max_tokens=64)


def test_missing_checksums_are_refused(tmp_path: Path) -> None:
    folder = copy_shipped(tmp_path)
    (folder / SUMS_FILE).unlink()
    with pytest.raises(VerifierError, match="checksums"):
        load_verifier(folder, max_tokens=64)


async def test_one_batched_call_scores_every_candidate_in_order() -> None:
    verifier = load_verifier(max_tokens=64)
    try:
        batch = await verifier.logits(QUERY, CACHED)
        single = [(await verifier.logits(QUERY, [c]))[0] for c in CACHED]
        assert len(batch) == len(CACHED)
        # Pair by pair inside the call: a score never depends on its batch-mates.
        assert batch == pytest.approx(single, abs=1e-6)
        assert max(range(4), key=lambda i: batch[i]) == 0  # the paraphrase ranks first
        assert await verifier.logits(QUERY, []) == []
    finally:
        await verifier.close()


@pytest.mark.parametrize(
    ("text", "read"),
    [
        ("how do i cook rice in a microwave", "how do i cook rice in a microwave?"),
        ("¿cómo llego al museo  ", "¿cómo llego al museo?"),
        ("es bueno correr de noche", "es bueno correr de noche?"),
        ("How do I cook rice?", "How do I cook rice?"),
        ("The app crashed.", "The app crashed."),
        # a statement typed without a full stop is read as written
        ("the app keeps crashing when I open it", "the app keeps crashing when I open it"),
        ("best restaurants in madrid", "best restaurants in madrid"),
        ('What does "disk full" mean?"', 'What does "disk full" mean?"'),
        ("Is Python 3.12 out (yet!)", "Is Python 3.12 out (yet!)"),
    ],
)
def test_the_verifier_reads_a_question_mark_where_a_question_was_typed_without_one(
    text: str, read: str
) -> None:
    assert verifier_text(text) == read


async def test_a_query_typed_without_a_question_mark_scores_as_one_with_it() -> None:
    verifier = load_verifier(max_tokens=64)
    try:
        bare = await verifier.logits(
            "how do i cook rice in a microwave", ["how do i cook rice in an oven"]
        )
        marked = await verifier.logits(
            "how do i cook rice in a microwave?", ["how do i cook rice in an oven?"]
        )
        assert bare == pytest.approx(marked, abs=1e-9)
    finally:
        await verifier.close()


async def test_scoring_runs_off_the_event_loop() -> None:
    verifier = load_verifier(max_tokens=64)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.001)

    task = asyncio.create_task(ticker())
    try:
        started = time.perf_counter()
        for _ in range(20):
            await verifier.logits(QUERY, CACHED)
        elapsed = time.perf_counter() - started
    finally:
        task.cancel()
        await verifier.close()
    # The loop kept ticking while the verifier thread scored. Had scoring run on the loop, it
    # could tick at most once per call (20); by time it ticks about once a millisecond.
    assert ticks > 3 * 20
    assert ticks > elapsed * 1000 * 0.1
