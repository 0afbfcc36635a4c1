"""deploy/otel/collector.yaml and deploy/nginx/nginx.conf."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.deploy.helpers import DEPLOY, environment, host_port, load_compose, load_yaml

NGINX_CONF = DEPLOY / "nginx" / "nginx.conf"


def test_collector_pipelines_are_complete() -> None:
    config = load_yaml(DEPLOY / "otel" / "collector.yaml")
    protocols = config["receivers"]["otlp"]["protocols"]
    assert protocols["grpc"]["endpoint"].endswith(":4317")
    assert protocols["http"]["endpoint"].endswith(":4318")
    assert "batch" in config["processors"]
    exporters = config["exporters"]
    assert "debug" in exporters
    langfuse = exporters["otlphttp/langfuse"]
    assert langfuse["endpoint"] == "${env:LANGFUSE_OTLP_ENDPOINT}"
    assert langfuse["headers"]["Authorization"] == "Basic ${env:LANGFUSE_AUTH}"
    pipelines = config["service"]["pipelines"]
    assert set(pipelines["traces"]["exporters"]) == {"debug", "otlphttp/langfuse"}
    for name, pipeline in pipelines.items():
        assert "batch" in pipeline["processors"], name
        for receiver in pipeline["receivers"]:
            assert receiver in config["receivers"], (name, receiver)
        for processor in pipeline["processors"]:
            assert processor in config["processors"], (name, processor)
        for exporter in pipeline["exporters"]:
            assert exporter in exporters, (name, exporter)
    # Every ${env:X} the config reads is set on the collector's container.
    wanted = set(
        re.findall(r"\$\{env:([A-Z_]+)\}", (DEPLOY / "otel" / "collector.yaml").read_text())
    )
    assert wanted <= set(environment(load_compose()["services"]["otel-collector"]))


def test_nginx_hashes_on_the_prefix_key_over_the_compose_replicas() -> None:
    text = NGINX_CONF.read_text()
    upstream = re.search(r"upstream\s+(\w+)\s*\{(.*?)\}", text, re.S)
    assert upstream
    body = upstream.group(2)
    assert re.search(r"^\s*hash \$http_x_prefix_hash consistent;", body, re.M)
    servers = re.findall(r"^\s*server\s+(\S+?)[\s;]", body, re.M)
    replicas = environment(load_compose()["services"]["deja"])["DEJA_REPLICAS"].split(",")
    assert sorted(servers) == sorted(f"{h}:{p}" for h, p in map(host_port, replicas))
    assert f"proxy_pass http://{upstream.group(1)};" in text
    assert "X-Prefix-Hash" in text  # the comment explaining where the key comes from


@pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx is not installed (optional)")
def test_nginx_accepts_the_config(tmp_path: Path) -> None:
    """`nginx -t` with the replica names pointed at 127.0.0.1 (they resolve only in compose)."""
    text = re.sub(r"server\s+vllm-\d+:", "server 127.0.0.1:", NGINX_CONF.read_text())
    text = text.replace("pid /tmp/nginx-deja.pid;", f"pid {tmp_path / 'nginx.pid'};")
    config = tmp_path / "nginx.conf"
    config.write_text(text)
    result = subprocess.run(
        ["nginx", "-t", "-q", "-c", str(config), "-e", str(tmp_path / "error.log")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stdout + result.stderr
