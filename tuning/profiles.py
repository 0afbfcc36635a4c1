"""vLLM serving profiles (``config/vllm-profiles.yaml``): load them, and render one as the
``vllm serve`` flags, the simulator's fields, or a tuning workload.

The file is the one place the flags live; ``deja vllm-args`` prints them and the deploy files
carry their rendering (checked by ``tests/deploy/test_profiles.py``).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

import config as config_package
from deja.errors import TuningError

__all__ = [
    "PROFILES_FILE",
    "ProfileWorkload",
    "VllmProfile",
    "get_profile",
    "load_profiles",
    "serve_args",
    "shell_command",
]

PROFILES_FILE = Path(config_package.__file__).with_name("vllm-profiles.yaml")


class ProfileWorkload(BaseModel):
    """The traffic a profile is for: length specs (``N`` or ``MIN:MAX``) and concurrency."""

    model_config = ConfigDict(extra="forbid")

    prompt_tokens: str
    output_tokens: str
    concurrency: int = Field(ge=1)


class VllmProfile(BaseModel):
    """One profile: vLLM's scheduler and cache flags for a kind of traffic."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    aliases: list[str] = Field(default_factory=list)
    max_num_seqs: int = Field(ge=1)
    max_num_batched_tokens: int = Field(ge=1)
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    kv_cache_dtype: str = "auto"
    max_model_len: int = Field(ge=1)
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    workload: ProfileWorkload | None = None

    def vllm_flags(self) -> list[str]:
        """The profile's ``vllm serve`` flags, in a fixed order."""

        def switch(name: str, on: bool) -> str:
            return f"--{name}" if on else f"--no-{name}"

        return [
            "--max-num-seqs", str(self.max_num_seqs),
            "--max-num-batched-tokens", str(self.max_num_batched_tokens),
            "--max-model-len", str(self.max_model_len),
            "--gpu-memory-utilization", f"{self.gpu_memory_utilization:.2f}",
            "--kv-cache-dtype", self.kv_cache_dtype,
            switch("enable-chunked-prefill", self.enable_chunked_prefill),
            switch("enable-prefix-caching", self.enable_prefix_caching),
        ]  # fmt: skip

    def sim_fields(self) -> dict[str, Any]:
        """The same limits as fields of the simulator's ``SimConfig``."""
        return {
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_model_len": self.max_model_len,
            "enable_prefix_caching": self.enable_prefix_caching,
            "kv_cache_dtype": "fp8" if self.kv_cache_dtype.startswith("fp8") else "auto",
        }


def load_profiles(path: Path | None = None) -> dict[str, VllmProfile]:
    """Every profile of the file, by name; a bad file is one :class:`TuningError` line."""
    path = path or PROFILES_FILE
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise TuningError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        raise TuningError(f"{path}: not YAML ({exc})") from None
    if not isinstance(raw, Mapping) or not isinstance(raw.get("profiles"), Mapping):
        raise TuningError(f"{path}: expected a mapping with 'profiles'")
    defaults = raw.get("defaults") or {}
    profiles: dict[str, VllmProfile] = {}
    for name, body in raw["profiles"].items():
        try:
            profiles[str(name)] = VllmProfile.model_validate({**defaults, **body, "name": name})
        except (ValidationError, TypeError) as exc:
            raise TuningError(f"{path}: profile {name!r}: {exc}") from None
    return profiles


def get_profile(name: str, path: Path | None = None) -> VllmProfile:
    """The profile called ``name`` (or one of its aliases)."""
    profiles = load_profiles(path)
    for profile in profiles.values():
        if name == profile.name or name in profile.aliases:
            return profile
    raise TuningError(f"unknown profile {name!r}; known: {', '.join(profiles)}")


def serve_args(
    profile: VllmProfile, model: str, *, host: str | None = None, port: int | None = None
) -> list[str]:
    """``--model M [--host H] [--port P]`` and the profile's flags: the arguments of vLLM's
    OpenAI server (the ``vllm/vllm-openai`` image's command, or after ``vllm serve``)."""
    args = ["--model", model]
    if host is not None:
        args += ["--host", host]
    if port is not None:
        args += ["--port", str(port)]
    return args + profile.vllm_flags()


def shell_command(args: list[str]) -> str:
    """``vllm serve MODEL --flag ...`` as one shell line, the model positional."""
    rest = list(args)
    model = ""
    if "--model" in rest:
        i = rest.index("--model")
        model = rest[i + 1]
        del rest[i : i + 2]
    return shlex.join(["vllm", "serve", model, *rest])
