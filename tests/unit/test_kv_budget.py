"""KV-budget arithmetic against hand-computed cases, and ``deja kv-budget`` on bad files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from app.cli.main import main
from deja.errors import ModelConfigError
from sim.gpus import GPU_PROFILES, RESERVE_BYTES
from tuning.kvbudget import GIB, kv_budget, load_model_config, shape_from_config

LLAMA_31_8B: dict[str, Any] = {
    "_name_or_path": "meta-llama/Llama-3.1-8B",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 131072,
}
# Llama-2-7B: multi-head attention, every query head has its own K and V.
LLAMA_2_7B = {**LLAMA_31_8B, "num_key_value_heads": 32, "intermediate_size": 11008,
              "vocab_size": 32000, "torch_dtype": "float16"}  # fmt: skip


def test_llama_31_8b_fp16_is_131072_bytes_per_token() -> None:
    shape = shape_from_config(LLAMA_31_8B)
    assert shape.kv_bytes_per_token() == 2 * 32 * 8 * 128 * 2 == 131_072
    assert shape.kv_bytes_per_token("fp16") == 131_072
    assert shape.kv_bytes_per_token("fp8") == 65_536  # fp8 halves it
    assert shape.params == 8_030_261_248  # the published parameter count


def test_gqa_vs_mha() -> None:
    mha = shape_from_config(LLAMA_2_7B)
    assert mha.kv_heads == 32
    assert mha.kv_bytes_per_token() == 2 * 32 * 32 * 128 * 2 == 524_288  # 4x Llama-3's 8 KV heads
    assert mha.params == pytest.approx(6.74e9, rel=0.01)
    no_kv_field = {k: v for k, v in LLAMA_2_7B.items() if k != "num_key_value_heads"}
    assert shape_from_config(no_kv_field).kv_heads == 32  # absent means MHA


def test_head_dim_field_and_nested_text_config() -> None:
    # Qwen3-style explicit head_dim that is not hidden / heads.
    cfg = {"num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
           "hidden_size": 1024, "head_dim": 128, "torch_dtype": "bfloat16"}  # fmt: skip
    assert shape_from_config(cfg).kv_bytes_per_token() == 2 * 28 * 8 * 128 * 2
    assert shape_from_config({"text_config": cfg}).layers == 28


def test_budget_by_hand() -> None:
    # 80 GiB x 0.9 = 72 GiB; minus 16 GiB weights and 2 GiB overhead = 54 GiB of KV cache;
    # 54 GiB / 128 KiB = 442,368 tokens = 27,648 blocks of 16; an 8,192-token sequence needs
    # 512 blocks, so 54 of them fit at once.
    b = kv_budget(
        shape_from_config(LLAMA_31_8B), gpu_memory_gib=80, max_model_len=8192,
        weights_gib=16, overhead_gib=2,
    )  # fmt: skip
    assert b.kv_bytes == 54 * GIB
    assert b.kv_tokens == 442_368 and b.kv_blocks == 27_648
    assert b.blocks_per_sequence == 512 and b.max_full_length_sequences == 54
    assert b.max_concurrency == pytest.approx(54.0)
    fp8 = kv_budget(
        shape_from_config(LLAMA_31_8B), gpu_memory_gib=80, max_model_len=8192,
        weights_gib=16, overhead_gib=2, kv_dtype="fp8",
    )  # fmt: skip
    assert fp8.kv_tokens == 2 * b.kv_tokens and fp8.max_full_length_sequences == 108
    full = kv_budget(
        shape_from_config(LLAMA_31_8B), gpu_memory_gib=80, max_model_len=131072,
        weights_gib=16, overhead_gib=2,
    )  # fmt: skip
    assert full.max_full_length_sequences == 3  # 27,648 // 8,192 blocks


def test_estimated_weights_and_overhead_match_the_simulators_gpu_profile() -> None:
    h100 = GPU_PROFILES["h100-llama8b"]
    b = kv_budget(
        shape_from_config(LLAMA_31_8B),
        gpu_memory_gib=h100.memory_mib / 1024,
        max_model_len=8192,
        max_num_batched_tokens=8192,
    )
    assert b.weights_bytes == pytest.approx(8_030_261_248 * 2)
    assert b.overhead_bytes == RESERVE_BYTES + (2 * 14336 + 4 * 4096) * 2 * 8192
    assert abs(b.kv_tokens - h100.kv_tokens()) < 16  # same arithmetic, block rounding aside


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "expected a JSON object"),
        (json.dumps({"num_attention_heads": 32}), "lacks 'num_hidden_layers'"),
        (json.dumps({**LLAMA_31_8B, "num_hidden_layers": "32"}), "must be a positive integer"),
        (json.dumps({**LLAMA_31_8B, "torch_dtype": "float9"}), "unknown dtype"),
    ],
)
def test_malformed_config_is_one_clear_error(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(content)
    with pytest.raises(ModelConfigError, match=message) as info:
        load_model_config(path)
    assert str(path) in info.value.message and "\n" not in info.value.message


def test_every_lacking_field_is_named_at_once(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ModelConfigError) as info:
        load_model_config(path)
    assert "'num_hidden_layers' (or n_layer, num_layers)" in info.value.message
    assert "'num_attention_heads' (or n_head)" in info.value.message
    # Enough for the KV arithmetic, not for the weights: the estimate names what it lacks.
    shape = shape_from_config({"num_hidden_layers": 32, "num_attention_heads": 32,
                               "hidden_size": 4096})  # fmt: skip
    with pytest.raises(ModelConfigError) as weights:
        kv_budget(shape, gpu_memory_gib=80, max_model_len=8192)
    assert "'vocab_size'" in weights.value.message
    assert "'intermediate_size' (or moe_intermediate_size)" in weights.value.message


def test_quantized_model_needs_the_weights_size() -> None:
    shape = shape_from_config({**LLAMA_31_8B, "quantization_config": {"bits": 4}})
    with pytest.raises(ModelConfigError, match="--weights-gib"):
        kv_budget(shape, gpu_memory_gib=24, max_model_len=8192)
    assert kv_budget(shape, gpu_memory_gib=24, max_model_len=8192, weights_gib=5).kv_blocks > 0


def test_cli_reports_each_file_and_exits_non_zero_on_a_bad_one(tmp_path: Path) -> None:
    good = tmp_path / "good" / "config.json"
    good.parent.mkdir()
    good.write_text(json.dumps(LLAMA_31_8B))
    bad = tmp_path / "bad.json"
    bad.write_text("{oops")
    missing = tmp_path / "missing.json"
    runner = CliRunner()
    args = ["kv-budget", "--gpu-memory-gib", "80", "--max-model-len", "8192",
            "--weights-gib", "16", "--overhead-gib", "2"]  # fmt: skip
    result = runner.invoke(main, [*args, "--config", str(good)])
    assert result.exit_code == 0, result.output
    assert "131,072 B" in result.output and "54 at once" in result.output
    result = runner.invoke(
        main, [*args, "--config", str(bad), "--config", str(good), "--config", str(missing)]
    )
    assert result.exit_code == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("deja kv-budget:")]
    assert len(errors) == 2 and "not JSON" in errors[0] and "cannot read" in errors[1]
    assert "54 at once" in result.stdout  # the good file is still computed
    flags = runner.invoke(
        main, [*args, "--layers", "32", "--kv-heads", "8", "--head-dim", "128", "--json"]
    )
    assert flags.exit_code == 0 and json.loads(flags.stdout)["bytes_per_token"] == 131_072
