"""``deja labels``: the request sent, the table, the file written and the exit codes (fake HTTP,
no gateway)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner, Result

from app.cli import support as cli_support
from app.cli.labels import labels_group
from deja.semantic.pairs import read_pairs

ENV = {"DEJA_ADMIN_URL": "http://gw.test:8080", "DEJA_ADMIN_KEY": "adm-key"}
EXPORT = (
    b'{"a": "How do I sort a list?", "b": "How to sort a list?", "duplicate": true}\n'
    b'{"a": "How do I sort a list?", "b": "How do I reverse a list?", "duplicate": false}\n'
)


def answer(
    monkeypatch: pytest.MonkeyPatch, reply: Callable[[httpx.Request], httpx.Response]
) -> list[httpx.Request]:
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return reply(request)

    transport = httpx.MockTransport(handle)
    monkeypatch.setattr(
        cli_support,
        "admin_client",
        functools.partial(cli_support.admin_client, transport=transport),
    )
    return seen


def run(*args: str) -> Result:
    return CliRunner(env=ENV).invoke(labels_group, list(args))


def test_export_writes_what_deja_calibrate_reads(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen = answer(monkeypatch, lambda _: httpx.Response(200, content=EXPORT))
    out = tmp_path / "pairs.jsonl"
    result = run("export", "--out", str(out), "--tenant", "acme")
    assert result.exit_code == 0, result.output
    assert seen[0].url.path == "/admin/semantic/labels/export"
    assert seen[0].url.params["tenant"] == "acme"
    assert seen[0].headers["authorization"] == "Bearer adm-key"
    assert "wrote 2 labelled pair(s) (1 same, 1 different)" in result.output
    assert [p.duplicate for p in read_pairs(out)] == [True, False]


def test_export_writes_nothing_when_refused_or_empty(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    out = tmp_path / "pairs.jsonl"
    error = {"error": {"message": "a valid admin bearer key is required", "type": "x"}}
    answer(monkeypatch, lambda _: httpx.Response(401, json=error))
    refused = run("export", "--out", str(out))
    assert refused.exit_code == 4 and "authentication rejected" in refused.output
    answer(monkeypatch, lambda _: httpx.Response(200, content=b""))
    empty = run("export", "--out", str(out))
    assert empty.exit_code == 1 and "no labelled pairs yet" in empty.output
    assert not out.exists()


def test_list_shows_the_labels_newest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    row = {
        "label": "different",
        "tenant": "acme",
        "question": "How do I reverse a list?",
        "cached_question": "How do I sort a list?",
    }
    body = {"total": 1, "same": 0, "labels": [row]}
    seen = answer(monkeypatch, lambda _: httpx.Response(200, json=body))
    result = run("list", "--limit", "5")
    assert result.exit_code == 0, result.output
    assert seen[0].url.params["limit"] == "5"
    lines = result.output.splitlines()
    assert lines[0] == "1 labelled pair(s), 0 same"
    assert lines[2].split()[:2] == ["different", "acme"] and "reverse" in lines[2]
