"""Labelled pairs through a real gateway (uvicorn on a socket, simulated replicas): the admin
routes, their validation and audit lines, the subscriber hook, a restart on the same data dir,
the export `deja calibrate` reads and `deja labels export`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from app.cli.main import main as deja
from deja.semantic.labelled import FILE_NAME as LABELS_FILE
from deja.semantic.labelled import Label, LabelledPairs
from deja.semantic.pairs import read_pairs
from sim.runner import SimCluster
from tests.support import until

pytestmark = pytest.mark.e2e

KEY = "labels-admin-key"
ADMIN = {"authorization": f"Bearer {KEY}"}
PAIR: dict[str, Any] = {
    "question": "How can I reset my password?",
    "cached_question": "How do I reset my password?",
    "entry_id": "e" * 64,
    "tenant": "acme",
    "model": "sim-model",
    "similarity": 0.93,
    "score": 0.81,
    "label": "same",
}


class Admin:
    def __init__(self, url: str, app: Any) -> None:
        self.url = url
        self.app = app
        self.http = httpx.AsyncClient(base_url=url, timeout=30)

    async def call(self, method: str, path: str, status: int = 200, **kw: Any) -> Any:
        resp = await self.http.request(method, path, headers=ADMIN, **kw)
        assert resp.status_code == status, resp.text
        return resp.json() if resp.headers["content-type"] == "application/json" else resp


@pytest.fixture
async def gw(sims: SimCluster, make_gateway: Any, tmp_path: Path) -> AsyncIterator[Admin]:
    async with make_gateway(replicas=sims.urls, admin_key=KEY, data_dir=tmp_path) as (url, app):
        admin = Admin(url, app)
        yield admin
        await admin.http.aclose()


async def test_the_label_routes_need_the_admin_key(gw: Admin) -> None:
    calls = [
        ("GET", "/admin/semantic/served"),
        ("GET", "/admin/semantic/labels"),
        ("POST", "/admin/semantic/labels"),
        ("GET", "/admin/semantic/labels/export"),
        ("DELETE", "/admin/semantic/labels/abc"),
    ]
    for method, path in calls:
        resp = await gw.http.request(method, path, json=PAIR if method == "POST" else None)
        assert resp.status_code == 401, path
        assert resp.json()["error"]["type"]


async def test_a_label_is_saved_listed_changed_audited_and_removed(gw: Admin) -> None:
    seen: list[Label] = []
    gw.app.state.gateway.labels.subscribe(seen.append)
    saved = await gw.call("POST", "/admin/semantic/labels", json=PAIR)
    assert saved["label"] == "same" and saved["who"].startswith("admin:")
    await gw.call("POST", "/admin/semantic/labels", json={**PAIR, "question": "Reset password?"})
    changed = await gw.call("POST", "/admin/semantic/labels", json={**PAIR, "label": "different"})
    assert changed["id"] == saved["id"]
    listed = await gw.call("GET", "/admin/semantic/labels")
    assert listed["total"] == 2 and listed["same"] == 1
    assert [(x["question"], x["label"]) for x in listed["labels"]] == [
        ("How can I reset my password?", "different"),
        ("Reset password?", "same"),
    ]
    assert (await gw.call("GET", "/admin/semantic/labels", params={"tenant": "x"}))["total"] == 0
    assert [(x.question, x.same, x.score) for x in seen] == [
        ("How can I reset my password?", True, 0.81),
        ("Reset password?", True, 0.81),
        ("How can I reset my password?", False, 0.81),
    ]
    actions = (await gw.call("GET", "/admin/audit", params={"action": "semantic"}))["actions"]
    assert actions[0]["action"] == "semantic.label" and actions[0]["label"] == "different"
    await gw.call("DELETE", f"/admin/semantic/labels/{saved['id']}")
    await gw.call("DELETE", f"/admin/semantic/labels/{saved['id']}", status=404)
    assert (await gw.call("GET", "/admin/semantic/labels"))["total"] == 1
    actions = (await gw.call("GET", "/admin/audit", params={"action": "semantic"}))["actions"]
    assert actions[0]["action"] == "semantic.unlabel" and actions[0]["pair"] == saved["id"]


async def test_labels_are_the_entrys_evidence_once_each_until_removed(
    sims: SimCluster, make_gateway: Any, tmp_path: Path
) -> None:
    """With the semantic layer on, a label is evidence about its entry: a changed label replaces
    the pair's first one, and removing it withdraws it."""
    settings = {"admin_key": KEY, "data_dir": tmp_path, "semantic_enabled": True}
    async with make_gateway(replicas=sims.urls, **settings) as (url, app):
        gw = Admin(url, app)
        learning = app.state.gateway.learning
        assert learning is not None
        first = await gw.call("POST", "/admin/semantic/labels", json=PAIR)
        await gw.call("POST", "/admin/semantic/labels", json={**PAIR, "label": "different"})
        await gw.call("POST", "/admin/semantic/labels", json={**PAIR, "question": "Reset it?"})
        assert sorted(v.correct for v in learning.evidence.of(PAIR["entry_id"])) == [False, True]
        await gw.call("DELETE", f"/admin/semantic/labels/{first['id']}")
        assert [v.correct for v in learning.evidence.of(PAIR["entry_id"])] == [True]
        await gw.http.aclose()


