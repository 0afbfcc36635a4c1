"""``training.verifier.sweep`` for real on the CPU (``make test-st``: PyTorch from the ``train``
extra): what travels to a GPU machine and what comes back must rebuild the model that trained
there, and a soup must be the mean of its models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from training.verifier import sweep
from training.verifier.common import read_json_rows, write_json_rows
from training.verifier.model import build

ROWS = [
    {"a": "How do I learn Python?", "b": "Best way to learn Python?", "duplicate": True},
    {"a": "What is C++?", "b": "What is C?", "duplicate": False, "kind": "symbol"},
    {
        "a": "How do I start a car?",
        "b": "How do I begin a car?",
        "duplicate": True,
        "kind": "synonym_en",
    },
]


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in ("train_synonyms.jsonl", *sweep.VAL_FILES):
        write_json_rows(src / name, ROWS)
    out = tmp_path_factory.mktemp("packed")
    sweep.pack(src / "train_synonyms.jsonl", src, out)
    return out


def trained(run: Path, shift: float) -> dict[str, torch.Tensor]:
    """A stand-in for a run that trained on the GPU: the base with every trained tensor moved."""
    model = build(pretrained=True)
    state = {
        k: v + shift if not k.startswith(sweep.FROZEN) and v.is_floating_point() else v
        for k, v in model.state_dict().items()
    }
    run.mkdir(parents=True)
    torch.save({"model": state, "step": 7, "meta": {"head_input": "pooler"}}, run / "final.pt")
    return state


def test_the_mixes_split_on_the_synonym_rows(packed: Path, tmp_path: Path) -> None:
    files = sweep.mixes(packed, tmp_path)
    assert len(read_json_rows(files["synonym"])) == 3
    assert [r["a"] for r in read_json_rows(files["base"])] == [r["a"] for r in ROWS[:2]]


def test_parts_come_back_small_and_rebuild_the_trained_model(packed: Path, tmp_path: Path) -> None:
    state = trained(tmp_path / "runs" / "one-1", 0.01)
    parts = sweep.write_parts(tmp_path / "runs" / "one-1" / "final.pt", tmp_path)
    assert len(parts) >= 2
    assert all(p.stat().st_size < 16 * 2**20 for p in parts)

    sweep.unpack(parts, packed, tmp_path / "back")
    back = torch.load(tmp_path / "back" / "final.pt", weights_only=True)["model"]
    assert set(back) == set(state)
    for key, value in state.items():
        # fp16 on the way back; the frozen embeddings are the packed (fp16) base's
        assert torch.allclose(back[key].float(), value.float(), rtol=1e-3, atol=1e-3), key


def test_a_soup_is_the_mean_of_its_models(packed: Path, tmp_path: Path) -> None:
    one = trained(tmp_path / "runs" / "s-1", 0.0)
    two = trained(tmp_path / "runs" / "s-2", 0.02)
    parts = [
        *sweep.write_parts(tmp_path / "runs" / "s-1" / "final.pt", tmp_path),
        *sweep.write_parts(tmp_path / "runs" / "s-2" / "final.pt", tmp_path),
    ]
    sweep.unpack(parts, packed, tmp_path / "soup")
    got = torch.load(tmp_path / "soup" / "final.pt", weights_only=True)
    key = "bert.encoder.layer.0.attention.self.query.weight"
    assert torch.allclose(got["model"][key], (one[key] + two[key]) / 2, atol=1e-3)
    assert got["meta"]["unpacked_from"] == ["s-1", "s-2"]


def test_choose_keeps_the_set_up_whose_seeds_score_best_and_all_finished() -> None:
    seeds = sweep.SEEDS
    names = list(sweep.SETUPS)
    metrics = {f"{n}-{s}": {"val.jsonl:auc": 0.90} for n in names for s in seeds}
    metrics[f"{names[1]}-{seeds[0]}"]["val.jsonl:auc"] = 0.95
    assert sweep.choose(metrics) == names[1]
    del metrics[f"{names[1]}-{seeds[1]}"]  # a seed that did not finish
    assert sweep.choose(metrics) != names[1]
    assert json.dumps(metrics)  # plain numbers, as summary.json writes them
