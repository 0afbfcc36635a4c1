"""The simulator's labelled judge (``--judge-labels``, ``sim.labels``): a SIMULATED judge of a
chosen accuracy for replay benchmarks. Checked: verdicts by cluster, the flipped share, one
answer per cluster, the fall-back for unlabelled questions, bad files named; and the same over
HTTP against a running simulator."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from deja.chat.judge import judge_messages
from sim.config import SimConfig
from sim.generation import parse_job
from sim.labels import Labels, LabelsError
from sim.runner import start_simulators

pytestmark = pytest.mark.integration

ROWS = [
    ("How do I learn to swim?", 1),
    ("What is the best way to learn swimming?", 1),
    ("How can I start swimming as an adult?", 1),
    ("What is the capital of Peru?", "peru"),
    ("Which city is Peru's capital?", "peru"),
]


def write(path: Path, rows: list[tuple[str, object]]) -> Path:
    path.write_text("".join(json.dumps({"question": q, "cluster": c}) + "\n" for q, c in rows))
    return path


def chat(question: str) -> dict[str, object]:
    return {"model": "deja-sim-1", "messages": [{"role": "user", "content": question}]}


def judge(a: str, b: str) -> dict[str, object]:
    return {"model": "deja-sim-1", "messages": judge_messages(a, b), "max_tokens": 1}


def test_a_perfect_judge_answers_by_cluster_in_either_order(tmp_path: Path) -> None:
    labels = Labels.load(write(tmp_path / "l.jsonl", ROWS))
    q = [r[0] for r in ROWS]
    assert labels.verdict(q[0], q[1]) == labels.verdict(q[1], q[0]) == "yes"
    assert labels.verdict(q[0], q[3]) == "no"
    assert labels.verdict(f"  {q[3]} ", q[4]) == "yes"  # surrounding space ignored
    assert labels.verdict(q[0], "How do I learn to swim") is None  # not labelled: no verdict


def test_a_judge_of_accuracy_080_flips_a_fifth_of_the_pairs_always_the_same_ones() -> None:
    clusters = {f"question {i}": str(i % 50) for i in range(400)}
    truth = Labels(clusters, accuracy=1.0)
    noisy = Labels(clusters, accuracy=0.8, seed=7)
    pairs = [(f"question {i}", f"question {j}") for i in range(0, 400, 3) for j in range(1, 60, 7)]
    flipped = [truth.verdict(a, b) != noisy.verdict(a, b) for a, b in pairs]
    assert 0.17 <= sum(flipped) / len(flipped) <= 0.23
    assert [noisy.verdict(b, a) for a, b in pairs] == [noisy.verdict(a, b) for a, b in pairs]
    other_seed = Labels(clusters, accuracy=0.8, seed=8)
    assert [other_seed.verdict(a, b) for a, b in pairs] != [noisy.verdict(a, b) for a, b in pairs]


def test_jobs_answer_judges_by_label_and_a_cluster_with_one_answer(tmp_path: Path) -> None:
    labels = Labels.load(write(tmp_path / "l.jsonl", ROWS))
    q = [r[0] for r in ROWS]

    def text(payload: dict[str, object], with_labels: Labels | None = labels) -> str:
        job = parse_job(payload, "chat", 8192, labels=with_labels)
        return "".join(job.generations[0].pieces)

    assert text(judge(q[0], q[2])) == "yes" and text(judge(q[1], q[4])) == "no"
    # unlabelled pairs keep the word-overlap rule (these share every word: "yes")
    assert text(judge("how do I sort a list", "How do I sort a list?")) == "yes"
    answers = [text(chat(question)) for question in q]
    assert answers[0] == answers[1] == answers[2] and answers[3] == answers[4]
    assert answers[0] != answers[3]
    assert text(chat(q[0]), None) != text(chat(q[1]), None)  # without labels: by prompt


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json\n", "not JSON"),
        ('{"question": "a"}\n', "'cluster' must be a string or integer"),
        ('{"question": 1, "cluster": 1}\n', 'expected {"question": str'),
        ("\n", "no labelled question"),
    ],
)
def test_a_bad_labels_file_is_named_with_its_line(
    tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(LabelsError, match=message) as info:
        Labels.load(path)
    assert str(path) in str(info.value)
    with pytest.raises(LabelsError, match="No such file"):
        Labels.load(tmp_path / "missing.jsonl")


async def test_a_running_simulator_uses_the_labels(tmp_path: Path) -> None:
    path = write(tmp_path / "l.jsonl", ROWS)
    sims = await start_simulators(1, SimConfig(speed=0, judge_labels=str(path)))
    try:
        async with httpx.AsyncClient(base_url=sims.urls[0], timeout=10) as http:
            url = "/v1/chat/completions"
            yes = (await http.post(url, json=judge(ROWS[0][0], ROWS[1][0]))).json()
            no = (await http.post(url, json=judge(ROWS[0][0], ROWS[3][0]))).json()
            assert yes["choices"][0]["message"]["content"] == "yes"
            assert no["choices"][0]["message"]["content"] == "no"
            first = (await http.post(url, json=chat(ROWS[3][0]))).json()
            second = (await http.post(url, json=chat(ROWS[4][0]))).json()
            content = first["choices"][0]["message"]["content"]
            assert content and content == second["choices"][0]["message"]["content"]
    finally:
        await sims.stop()
