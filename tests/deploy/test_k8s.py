"""deploy/k8s: every manifest parses, and names, labels, ports and probes line up.

No cluster runs where these tests run: this checks structure and cross-references only.
"""

from __future__ import annotations

import re
from typing import Any

import kubernetes_validate.utils
import pytest

from config.settings import Settings
from deja.redisclient import cluster_url
from tests.deploy.helpers import (
    DEJA_METRICS,
    K8S,
    ROOT,
    SETTINGS_ENV,
    host_port,
    load_yaml,
    load_yaml_all,
)

DEJA_PORT = Settings.model_fields["port"].default


def manifests() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name.startswith("values-") or path.name == "kustomization.yaml":
            continue
        docs.extend(load_yaml_all(path))
    return docs


def find(kind: str, name: str) -> dict[str, Any]:
    matches = [d for d in manifests() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind}/{name}: {len(matches)} found"
    return matches[0]


def container(workload: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in workload["spec"]["template"]["spec"]["containers"] if c["name"] == name)


def port_number(ctr: dict[str, Any], port: int | str) -> int:
    if isinstance(port, int):
        return port
    return next(p["containerPort"] for p in ctr["ports"] if p["name"] == port)


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_every_file_parses_and_every_object_is_well_formed() -> None:
    files = sorted(K8S.glob("*.yaml"))
    assert files
    for path in files:
        for doc in load_yaml_all(path):
            assert isinstance(doc, dict), path.name
    for doc in manifests():
        assert doc["apiVersion"] and doc["kind"] and doc["metadata"]["name"]
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "deja", doc["metadata"]["name"]


def test_kustomization_lists_every_manifest_but_the_secret_example() -> None:
    kustomization = load_yaml(K8S / "kustomization.yaml")
    listed = set(kustomization["resources"])
    on_disk = {
        p.name
        for p in K8S.glob("*.yaml")
        if not p.name.startswith("values-") and p.name != "kustomization.yaml"
    }
    assert listed == on_disk - {"deja-secret.example.yaml"}


def test_deja_deployment_probes_ports_and_security() -> None:
    deployment = find("Deployment", "deja")
    assert deployment["spec"]["replicas"] == 3
    ctr = container(deployment, "deja")
    (port,) = ctr["ports"]
    assert port["containerPort"] == DEJA_PORT
    probes = {
        "liveness": ctr["livenessProbe"],
        "readiness": ctr["readinessProbe"],
        "startup": ctr["startupProbe"],
    }
    assert probes["liveness"]["httpGet"]["path"] == "/healthz"
    assert probes["readiness"]["httpGet"]["path"] == "/readyz"
    assert probes["startup"]["httpGet"]["path"] == "/healthz"
    for probe in probes.values():
        assert port_number(ctr, probe["httpGet"]["port"]) == DEJA_PORT
    resources = ctr["resources"]
    assert resources["requests"]["cpu"] and resources["requests"]["memory"]
    assert resources["limits"]["memory"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert ctr["securityContext"]["readOnlyRootFilesystem"] is True
    assert ctr["securityContext"]["allowPrivilegeEscalation"] is False


def test_data_dir_and_tmp_are_writable_emptydirs() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    data_dir = re.search(r"DEJA_DATA_DIR=(\S+)", dockerfile)
    assert data_dir
    deployment = find("Deployment", "deja")
    ctr = container(deployment, "deja")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in ctr["volumeMounts"]}
    for path in (data_dir.group(1), "/tmp"):
        assert path in mounts, f"{path} is not mounted (read-only root filesystem)"
        assert "emptyDir" in volumes[mounts[path]]


