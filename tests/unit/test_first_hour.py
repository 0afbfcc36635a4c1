"""The small first-hour fixes that need no server: the plots' HTML fallback, the demo's admin
key and console lines, the short calibration line, precision targets the table cannot serve,
the CLI's advice on a rejected admin key."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import httpx
import pytest

from app.cli import plot
from app.cli.demo import DEMO_KEY_FILE, console_notes, demo_admin_key
from app.cli.support import AuthError, _decode
from app.wiring.semantic import short
from config.settings import load_settings
from deja.errors import InvalidRequestError
from deja.semantic.crossencoder import SHIPPED_DIR
from deja.semantic.cutoffs import load_table
from deja.tenancy.thresholds import Thresholds

CURVES = {"verified": [(0.1, 0.99), (0.5, 0.9)], "cosine alone": [(0.2, 0.8), (0.6, 0.7)]}


def test_a_png_without_matplotlib_becomes_the_html_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(plot, "has_matplotlib", lambda: False)
    written = plot.write_plot(CURVES, "t", tmp_path / "curve.png")
    assert written == tmp_path / "curve.html" and not (tmp_path / "curve.png").exists()
    assert "<svg" in written.read_text()
    assert "pip install 'deja[plot]'" in capsys.readouterr().err


def test_a_png_with_matplotlib_is_a_labelled_figure(tmp_path: Path) -> None:
    import matplotlib.image

    written = plot.write_plot(CURVES, "t", tmp_path / "curve.png")
    assert written == tmp_path / "curve.png"
    assert matplotlib.image.imread(written).shape[:2] == (825, 1350)


def test_the_hand_written_png_encoder_is_gone() -> None:
    assert not hasattr(plot, "encode_png")
    import app.cli.heatmap as heatmap

    assert not hasattr(heatmap, "_GLYPHS")


def test_the_demo_key_is_made_once_kept_private_and_shown_once(tmp_path: Path) -> None:
    key, fresh = demo_admin_key(tmp_path)
    assert fresh and key.startswith("dj-demo-admin-") and len(key) > 30
    path = tmp_path / DEMO_KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert demo_admin_key(tmp_path) == (key, False)
    settings = load_settings(None, data_dir=tmp_path, demo=True)
    first = console_notes("http://127.0.0.1:8080", settings, (key, True))
    later = console_notes("http://127.0.0.1:8080", settings, (key, False))
    assert first[0] == f"console: http://127.0.0.1:8080/admin/ui/  admin key: {key}"
    assert key not in " ".join(later) and str(path) in later[0]


def test_without_a_key_the_console_line_says_how_to_set_one(tmp_path: Path) -> None:
    settings = load_settings(None, data_dir=tmp_path)
    (line,) = console_notes("http://h:1", settings, None)
    assert "console: http://h:1/admin/ui/ is off" in line and "DEJA_ADMIN_KEY=" in line


def test_the_calibration_line_at_start_up_is_short() -> None:
    fitted = load_table(SHIPPED_DIR / "calibration.json").fitted_on
    assert len(fitted) > 200  # the whole provenance stays in GET /admin/semantic
    line = short(fitted)
    assert fitted.startswith(line) and len(line) <= 80
    assert "qqp_train.jsonl.gz" in line  # the first clause still names the data


def test_a_precision_target_above_the_table_is_refused_with_its_reach() -> None:
    thresholds = Thresholds(global_=0.8)
    thresholds.precision.high = 0.97
    for change in ({"global": 0.99}, {"tenants": {"acme": 0.98}}):
        with pytest.raises(InvalidRequestError) as info:
            thresholds.apply({"precision": change})
        assert "covers targets up to 0.97" in info.value.message
    thresholds.apply({"precision": {"global": 0.97}})
    assert thresholds.precision.global_ == 0.97


@pytest.mark.parametrize(
    ("status", "message", "advice"),
    [
        (403, "the admin API is disabled", "the gateway must be started with DEJA_ADMIN_KEY set"),
        (401, "a valid admin bearer key is required", "the gateway was started with"),
    ],
)
def test_a_rejected_admin_key_says_the_gateway_needs_it(
    status: int, message: str, advice: str
) -> None:
    body = {"error": {"message": message, "type": "x", "param": None, "code": None}}
    with pytest.raises(AuthError) as info:
        _decode(httpx.Response(status, json=body))
    assert advice in info.value.message


async def test_simulated_replicas_are_named_in_uvicorns_lines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from sim.config import SimConfig
    from sim.runner import start_simulators

    with caplog.at_level(logging.INFO, logger="uvicorn.error"):
        cluster = await start_simulators(1, SimConfig())
        await cluster.stop()
    started = [r.getMessage() for r in caplog.records if "Started server process" in r.getMessage()]
    assert started and all(m.startswith("simulated replica sim-0 (deja sim): ") for m in started)
