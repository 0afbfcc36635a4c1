"""deploy/prometheus: promtool on the config, the rules and their unit tests; rule contents."""

from __future__ import annotations

import subprocess

import pytest

from tests.deploy.helpers import (
    COMPOSE_FILE,
    PROMETHEUS_DIR,
    RULES_DIR,
    alert_rules,
    contract_violations,
    environment,
    host_port,
    load_compose,
    load_yaml,
    require_binary,
    resolvable_names,
)

REQUIRED_ALERTS = {
    "VllmKVCacheSaturatedWithPreemptions",
    "VllmSpecDecodeLowAcceptance",
    "VllmQueueBuildingWithFreeKVCache",
    "DejaCacheHitRateDropped",
    "DejaReplicaDown",
    "DejaStoreErrors",
    "DejaSemanticLookupTimeouts",
}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_binary("promtool"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=PROMETHEUS_DIR.parents[1],
    )


def test_promtool_check_config() -> None:
    result = promtool("check", "config", "deploy/prometheus/prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    # The config's rule_files glob must find the rule files (promtool counts them).
    files = sorted(RULES_DIR.glob("*.yml"))
    assert files
    assert f"{len(files)} rule files found" in result.stdout + result.stderr


def test_promtool_check_rules() -> None:
    files = [str(p.relative_to(PROMETHEUS_DIR.parents[1])) for p in sorted(RULES_DIR.glob("*.yml"))]
    result = promtool("check", "rules", *files)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_rule_unit_tests() -> None:
    """Each alert fires on synthetic series that should fire it, with its exact annotations,
    and stays silent on ones that should not (deploy/prometheus/tests/rules_test.yml)."""
    result = promtool("test", "rules", "deploy/prometheus/tests/rules_test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    tested = {
        case["alertname"]
        for test in load_yaml(PROMETHEUS_DIR / "tests" / "rules_test.yml")["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    names = {rule["alert"] for rule in alert_rules() if "alert" in rule}
    assert names <= tested, f"alerts without a firing unit test: {sorted(names - tested)}"


def test_required_alerts_exist_with_severity_duration_and_text() -> None:
    rules = [rule for rule in alert_rules() if "alert" in rule]
    assert {rule["alert"] for rule in rules} >= REQUIRED_ALERTS
    for rule in rules:
        assert rule.get("for"), f"{rule['alert']} has no for: duration"
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
        assert rule["annotations"].get("summary"), rule["alert"]
        assert rule["annotations"].get("description"), rule["alert"]
    replica_down = next(r for r in rules if r["alert"] == "DejaReplicaDown")
    assert "deja_replica_healthy" in replica_down["expr"]
    assert replica_down["for"] == "1m"


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda r: r.get("alert", r.get("record")))
def test_rule_expressions_use_contract_metric_names(rule: dict[str, str]) -> None:
    assert contract_violations(rule["expr"]) == []


def test_scrape_targets_are_the_compose_services() -> None:
    config = load_yaml(PROMETHEUS_DIR / "prometheus.yml")
    assert config["rule_files"] == ["rules/*.yml"]
    jobs = {
        job["job_name"]: [t for sc in job["static_configs"] for t in sc["targets"]]
        for job in config["scrape_configs"]
    }
    compose = load_compose()
    # deja: service name and container port.
    assert jobs["deja"] == ["deja:8080"]
    assert "deja" in compose["services"]
    # vllm: exactly the replicas deja is configured with, under either replica profile.
    replicas = environment(compose["services"]["deja"])["DEJA_REPLICAS"].split(",")
    assert sorted(jobs["vllm"]) == sorted(f"{h}:{p}" for h, p in map(host_port, replicas))
    for profile in ("gpu", "sim"):
        active = {
            name: svc
            for name, svc in compose["services"].items()
            if not svc.get("profiles") or profile in svc["profiles"]
        }
        names = resolvable_names(active)
        for target in jobs["vllm"]:
            assert target.split(":")[0] in names, f"{target} unknown under --profile {profile}"
    # Prometheus mounts this folder where the config expects it.
    prom = compose["services"]["prometheus"]
    assert "./prometheus:/etc/prometheus:ro" in prom["volumes"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in prom["command"]
    assert COMPOSE_FILE.parent / "prometheus" == PROMETHEUS_DIR