def test_deja_env_comes_from_configmap_and_secrets_and_names_real_settings() -> None:
    deployment = find("Deployment", "deja")
    ctr = container(deployment, "deja")
    (env_from,) = ctr["envFrom"]
    configmap = find("ConfigMap", env_from["configMapRef"]["name"])
    names = set(configmap["data"]) | {e["name"] for e in ctr["env"]}
    deja_names = {n for n in names if n.startswith("DEJA_")}
    assert deja_names <= SETTINGS_ENV, sorted(deja_names - SETTINGS_ENV)
    env = {e["name"]: e for e in ctr["env"]}
    admin = env["DEJA_ADMIN_KEY"]["valueFrom"]["secretKeyRef"]
    assert admin["name"] == "deja-secrets"
    example = find("Secret", "deja-secrets")
    assert admin["key"] in example["stringData"]
    keys_volume = next(
        v for v in deployment["spec"]["template"]["spec"]["volumes"] if "secret" in v
    )
    assert keys_volume["secret"]["secretName"] == "deja-secrets"
    (item,) = keys_volume["secret"]["items"]
    assert item["key"] in example["stringData"]
    mount = next(m for m in ctr["volumeMounts"] if m["name"] == keys_volume["name"])
    assert configmap["data"]["DEJA_KEYS_FILE"] == f"{mount['mountPath']}/{item['path']}"
    # The Redis URL expands the chart's password, defined before it.
    order = [e["name"] for e in ctr["env"]]
    assert "$(REDIS_PASSWORD)" in env["DEJA_REDIS_URL"]["value"]
    assert order.index("REDIS_PASSWORD") < order.index("DEJA_REDIS_URL")


def test_several_pods_share_the_redis_cluster_and_the_qdrant_server() -> None:
    """Qdrant Edge and the in-process LRU are per pod: with 3 pods both stores must be servers."""
    deployment = find("Deployment", "deja")
    ctr = container(deployment, "deja")
    configmap = find("ConfigMap", "deja-config")
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    redis_url = env["DEJA_REDIS_URL"]
    assert cluster_url(redis_url) is not None, "the gateway must use its cluster client"
    assert host_port(redis_url) == ("redis-cluster", 6379)
    password = next(e for e in ctr["env"] if e["name"] == "REDIS_PASSWORD")
    assert password["valueFrom"]["secretKeyRef"] == {
        "name": "redis-cluster",
        "key": "redis-password",
    }
    assert host_port(configmap["data"]["DEJA_QDRANT_URL"]) == ("qdrant", 6333)
    # Those are the services the Helm releases create (README.md): redis-cluster, qdrant.
    redis_values = load_yaml(K8S / "values-redis-cluster.yaml")
    nodes, replicas = redis_values["cluster"]["nodes"], redis_values["cluster"]["replicas"]
    assert replicas >= 1 and nodes // (replicas + 1) >= 3  # three masters at least
    config = redis_values["redis"]["configmap"]
    assert "cluster-require-full-coverage no" in config  # other slots serve during a failover
    assert "maxmemory-policy volatile-lru" in config  # never evicts θ (no TTL)
    qdrant_values = load_yaml(K8S / "values-qdrant.yaml")
    assert qdrant_values["config"]["cluster"]["enabled"] is True
    assert qdrant_values["replicaCount"] >= 3
    assert qdrant_values["config"]["storage"]["collection"]["replication_factor"] >= 2
    assert env.get("DEJA_QDRANT_API_KEY") is None  # from the chart's secret, not inline
    secret_ref = next(e for e in ctr["env"] if e["name"] == "DEJA_QDRANT_API_KEY")
    assert secret_ref["valueFrom"]["secretKeyRef"] == {"name": "qdrant-apikey", "key": "api-key"}
    assert qdrant_values["apiKey"] is True


def test_qdrant_distribution_settings_are_valid_and_fit_the_qdrant_nodes() -> None:
    data = find("ConfigMap", "deja-config")["data"]
    settings = Settings(
        qdrant_shard_number=data["DEJA_QDRANT_SHARD_NUMBER"],
        qdrant_replication_factor=data["DEJA_QDRANT_REPLICATION_FACTOR"],
        qdrant_write_consistency_factor=data["DEJA_QDRANT_WRITE_CONSISTENCY_FACTOR"],
    )  # the settings model's own checks (write consistency <= replication)
    nodes = load_yaml(K8S / "values-qdrant.yaml")["replicaCount"]
    assert settings.qdrant_replication_factor is not None
    assert settings.qdrant_shard_number is not None
    assert 2 <= settings.qdrant_replication_factor <= nodes  # a node may fail
    assert settings.qdrant_shard_number >= nodes  # every node holds shards


