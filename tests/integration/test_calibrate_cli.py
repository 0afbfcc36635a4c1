"""``deja calibrate`` on labelled pairs: the table the gateway loads, the curves, the plot, and
clear errors for bad rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli.main import main as deja
from deja.semantic.cutoffs import load_table
from tests.support import MODEL_DIR

pytestmark = pytest.mark.integration

DEV = Path(__file__).resolve().parents[3] / "shared" / "data" / "qqp_dev.jsonl"


@pytest.fixture
def pairs(tmp_path: Path) -> Path:
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(DEV.read_text().splitlines(keepends=True)[:120]))
    return path


def run(*args: str) -> object:
    env = {"DEJA_MODEL_DIR": str(MODEL_DIR)}
    return CliRunner(env=env).invoke(deja, ["calibrate", *args])


def test_writes_a_loadable_table_and_a_plot(pairs: Path, tmp_path: Path) -> None:
    out, png = tmp_path / "cal.json", tmp_path / "curve.png"
    result = run(
        "--pairs",
        str(pairs),
        "--output",
        str(out),
        "--plot",
        str(png),
        "--min-labelled",
        "3",
        "--json",
    )
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    report = json.loads(result.stdout.splitlines()[-1])  # type: ignore[attr-defined]
    assert report["pairwise"]["pairs"] == 120
    assert 0.5 <= report["pairwise"]["auc_cosine"] <= 1
    assert [c["theta"] for c in report["cosine"]][:2] == [0.8, 0.85]
    table = load_table(out)  # the gateway's own loader accepts it
    assert table.k == 4 and table.cosine_floor == 0.7 and len(table.rows) == 18
    assert "pairs.jsonl" in table.fitted_on
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"a": "x", "b": "y"}', "line 2: missing field 'duplicate'"),
        ('{"a": "x", "b": 3, "duplicate": true}', "line 2: field 'b' must be str"),
        ("not json", "line 2: not valid JSON"),
    ],
)
def test_bad_rows_are_named_by_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"a": "x", "b": "y", "duplicate": true}\n' + line + "\n")
    result = run("--pairs", str(path), "--output", str(tmp_path / "c.json"))
    assert result.exit_code == 1  # type: ignore[attr-defined]
    assert message.replace("line ", f"{path}:") in result.output or message in result.output  # type: ignore[attr-defined]
