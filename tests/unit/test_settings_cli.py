"""Settings precedence (flags > env > YAML > defaults), masking, and the CLI surface."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from app.cli.main import main
from config.settings import load_settings
from deja.errors import ConfigError


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.upper().startswith("DEJA_"):
            monkeypatch.delenv(name)


def test_defaults() -> None:
    s = load_settings()
    assert (s.host, s.port, s.cache_ttl_seconds, s.redis_url) == ("127.0.0.1", 8080, 86400, None)


def test_yaml_env_and_override_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "deja.yaml"
    cfg.write_text(
        "port: 9000\ncache_ttl_seconds: 60\nreplicas:\n  - http://a:1\n  - http://b:2/\n"
    )
    s = load_settings(cfg)
    assert (s.port, s.cache_ttl_seconds, s.replicas) == (9000, 60, ["http://a:1", "http://b:2"])
    monkeypatch.setenv("DEJA_PORT", "9100")
    monkeypatch.setenv("DEJA_REPLICAS", "http://c:3, http://d:4")
    s = load_settings(cfg)
    assert (s.port, s.replicas, s.cache_ttl_seconds) == (9100, ["http://c:3", "http://d:4"], 60)
    assert load_settings(cfg, port=9200).port == 9200
    monkeypatch.setenv("DEJA_CONFIG", str(cfg))
    assert load_settings().cache_ttl_seconds == 60


@pytest.mark.parametrize(
    "text", ["port: [1\n", "- a\n- b\n", "no_such_setting: 1\n", "replicas: [ftp://x]\n"]
)
def test_bad_config_is_a_clear_error(tmp_path: Path, text: str) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError):
        load_settings(cfg)


def test_print_config_masks_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEJA_REDIS_URL", "redis://user:hunter2@redis.internal:6379/0")
    monkeypatch.setenv("DEJA_REPLICA_API_KEY", "sk-very-secret")
    result = CliRunner().invoke(main, ["serve", "--print-config", "--port", "8181"])
    assert result.exit_code == 0, result.output
    config = orjson.loads(result.output)
    assert "hunter2" not in result.output and "sk-very-secret" not in result.output
    assert config["redis_url"] == "redis://user:********@redis.internal:6379/0"
    assert config["replica_api_key"] == "********"
    assert config["port"] == 8181


def test_bad_env_value_is_reported_without_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEJA_PORT", "not-a-port")
    result = CliRunner().invoke(main, ["serve", "--print-config"])
    assert result.exit_code != 0
    assert "port" in result.output and "Traceback" not in result.output


def test_help_lists_commands() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    assert "serve" in result.output and "sim" in result.output
    serve_help = CliRunner().invoke(main, ["serve", "--help"]).output
    assert "--demo" in serve_help and "--print-config" in serve_help


def test_readme_documents_every_setting() -> None:
    from config.settings import Settings

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    missing = [n for n in Settings.model_fields if f"`DEJA_{n.upper()}`" not in readme]
    assert not missing, f"settings missing from the README's configuration table: {missing}"


def test_empty_keys_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEJA_ADMIN_KEY", "")
    with pytest.raises(ConfigError):
        load_settings()