async def test_labels_on_disk_and_another_process_s_labels_are_evidence_too(
    sims: SimCluster, make_gateway: Any, tmp_path: Path
) -> None:
    """After a restart the labels on disk are the entry's evidence again, and a label another
    gateway process on the same data dir writes reaches this one's evidence within the
    re-read interval, with no call here; its removal withdraws it."""
    settings = {
        "admin_key": KEY,
        "data_dir": tmp_path,
        "semantic_enabled": True,
        "labels_refresh_seconds": 0.05,
    }
    async with make_gateway(replicas=sims.urls, **settings) as (url, app):
        first = Admin(url, app)
        await first.call("POST", "/admin/semantic/labels", json={**PAIR, "label": "different"})
        await first.http.aclose()
    async with make_gateway(replicas=sims.urls, **settings) as (url, app):
        evidence = app.state.gateway.learning.evidence
        assert [v.correct for v in evidence.of(PAIR["entry_id"])] == [False]
        other = LabelledPairs.load(tmp_path / LABELS_FILE)  # as another worker holds it
        told = Label(
            at=1.0,
            tenant="acme",
            model="sim-model",
            question="Reset it?",
            cached_question=PAIR["cached_question"],
            entry_id=PAIR["entry_id"],
            similarity=0.9,
            score=0.8,
            same=True,
            who="admin:other",
        )
        await other.add(told)
        await until(lambda: len(evidence.of(PAIR["entry_id"])) == 2)
        await other.remove(told.id)
        await until(lambda: len(evidence.of(PAIR["entry_id"])) == 1)
        assert [v.correct for v in evidence.of(PAIR["entry_id"])] == [False]


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"label": "maybe"}, "label"),
        ({"question": ""}, "question"),
        ({"similarity": 1.5}, "similarity"),
        ({"cached_question": None}, "cached_question"),
    ],
)
async def test_a_bad_label_names_its_field(gw: Admin, change: dict[str, Any], param: str) -> None:
    resp = await gw.call("POST", "/admin/semantic/labels", status=422, json={**PAIR, **change})
    assert resp["error"]["param"] == param and param in resp["error"]["message"]
    missing = {k: v for k, v in PAIR.items() if k != "entry_id"}
    resp = await gw.call("POST", "/admin/semantic/labels", status=422, json=missing)
    assert resp["error"]["param"] == "entry_id"


async def test_the_export_is_a_download_deja_calibrate_reads(gw: Admin, tmp_path: Path) -> None:
    await gw.call("POST", "/admin/semantic/labels", json=PAIR)
    await gw.call(
        "POST", "/admin/semantic/labels", json={**PAIR, "question": "Q2?", "label": "different"}
    )
    resp = await gw.call("GET", "/admin/semantic/labels/export")
    assert resp.headers["content-disposition"] == (
        'attachment; filename="deja-labelled-pairs.jsonl"'
    )
    out = tmp_path / "exported.jsonl"
    out.write_bytes(resp.content)
    assert [(p.a, p.b, p.duplicate) for p in read_pairs(out)] == [
        ("How do I reset my password?", "How can I reset my password?", True),
        ("How do I reset my password?", "Q2?", False),
    ]
    env = {"DEJA_ADMIN_URL": gw.url, "DEJA_ADMIN_KEY": KEY}
    cli_out = tmp_path / "cli.jsonl"
    run = CliRunner(env=env).invoke
    result = await asyncio.to_thread(run, deja, ["labels", "export", "--out", str(cli_out)])
    assert result.exit_code == 0, result.output
    assert "wrote 2 labelled pair(s) (1 same, 1 different)" in result.output
    assert cli_out.read_bytes() == resp.content
    args = ["labels", "export", "--out", str(tmp_path / "none.jsonl"), "--tenant", "nobody"]
    empty = await asyncio.to_thread(run, deja, args)
    assert empty.exit_code == 1 and "no labelled pairs" in empty.output
    assert not (tmp_path / "none.jsonl").exists()


async def test_labels_survive_a_restart_on_the_same_data_dir(
    sims: SimCluster, make_gateway: Any, tmp_path: Path
) -> None:
    settings = {"replicas": sims.urls, "admin_key": KEY, "data_dir": tmp_path}
    async with make_gateway(**settings) as (url, app):
        first = Admin(url, app)
        await first.call("POST", "/admin/semantic/labels", json=PAIR)
        await first.http.aclose()
    async with make_gateway(**settings) as (url, app):
        again = Admin(url, app)
        listed = await again.call("GET", "/admin/semantic/labels")
        await again.http.aclose()
    assert [(x["question"], x["label"]) for x in listed["labels"]] == [
        ("How can I reset my password?", "same")
    ]
