"""config/vllm-profiles.yaml: the design's table, its rendering, ``deja vllm-args``."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from app.cli.main import main
from deja.errors import TuningError
from sim.config import SimConfig
from tuning.profiles import get_profile, load_profiles, serve_args, shell_command
from tuning.workload import LengthDist

DESIGN_TABLE = {
    "chat": (256, 16384),
    "rag": (64, 32768),
    "coding": (128, 32768),
    "summarisation": (32, 65536),
    "batch": (16, 65536),
}


def test_profiles_hold_the_designs_table_and_set_every_flag() -> None:
    profiles = load_profiles()
    assert set(profiles) == set(DESIGN_TABLE)
    for name, (seqs, tokens) in DESIGN_TABLE.items():
        p = profiles[name]
        assert (p.max_num_seqs, p.max_num_batched_tokens) == (seqs, tokens)
        raw = yaml.safe_load(Path("config/vllm-profiles.yaml").read_text())["profiles"][name]
        for key in ("enable_chunked_prefill", "enable_prefix_caching", "kv_cache_dtype"):
            assert key in raw, f"{name} does not set {key}"
        assert p.workload is not None
        LengthDist.parse(p.workload.prompt_tokens)
        assert LengthDist.parse(p.workload.prompt_tokens).buckets[0][1] < p.max_model_len
        SimConfig(**p.sim_fields())  # the simulator accepts every profile
    assert get_profile("enterprise-rag").name == "rag"
    assert get_profile("summarization").name == "summarisation"
    with pytest.raises(TuningError, match="known: chat"):
        get_profile("nope")


def test_serve_args_and_shell_command() -> None:
    rag = get_profile("rag")
    args = serve_args(rag, "meta-llama/Llama-3.1-8B-Instruct", host="0.0.0.0", port=8000)
    assert args[:6] == ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--host", "0.0.0.0",
                        "--port", "8000"]  # fmt: skip
    flags = dict(zip(args[6::2], args[7::2], strict=False))
    assert flags["--max-num-seqs"] == "64" and flags["--max-num-batched-tokens"] == "32768"
    assert "--enable-prefix-caching" in args and "--enable-chunked-prefill" in args
    line = shell_command(args)
    assert line.startswith("vllm serve meta-llama/Llama-3.1-8B-Instruct --host 0.0.0.0")
    assert shlex.split(line)[3:] == args[2:]
    summarise = serve_args(get_profile("summarisation"), "m")
    assert "--no-enable-prefix-caching" in summarise
    assert summarise[summarise.index("--kv-cache-dtype") + 1] == "fp8"


def test_bad_profiles_file(tmp_path: Path) -> None:
    bad = tmp_path / "p.yaml"
    bad.write_text("profiles:\n  x: {max_num_seqs: zero}\n")
    with pytest.raises(TuningError, match="profile 'x'"):
        load_profiles(bad)
    bad.write_text("profiles: [")
    with pytest.raises(TuningError, match="not YAML"):
        load_profiles(bad)


def test_vllm_args_cli() -> None:
    runner = CliRunner()
    out = runner.invoke(main, ["vllm-args", "--profile", "rag", "--model", "M"])
    assert out.exit_code == 0
    assert out.output.strip() == shell_command(serve_args(get_profile("rag"), "M"))
    as_yaml = runner.invoke(main, ["vllm-args", "--profile", "chat", "--model", "M",
                                   "--format", "yaml", "--port", "8000"])  # fmt: skip
    assert yaml.safe_load(as_yaml.output) == serve_args(get_profile("chat"), "M", port=8000)
    listed = runner.invoke(main, ["vllm-args", "--list"])
    assert all(name in listed.output for name in DESIGN_TABLE)
    unknown = runner.invoke(main, ["vllm-args", "--profile", "nope"])
    assert unknown.exit_code == 1 and "unknown profile" in unknown.output
