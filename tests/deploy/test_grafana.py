"""deploy/grafana: the dashboard JSON, its queries, and the provisioning that loads it."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.helpers import (
    DEPLOY,
    contract_violations,
    dashboard_exprs,
    dashboard_panels,
    grafana_to_promql,
    load_dashboard,
    load_yaml,
    require_binary,
)

DATASOURCES = DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml"


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return load_dashboard()


def test_dashboard_is_a_current_grafana_dashboard(dashboard: dict[str, Any]) -> None:
    assert dashboard["schemaVersion"] >= 36
    assert dashboard["uid"] and dashboard["title"]
    ids = [panel["id"] for panel in dashboard_panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in dashboard_panels(dashboard):
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]


def test_every_query_uses_the_provisioned_datasource(dashboard: dict[str, Any]) -> None:
    (datasource,) = load_yaml(DATASOURCES)["datasources"]
    assert datasource["type"] == "prometheus"
    wanted = {"type": "prometheus", "uid": datasource["uid"]}
    for panel in dashboard_panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == wanted, panel["title"]
        assert panel["targets"], f"{panel['title']} has no query"
        for target in panel["targets"]:
            assert target["datasource"] == wanted, panel["title"]
            assert target["expr"].strip(), panel["title"]


@pytest.mark.parametrize("title,expr", dashboard_exprs(load_dashboard()))
def test_queries_use_only_contract_and_vllm_metrics(title: str, expr: str) -> None:
    assert contract_violations(grafana_to_promql(expr)) == [], title


def test_queries_are_valid_promql(tmp_path: Path, dashboard: dict[str, Any]) -> None:
    """promtool parses every query (written out as recording rules) without a server."""
    rules = [
        {"record": f"dashboard:query_{i}", "expr": grafana_to_promql(expr)}
        for i, (_, expr) in enumerate(dashboard_exprs(dashboard))
    ]
    path = tmp_path / "dashboard_queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run(
        [require_binary("promtool"), "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_required_panels_exist(dashboard: dict[str, Any]) -> None:
    exprs = " ".join(expr for _, expr in dashboard_exprs(dashboard))
    for name in (
        "deja_requests_total",  # hit rate by layer
        "deja_semantic_similarity_bucket",  # similarity histogram
        "deja_semantic_threshold",  # θ marked
        "deja_cached_completion_tokens_total",
        "deja_saved_model_seconds_total",
        "deja_upstream_ttfb_seconds_bucket",  # TTFT through deja ...
        "vllm:time_to_first_token_seconds_bucket",  # ... vs the replicas' own
        "deja_replica_in_flight",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total",
        "vllm:spec_decode_num_accepted_tokens_total",
        "vllm:spec_decode_num_draft_tokens_total",
        "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions_total",
    ):
        assert name in exprs, f"no panel queries {name}"
    kinds = {panel["type"] for panel in dashboard_panels(dashboard)}
    assert "heatmap" in kinds
    heatmap = next(p for p in dashboard_panels(dashboard) if p["type"] == "heatmap")
    assert "deja_semantic_similarity_bucket" in heatmap["targets"][0]["expr"]
    assert heatmap["targets"][0]["format"] == "heatmap"
    # θ is drawn next to the similarity quantiles.
    assert any(
        "deja_semantic_threshold" in " ".join(t["expr"] for t in p.get("targets", []))
        and "deja_semantic_similarity_bucket" in " ".join(t["expr"] for t in p.get("targets", []))
        for p in dashboard_panels(dashboard)
    )


def test_dashboard_provider_points_at_the_dashboards_folder() -> None:
    (provider,) = load_yaml(DEPLOY / "grafana" / "provisioning" / "dashboards" / "deja.yml")[
        "providers"
    ]
    assert provider["type"] == "file"
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"
