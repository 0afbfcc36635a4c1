"""``deja calibrate`` on labelled pairs: the table the gateway loads, the curves, the plot, and
clear errors for bad rows."""

from __future__ import annotations

import json
import re
from pathlib import Path

import matplotlib.image
import pytest
from click.testing import CliRunner

from app.cli.main import main as deja
from deja.semantic.crossencoder import SHIPPED_DIR
from deja.semantic.cutoffs import CALIBRATION_FILE, load_table
from tests.support import MODEL_DIR

pytestmark = pytest.mark.integration

DEV = Path(__file__).resolve().parents[3] / "shared" / "data" / "qqp_dev.jsonl"


@pytest.fixture
def pairs(tmp_path: Path) -> Path:
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(DEV.read_text().splitlines(keepends=True)[:120]))
    return path


#: "no cut-off for N of 18 precision targets (LOW..HIGH)"
UNFITTED = re.compile(
    r"no cut-off for (?P<n>\d+) of 18 precision targets \((?P<low>[\d.]+)\.\.(?P<high>[\d.]+)\)"
)


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
        "--allow-partial",  # 120 pairs cannot fit the highest targets under the Wilson bound
        "--json",
    )
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    report = json.loads(result.stdout.splitlines()[-1])  # type: ignore[attr-defined]
    assert report["pairwise"]["pairs"] == 120
    assert 0.5 <= report["pairwise"]["auc_cosine"] <= 1
    assert [c["theta"] for c in report["cosine"]][:2] == [0.8, 0.85]
    table = load_table(out)  # the gateway's own loader accepts it
    # --k and the floor default to the gateway's (the shipped table's), not values of its own.
    shipped = load_table(SHIPPED_DIR / CALIBRATION_FILE)
    assert (table.k, table.cosine_floor) == (shipped.k, shipped.cosine_floor)
    assert len(table.rows) == 18 and table.targets[0] == 0.8
    assert "pairs.jsonl" in table.fitted_on
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    height, width, _ = matplotlib.image.imread(png).shape  # a drawn figure, not a bare grid
    assert (width, height) == (1350, 825)


def test_a_table_with_targets_it_cannot_fit_is_refused_unless_asked(
    pairs: Path, tmp_path: Path
) -> None:
    """120 pairs and 3 labelled hits per estimate: the highest targets get no cut-off. A table
    like that would serve no semantic hit at those targets, so nothing is written and exit 1,
    unless --allow-partial (then a warning names them)."""
    out = tmp_path / "cal.json"
    refused = run("--pairs", str(pairs), "--output", str(out), "--min-labelled", "3")
    assert refused.exit_code == 1  # type: ignore[attr-defined]
    found = UNFITTED.search(refused.output)  # type: ignore[attr-defined]
    assert found is not None, refused.output  # type: ignore[attr-defined]
    missing, low = int(found["n"]), float(found["low"])
    assert 0 < missing < 18 and found["high"] == "0.97"
    assert "nothing written" in refused.output and not out.exists()  # type: ignore[attr-defined]
    allowed = run(
        "--pairs", str(pairs), "--output", str(out), "--min-labelled", "3", "--allow-partial"
    )
    assert allowed.exit_code == 0, allowed.output  # type: ignore[attr-defined]
    assert f"warning: no cut-off for {missing} of 18" in allowed.output and out.exists()  # type: ignore[attr-defined]
    assert load_table(out).targets[1] < low


def test_too_few_pairs_write_nothing_and_exit_1(tmp_path: Path) -> None:
    path = tmp_path / "eight.jsonl"
    path.write_text("".join(DEV.read_text().splitlines(keepends=True)[:8]))
    out = tmp_path / "cal.json"
    for extra in ((), ("--allow-partial",)):
        result = run("--pairs", str(path), "--output", str(out), *extra)
        assert result.exit_code == 1, result.output  # type: ignore[attr-defined]
        assert "no cut-off for 18 of 18" in result.output  # type: ignore[attr-defined]
        assert "Traceback" not in result.output and not out.exists()  # type: ignore[attr-defined]


def test_every_bad_row_is_listed(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    good = '{"a": "x", "b": "y", "duplicate": true}'
    path.write_text("\n".join([good, "not json", good, '{"a": "x"}', "[1]"]) + "\n")
    result = run("--pairs", str(path), "--output", str(tmp_path / "c.json"))
    assert result.exit_code == 1  # type: ignore[attr-defined]
    output = result.output  # type: ignore[attr-defined]
    assert "3 bad row(s)" in output
    for line in (
        f"{path}:2: not valid JSON",
        f"{path}:4: missing field 'b'",
        f"{path}:5: expected",
    ):
        assert line in output


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
