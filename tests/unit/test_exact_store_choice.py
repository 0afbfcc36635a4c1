"""``DEJA_EXACT_STORE`` chooses the exact store (``app.wiring.stores.exact_kind``, the one place
that decides it), and a contradiction with ``DEJA_REDIS_URL`` stops ``deja serve`` in one line
naming both variables instead of one of them silently winning."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli.main import main
from app.wiring.stores import embedded_parts, exact_kind, uses_data_dir_exclusively
from config.settings import ConfigError, Settings

URL = "redis://127.0.0.1:1/0"


def settings(tmp_path: Path, **values: object) -> Settings:
    return Settings(data_dir=tmp_path, semantic_enabled=False, corpora_enabled=False, **values)


@pytest.mark.parametrize(
    ("values", "kind"),
    [
        ({}, "disk"),
        ({"redis_url": URL}, "redis"),
        ({"exact_store": "memory"}, "memory"),
        ({"exact_store": "disk"}, "disk"),
        ({"exact_store": "redis", "redis_url": URL}, "redis"),
        ({"redis_url": "redis+cluster://127.0.0.1:1"}, "redis"),
        ({"exact_store": "redis", "redis_url": URL, "redis_cluster": True}, "redis"),
        ({"cache_enabled": False, "exact_store": "disk", "redis_url": URL}, None),
    ],
)
def test_the_setting_chooses_the_store(
    tmp_path: Path, values: dict[str, object], kind: str
) -> None:
    assert exact_kind(settings(tmp_path, **values)) == kind


@pytest.mark.parametrize("chosen", ["disk", "memory"])
def test_an_embedded_store_with_a_redis_url_is_refused(tmp_path: Path, chosen: str) -> None:
    contradiction = settings(tmp_path, exact_store=chosen, redis_url=URL)
    with pytest.raises(ConfigError) as caught:
        exact_kind(contradiction)
    message = str(caught.value)
    assert "\n" not in message
    assert f"DEJA_EXACT_STORE={chosen}" in message and "DEJA_REDIS_URL" in message
    # Every question about the exact store asks the same function, so none answers quietly.
    with pytest.raises(ConfigError):
        uses_data_dir_exclusively(contradiction)
    with pytest.raises(ConfigError):
        embedded_parts(contradiction)


def test_redis_without_a_url_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="DEJA_EXACT_STORE=redis needs DEJA_REDIS_URL"):
        exact_kind(settings(tmp_path, exact_store="redis"))


def test_a_cluster_without_a_url_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="DEJA_REDIS_CLUSTER=true needs DEJA_REDIS_URL"):
        exact_kind(settings(tmp_path, redis_cluster=True))


def test_the_data_dir_and_workers_follow_the_choice(tmp_path: Path) -> None:
    assert uses_data_dir_exclusively(settings(tmp_path))  # disk
    assert not uses_data_dir_exclusively(settings(tmp_path, exact_store="memory"))
    assert not uses_data_dir_exclusively(settings(tmp_path, redis_url=URL))
    assert embedded_parts(settings(tmp_path, exact_store="memory"))
    assert not embedded_parts(settings(tmp_path, redis_url=URL))


def test_deja_serve_refuses_the_contradiction_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEJA_EXACT_STORE", "disk")
    monkeypatch.setenv("DEJA_REDIS_URL", URL)
    monkeypatch.setenv("DEJA_DATA_DIR", str(tmp_path))
    result = CliRunner().invoke(main, ["serve", "--port", "0"])
    assert result.exit_code == 2  # a settings error (config.problems)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert "DEJA_EXACT_STORE=disk" in lines[0] and "DEJA_REDIS_URL" in lines[0]
