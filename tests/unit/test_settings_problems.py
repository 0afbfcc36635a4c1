"""Bad settings are reported as the user wrote them: the variable (or YAML key, or flag), the
value, what is allowed, one line each; ``deja serve`` exits 2 with exactly that. One test per
kind of error."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli.main import main as deja
from config.settings import load_settings
from deja.errors import ConfigError
from deja.semantic.crossencoder import SHIPPED_DIR
from deja.semantic.cutoffs import load_table


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import os

    for name in list(os.environ):
        if name.upper().startswith("DEJA_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("DEJA_DATA_DIR", str(tmp_path / "data"))


def problem(**env: str) -> tuple[str, str | None, str]:
    """The one problem the environment ``env`` makes."""
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        with pytest.raises(ConfigError) as info:
            load_settings(None)
    (p,) = info.value.problems
    return p.name, p.value, p.allowed


def test_a_value_out_of_range_names_the_variable_and_the_range() -> None:
    assert problem(DEJA_SEMANTIC_PRECISION="1.5") == (
        "DEJA_SEMANTIC_PRECISION",
        "1.5",
        "a number >= 0.5 and <= 1.0",
    )


def test_a_value_of_the_wrong_type() -> None:
    assert problem(DEJA_PORT="abc") == ("DEJA_PORT", "abc", "an integer >= 0 and <= 65535")


def test_a_boolean_that_is_not_one() -> None:
    name, value, allowed = problem(DEJA_ACCESS_LOG="maybe")
    assert (name, value) == ("DEJA_ACCESS_LOG", "maybe") and allowed.startswith("true or false")


def test_json_that_does_not_parse_says_why() -> None:
    name, value, allowed = problem(DEJA_RAG_MODEL_CORPUS="{bad")
    assert (name, value) == ("DEJA_RAG_MODEL_CORPUS", "{bad")
    assert "a JSON object" in allowed and "not valid JSON: Expecting property name" in allowed


def test_an_enum_lists_its_choices_and_keeps_the_users_spelling() -> None:
    assert problem(deja_log_level="loud") == (
        "deja_log_level",
        "loud",
        "one of debug, info, warning, error",
    )


def test_an_unknown_yaml_key_suggests_the_known_one(tmp_path: Path) -> None:
    config = tmp_path / "deja.yaml"
    config.write_text("semantic_precison: 0.9\n")
    name, value, allowed = problem(DEJA_CONFIG=str(config))
    assert (name, value) == (f"semantic_precison (in {config})", "0.9")
    assert "did you mean semantic_precision?" in allowed


def test_a_yaml_value_is_named_by_its_key_and_file(tmp_path: Path) -> None:
    config = tmp_path / "deja.yaml"
    config.write_text("port: 99999\n")
    assert problem(DEJA_CONFIG=str(config)) == (
        f"port (in {config})",
        "99999",
        "an integer >= 0 and <= 65535",
    )


def test_yaml_that_does_not_parse(tmp_path: Path) -> None:
    config = tmp_path / "deja.yaml"
    config.write_text("port: [1, 2\n")
    name, value, allowed = problem(DEJA_CONFIG=str(config))
    assert name == f"config file {config}" and value is None
    assert allowed.startswith("valid YAML (the parser says:")


def test_a_flag_is_named_as_a_flag() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(None, port=70000)
    assert info.value.problems[0].name == "--port"


def test_a_check_across_fields_says_what_goes_together() -> None:
    name, value, allowed = problem(DEJA_LANGFUSE_HOST="https://cloud.langfuse.com")
    assert name == "settings (checked together)" and value is None
    assert "langfuse_public_key" in allowed


def test_every_bad_setting_is_listed_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEJA_PORT", "abc")
    monkeypatch.setenv("DEJA_WORKERS", "0")
    with pytest.raises(ConfigError) as info:
        load_settings(None)
    assert [p.name for p in info.value.problems] == ["DEJA_PORT", "DEJA_WORKERS"]
    assert str(info.value).startswith("deja: bad settings (2)")


def test_serve_prints_three_lines_and_exits_2() -> None:
    result = CliRunner(env={"DEJA_SEMANTIC_PRECISION": "1.5"}).invoke(deja, ["serve"])
    assert result.exit_code == 2
    assert result.output.splitlines() == [
        "deja: bad setting",
        "  setting: DEJA_SEMANTIC_PRECISION",
        "  value:   1.5",
        "  allowed: a number >= 0.5 and <= 1.0",
    ]
    assert "pydantic" not in result.output and "Traceback" not in result.output


def test_a_precision_target_the_table_cannot_serve_is_refused_at_start(tmp_path: Path) -> None:
    """0.99 is a valid number but the shipped table measures lower targets only: serving
    it would switch semantic hits off without a word."""
    env = {"DEJA_SEMANTIC_PRECISION": "0.99", "DEJA_PORT": "0"}
    result = CliRunner(env=env).invoke(deja, ["serve"])
    assert result.exit_code == 2, result.output
    lines = result.output.splitlines()
    assert lines[:3] == [
        "deja: bad setting",
        "  setting: DEJA_SEMANTIC_PRECISION",
        "  value:   0.99",
    ]
    high = load_table(SHIPPED_DIR / "calibration.json").targets[1]
    assert high < 0.99 and f"covers: up to {high:.2f}" in lines[3]


def test_a_precision_target_in_yaml_is_named_by_its_key(tmp_path: Path) -> None:
    config = tmp_path / "deja.yaml"
    config.write_text("semantic_precision: 0.99\nport: 0\n")
    result = CliRunner().invoke(deja, ["serve", "--config", str(config)])
    assert result.exit_code == 2, result.output
    assert f"  setting: semantic_precision (in {config})" in result.output.splitlines()