def test_service_hpa_and_pdb_select_the_deployment() -> None:
    deployment = find("Deployment", "deja")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selects(deployment["spec"]["selector"]["matchLabels"], labels)
    ctr = container(deployment, "deja")

    service = find("Service", "deja")
    assert selects(service["spec"]["selector"], labels)
    (port,) = service["spec"]["ports"]
    assert port_number(ctr, port["targetPort"]) == DEJA_PORT

    hpa = find("HorizontalPodAutoscaler", "deja")
    assert hpa["apiVersion"] == "autoscaling/v2"
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", "deja")
    assert hpa["spec"]["minReplicas"] >= 2
    by_type = {m["type"]: m for m in hpa["spec"]["metrics"]}
    assert set(by_type) == {"Resource", "Pods"}
    assert by_type["Resource"]["resource"]["name"] == "cpu"
    assert ctr["resources"]["requests"]["cpu"], "CPU utilisation needs a CPU request"
    rate = by_type["Pods"]["pods"]
    assert rate["target"]["type"] == "AverageValue" and float(rate["target"]["averageValue"]) > 0

    pdb = find("PodDisruptionBudget", "deja")
    assert pdb["apiVersion"] == "policy/v1"
    assert selects(pdb["spec"]["selector"]["matchLabels"], labels)
    assert "minAvailable" not in pdb["spec"]  # scales with the HPA: one away at a time
    assert 0 < pdb["spec"]["maxUnavailable"] < hpa["spec"]["minReplicas"]


def test_the_request_rate_metric_is_served_from_a_metric_deja_exports() -> None:
    """The HPA's custom metric is the adapter's rule over deja_requests_total, a counter in the
    metric contract, per pod."""
    hpa = find("HorizontalPodAutoscaler", "deja")
    (rate,) = [m["pods"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"]
    (rule,) = load_yaml(K8S / "values-prometheus-adapter.yaml")["rules"]["custom"]
    assert rule["name"]["as"] == rate["metric"]["name"]
    series = re.match(r"(\w+)\{", rule["seriesQuery"])
    assert series and re.fullmatch(rule["name"]["matches"], series.group(1))
    family = series.group(1).removesuffix("_total")
    assert DEJA_METRICS[family].kind == "counter"
    assert rule["resources"]["overrides"]["pod"] == {"resource": "pod"}
    assert "rate(<<.Series>>" in rule["metricsQuery"]


def test_gateways_spread_over_zones_and_nodes() -> None:
    deployment = find("Deployment", "deja")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    spread = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
    keys = [c["topologyKey"] for c in spread]
    assert keys == ["topology.kubernetes.io/zone", "kubernetes.io/hostname"]
    for constraint in spread:
        assert constraint["maxSkew"] == 1
        assert selects(constraint["labelSelector"]["matchLabels"], labels)


def test_every_manifest_validates_against_the_kubernetes_schema() -> None:
    """kubernetes-validate's bundled OpenAPI schemas (offline), strict: an unknown or
    misspelt field fails, as a wrong type does."""
    version = kubernetes_validate.utils.latest_version()
    for doc in manifests():
        kubernetes_validate.utils.validate(doc, version, strict=True)


def test_replicas_are_the_vllm_statefulset_pods_behind_a_headless_service() -> None:
    statefulset = find("StatefulSet", "vllm")
    service = find("Service", statefulset["spec"]["serviceName"])
    assert service["spec"]["clusterIP"] == "None"
    pod_labels = statefulset["spec"]["template"]["metadata"]["labels"]
    assert selects(service["spec"]["selector"], pod_labels)
    ctr = container(statefulset, "vllm")
    assert ctr["resources"]["limits"]["nvidia.com/gpu"] == 1
    args = [str(a) for a in ctr["args"]]
    for flag in ("--enable-prefix-caching", "--enable-chunked-prefill", "--max-num-seqs"):
        assert flag in args
    vllm_port = port_number(ctr, "http")
    assert int(args[args.index("--port") + 1]) == vllm_port
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert ctr[probe]["httpGet"]["path"] == "/health"
    replicas = find("ConfigMap", "deja-config")["data"]["DEJA_REPLICAS"].split(",")
    expected = {
        (f"{statefulset['metadata']['name']}-{i}.{service['metadata']['name']}", vllm_port)
        for i in range(statefulset["spec"]["replicas"])
    }
    assert {host_port(url) for url in replicas} == expected


@pytest.mark.parametrize(
    "name", ["values-redis-cluster.yaml", "values-qdrant.yaml", "values-prometheus-adapter.yaml"]
)
def test_helm_values_parse(name: str) -> None:
    assert isinstance(load_yaml(K8S / name), dict)
