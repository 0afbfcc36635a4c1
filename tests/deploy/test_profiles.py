"""The deploy files carry a serving profile's flags exactly as ``deja vllm-args`` renders them
(config/vllm-profiles.yaml is the one place they are decided), and the simulators take the same
profile."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.helpers import COMPOSE_FILE, K8S, load_yaml, load_yaml_all
from tuning.profiles import get_profile, load_profiles, serve_args


def profile_of(args: list[str], model: str) -> str:
    """The profile whose rendering ``args`` is, or fail naming the difference."""
    matches = [
        name
        for name, profile in load_profiles().items()
        if args == serve_args(profile, model, host="0.0.0.0", port=8000)
    ]
    assert matches, f"not the rendering of any profile: {args}"
    return matches[0]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    """The file as written (not interpolated: the model stays ``${VLLM_MODEL:-...}``)."""
    data: dict[str, Any] = load_yaml(COMPOSE_FILE)
    return data


def test_compose_vllm_args_are_a_profile_rendering(compose: dict[str, Any]) -> None:
    first = [str(a) for a in compose["services"]["vllm-0"]["command"]]
    second = [str(a) for a in compose["services"]["vllm-1"]["command"]]
    assert first == second
    name = profile_of(first, "${VLLM_MODEL:-Qwen/Qwen2.5-1.5B-Instruct}")
    assert f"deja vllm-args --profile {name}" in COMPOSE_FILE.read_text()


def test_compose_simulators_use_the_same_profile(compose: dict[str, Any]) -> None:
    name = profile_of(
        [str(a) for a in compose["services"]["vllm-0"]["command"]],
        "${VLLM_MODEL:-Qwen/Qwen2.5-1.5B-Instruct}",
    )
    for sim in ("sim-0", "sim-1"):
        command = compose["services"][sim]["command"]
        assert command[command.index("--profile") + 1] == name
    get_profile(name)


def test_k8s_vllm_args_are_a_profile_rendering() -> None:
    [statefulset] = [
        d for d in load_yaml_all(K8S / "vllm-statefulset.yaml") if d["kind"] == "StatefulSet"
    ]
    [ctr] = [
        c for c in statefulset["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm"
    ]
    name = profile_of([str(a) for a in ctr["args"]], "$(VLLM_MODEL)")
    assert f"deja vllm-args --profile {name}" in (K8S / "vllm-statefulset.yaml").read_text()
