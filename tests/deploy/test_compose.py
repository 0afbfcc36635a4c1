"""deploy/docker-compose.yml against the gateway's settings and the other deploy files.

No Docker engine runs where these tests run: this checks the file's structure and that its
names, ports and paths line up, not that the containers start.
"""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest

from config.settings import Settings
from tests.deploy.helpers import (
    COMPOSE_FILE,
    DEPLOY,
    ROOT,
    SETTINGS_ENV,
    active_services,
    environment,
    host_port,
    load_compose,
    load_yaml,
    load_yaml_all,
    resolvable_names,
)

PROFILE_SETS = [set(), {"sim"}, {"gpu"}, {"sim", "langfuse"}, {"gpu", "langfuse"}]
DEJA_PORT = Settings.model_fields["port"].default
SIM_PORT = 8000


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_compose()


def test_compose_parses_as_one_yaml_document() -> None:
    docs = load_yaml_all(COMPOSE_FILE)
    assert len(docs) == 1
    assert isinstance(docs[0]["services"], dict)


def test_expected_services_and_profiles(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in ("deja", "redis", "qdrant", "prometheus", "grafana", "otel-collector"):
        assert name in services
        assert not services[name].get("profiles"), f"{name} must run in every profile"
    for name in ("vllm-0", "vllm-1"):
        assert services[name]["profiles"] == ["gpu"]
    for name in ("sim-0", "sim-1"):
        assert services[name]["profiles"] == ["sim"]
    langfuse = [n for n in services if n.startswith("langfuse")]
    assert "langfuse-web" in langfuse and "langfuse-postgres" in langfuse
    for name in langfuse:
        assert services[name]["profiles"] == ["langfuse"], name
    assert services["qdrant"]["image"].startswith("qdrant/qdrant")


def test_every_deja_variable_is_a_real_setting(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        unknown = {k for k in environment(service) if k.startswith("DEJA_")} - SETTINGS_ENV
        assert not unknown, f"{name}: not settings: {sorted(unknown)}"
    # Interpolation variables named DEJA_* must be settings too (they reach the gateway).
    raw = COMPOSE_FILE.read_text()
    used = set(re.findall(r"\$\{(DEJA_[A-Z0-9_]+)", raw))
    assert used <= SETTINGS_ENV, sorted(used - SETTINGS_ENV)


def test_admin_key_is_required_never_defaulted() -> None:
    raw = load_yaml(COMPOSE_FILE)["services"]["deja"]["environment"]["DEJA_ADMIN_KEY"]
    assert raw.startswith("${DEJA_ADMIN_KEY:?"), raw


@pytest.mark.parametrize("profiles", PROFILE_SETS, ids=lambda p: "+".join(sorted(p)) or "default")
def test_every_name_deja_uses_resolves_under_each_profile(
    compose: dict[str, Any], profiles: set[str]
) -> None:
    active = active_services(compose, profiles)
    names = resolvable_names(active)
    env = environment(compose["services"]["deja"])
    # Stores and collector: always there.
    assert host_port(env["DEJA_REDIS_URL"], 6379) == ("redis", 6379)
    assert host_port(env["DEJA_QDRANT_URL"]) == ("qdrant", 6333)
    otel = host_port(env["OTEL_EXPORTER_OTLP_ENDPOINT"])
    assert otel[0] in names
    collector = load_yaml(DEPLOY / "otel" / "collector.yaml")
    assert collector["receivers"]["otlp"]["protocols"]["http"]["endpoint"].endswith(f":{otel[1]}")
    # depends_on must only name services that start under these profiles.
    for name, service in active.items():
        for dep in service.get("depends_on") or []:
            assert dep in active, f"{name} depends on {dep}, absent under {profiles or 'default'}"
    # Replicas: resolvable whenever a replica profile is on, to a service serving that port.
    replica_profile = profiles & {"sim", "gpu"}
    for url in env["DEJA_REPLICAS"].split(","):
        host, port = host_port(url)
        if not replica_profile:
            assert host not in names  # default profile: no replica at all, by design
            continue
        assert host in names, f"{host} does not resolve under --profile {profiles}"
        command = [str(c) for c in active[names[host]]["command"]]
        assert command[command.index("--port") + 1] == str(port)


def test_no_gpu_service_starts_without_the_gpu_profile(compose: dict[str, Any]) -> None:
    for profiles in ({"sim"}, set(), {"sim", "langfuse"}):
        for name, service in active_services(compose, profiles).items():
            devices = (
                service.get("deploy", {})
                .get("resources", {})
                .get("reservations", {})
                .get("devices")
            )
            assert not devices, f"{name} reserves a GPU under {profiles or 'default'}"
            assert "vllm/vllm-openai" not in str(service.get("image", "")), name


def test_vllm_replicas_are_tuned_and_reserve_a_gpu(compose: dict[str, Any]) -> None:
    gpus = set()
    for name in ("vllm-0", "vllm-1"):
        service = compose["services"][name]
        assert service["image"].startswith("vllm/vllm-openai:")
        command = [str(c) for c in service["command"]]
        for flag in (
            "--enable-prefix-caching",
            "--enable-chunked-prefill",
            "--max-num-seqs",
            "--max-model-len",
            "--gpu-memory-utilization",
            "--model",
        ):
            assert flag in command, f"{name} lacks {flag}"
        assert command[command.index("--gpu-memory-utilization") + 1] == "0.90"
        assert command[command.index("--port") + 1] == str(SIM_PORT)
        (device,) = service["deploy"]["resources"]["reservations"]["devices"]
        assert device["capabilities"] == ["gpu"]
        gpus.update(device["device_ids"])
        assert "/health" in " ".join(service["healthcheck"]["test"])
    assert len(gpus) == 2, "each vLLM replica gets its own GPU by default"


def test_simulated_replicas_run_the_gateway_image(compose: dict[str, Any]) -> None:
    deja = compose["services"]["deja"]
    for index, name in enumerate(("sim-0", "sim-1")):
        service = compose["services"][name]
        assert service["build"] == deja["build"] and service["image"] == deja["image"]
        command = service["command"]
        assert command[:2] == ["deja", "sim"]
        assert command[command.index("--host") + 1] == "0.0.0.0"
        assert command[command.index("--port") + 1] == str(SIM_PORT)
        assert service["networks"]["default"]["aliases"] == [f"vllm-{index}"]
        check = " ".join(service["healthcheck"]["test"])
        assert f"127.0.0.1:{SIM_PORT}/health'" in check  # the simulator's /health, not /healthz


def test_gateway_port_healthcheck_and_build(compose: dict[str, Any]) -> None:
    deja = compose["services"]["deja"]
    assert deja["build"]["context"] == ".."
    assert (
        COMPOSE_FILE.parent / deja["build"]["context"] / deja["build"]["dockerfile"]
    ).resolve() == (ROOT / "Dockerfile")
    (port,) = deja["ports"]
    assert port.rsplit(":", 1)[1] == str(DEJA_PORT)
    check = " ".join(deja["healthcheck"]["test"])
    assert f"127.0.0.1:{DEJA_PORT}/healthz" in check
    assert deja["depends_on"]["redis"]["condition"] == "service_healthy"


def test_bind_mounts_exist_and_match_what_the_services_read(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (COMPOSE_FILE.parent / source).exists(), f"{name}: {source} is missing"
    grafana = compose["services"]["grafana"]["volumes"]
    provider = load_yaml(DEPLOY / "grafana" / "provisioning" / "dashboards" / "deja.yml")
    dashboards_path = provider["providers"][0]["options"]["path"]
    assert f"./grafana/dashboards:{dashboards_path}:ro" in grafana
    assert "./grafana/provisioning:/etc/grafana/provisioning:ro" in grafana
    otel = compose["services"]["otel-collector"]
    assert "./otel/collector.yaml:/etc/otelcol/collector.yaml:ro" in otel["volumes"]
    assert "--config=/etc/otelcol/collector.yaml" in otel["command"]
    datasource = load_yaml(DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml")
    assert host_port(datasource["datasources"][0]["url"]) == ("prometheus", 9090)


def test_collector_reaches_langfuse_with_the_provisioned_keys(compose: dict[str, Any]) -> None:
    env = environment(compose["services"]["otel-collector"])
    host, port = host_port(env["LANGFUSE_OTLP_ENDPOINT"])
    assert host == "langfuse-web" and env["LANGFUSE_OTLP_ENDPOINT"].endswith("/api/public/otel")
    web = compose["services"]["langfuse-web"]
    assert any(p.endswith(f":{port}") for p in web["ports"])
    web_env = environment(web)
    public = web_env["LANGFUSE_INIT_PROJECT_PUBLIC_KEY"]
    secret = web_env["LANGFUSE_INIT_PROJECT_SECRET_KEY"]
    assert base64.b64decode(env["LANGFUSE_AUTH"]).decode() == f"{public}:{secret}"
