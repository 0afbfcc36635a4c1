"""``deja cache|threshold|keys``: requests sent, output, exit codes (fake HTTP, no gateway)."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import httpx
import pytest
import yaml
from click.testing import CliRunner, Result

from app.cli import cache as admin_cli
from app.cli import support as cli_support
from app.cli.cache import cache_group
from app.cli.keys import keys_group
from app.cli.support import parse_duration
from app.cli.threshold import threshold_group

KEY = "adm-s3cret-key"
URL = "http://gw.test:8080"
NOW = 1_700_000_000.0
ID1 = "a" * 12 + "1" * 52
ID2 = "b" * 12 + "2" * 52

deja = click.Group("deja", commands=[cache_group, threshold_group, keys_group])


@dataclass
class FakeGateway:
    """Answers every request with ``status``/``body`` (or raises ``error``) and records it."""

    status: int = 200
    body: Any = field(default_factory=dict)
    error: Exception | None = None
    requests: list[httpx.Request] = field(default_factory=list)

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.error is not None:
            raise self.error
        if isinstance(self.body, str):
            return httpx.Response(self.status, text=self.body)
        return httpx.Response(self.status, json=self.body)

    @property
    def last(self) -> httpx.Request:
        assert self.requests, "no request was sent"
        return self.requests[-1]

    def last_json(self) -> Any:
        return json.loads(self.last.content)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("DEJA_"):
            monkeypatch.delenv(name)
    monkeypatch.setattr(admin_cli, "_now", lambda: NOW)


@pytest.fixture
def gw(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGateway]:
    fake = FakeGateway()
    transport = httpx.MockTransport(fake.handle)
    monkeypatch.setattr(
        cli_support,
        "admin_client",
        functools.partial(cli_support.admin_client, transport=transport),
    )
    yield fake


def run(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> Result:
    base = {"DEJA_ADMIN_URL": URL, "DEJA_ADMIN_KEY": KEY}
    return CliRunner(env={**base, **(env or {})}).invoke(deja, list(args), input=stdin)


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


# --------------------------------------------------------------------------- transport


def test_auth_header_url_and_key_options(gw: FakeGateway) -> None:
    gw.body = {"global": 0.9, "tenants": {}, "models": {}}
    assert run("threshold", "get").exit_code == 0
    assert gw.last.headers["authorization"] == f"Bearer {KEY}"
    assert str(gw.last.url) == f"{URL}/admin/threshold"
    result = CliRunner().invoke(
        deja, ["threshold", "get", "--url", "https://other:9/base/", "--key", "k2"]
    )
    assert result.exit_code == 0, result.output
    assert gw.last.headers["authorization"] == "Bearer k2"
    assert str(gw.last.url) == "https://other:9/base/admin/threshold"


def test_key_is_required(gw: FakeGateway) -> None:
    result = CliRunner().invoke(deja, ["cache", "stats"])
    assert result.exit_code == 2
    assert "DEJA_ADMIN_KEY" in result.stderr
    assert not gw.requests


@pytest.mark.parametrize("url", ["gw.test:8080", "ftp://gw.test", "http://"])
def test_bad_url_is_a_usage_error(gw: FakeGateway, url: str) -> None:
    result = run("cache", "stats", "--url", url)
    assert result.exit_code == 2
    assert not gw.requests


def test_connection_refused_exits_3(gw: FakeGateway) -> None:
    gw.error = httpx.ConnectError("[Errno 111] Connection refused")
    result = run("cache", "stats")
    assert result.exit_code == 3
    assert "cannot reach the gateway" in result.stderr
    assert URL in result.stderr
    assert result.stdout == ""


def test_timeout_exits_3(gw: FakeGateway) -> None:
    gw.error = httpx.ReadTimeout("timed out")
    result = run("cache", "ls", "--timeout", "2.5")
    assert result.exit_code == 3
    assert "timed out after 2.5s" in result.stderr
    assert gw.last.extensions["timeout"]["read"] == 2.5


@pytest.mark.parametrize("status", [401, 403])
def test_rejected_key_exits_4_without_echoing_it(gw: FakeGateway, status: int) -> None:
    gw.status = status
    gw.body = {"error": {"message": "a valid admin bearer key is required", "type": "x"}}
    result = run("cache", "stats")
    assert result.exit_code == 4
    assert "a valid admin bearer key is required" in result.stderr
    assert KEY not in result.output


def test_api_error_exits_1_with_its_message(gw: FakeGateway) -> None:
    gw.status = 404
    gw.body = {
        "error": {
            "message": "no cache entry " + ID1,
            "type": "invalid_request_error",
            "param": None,
            "code": "not_found",
        }
    }
    result = run("cache", "rm", ID1)
    assert result.exit_code == 1
    assert f"no cache entry {ID1}" in result.stderr


def test_non_openai_error_and_non_json_success(gw: FakeGateway) -> None:
    gw.status = 502
    gw.body = "<html>Bad Gateway</html>"
    result = run("cache", "stats")
    assert result.exit_code == 1
    assert "HTTP 502" in result.stderr
    gw.status = 200
    result = run("cache", "stats")
    assert result.exit_code == 1
    assert "not JSON" in result.stderr


def test_unexpected_shape_exits_1(gw: FakeGateway) -> None:
    gw.body = {"something": "else"}
    result = run("cache", "stats")
    assert result.exit_code == 1
    assert "unexpected response" in result.stderr


# --------------------------------------------------------------------------- cache stats

STATS = {
    "layers": {
        "exact": {"backend": "redis", "entries": 1234},
        "semantic": {"backend": None, "entries": None},
    },
    "since_start": {"requests": 10, "exact": 5, "semantic": 2, "miss": 3, "bypass": 0, "off": 0},
    "tenants": {
        "zeta": {"requests": 0, "exact": 0, "semantic": 0, "miss": 0, "bypass": 0, "off": 0},
        "acme": {"requests": 8, "exact": 4, "semantic": 2, "miss": 2, "bypass": 0, "off": 0},
    },
}


def test_cache_stats_table(gw: FakeGateway) -> None:
    gw.body = STATS
    result = run("cache", "stats")
    assert result.exit_code == 0, result.output
    assert (gw.last.method, gw.last.url.path) == ("GET", "/admin/cache/stats")
    out = lines(result.stdout)
    assert out[0].split() == ["LAYER", "BACKEND", "ENTRIES"]
    assert out[1].split() == ["exact", "redis", "1234"]
    assert out[2].split() == ["semantic", "disabled", "-"]
    assert out[3].split()[0] == "TENANT" and out[3].endswith("HIT RATE")
    assert out[4].split() == ["acme", "8", "4", "2", "2", "0", "0", "75.0%"]
    assert out[5].split() == ["zeta", "0", "0", "0", "0", "0", "0", "-"]
    assert out[6].split()[-1] == "70.0%" and out[6].startswith("(all tenants)")
    # Right-aligned numbers: every tenant row has the same width.
    assert len({len(line) for line in out[3:]}) == 1


def test_cache_stats_json(gw: FakeGateway) -> None:
    gw.body = STATS
    result = run("cache", "stats", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == STATS


# --------------------------------------------------------------------------- cache ls

ENTRIES = {
    "entries": [
        {
            "id": ID1,
            "tenant": "acme",
            "namespace": "default",
            "model": "gpt-4o-mini",
            "question": "What is the capital of France?\nAnswer briefly. " + "x" * 80,
            "created_at": NOW - 300,
            "expires_at": NOW + 7200,
            "hits": 7,
            "similarity": 0.9712,
        },
        {
            "id": ID2,
            "tenant": "globex",
            "namespace": "default",
            "model": "llama-3",
            "question": None,
            "created_at": NOW - 3 * 86400,
            "expires_at": NOW - 1,
            "hits": 0,
            "similarity": None,
        },
    ]
}


def test_cache_ls_request_and_table(gw: FakeGateway) -> None:
    gw.body = ENTRIES
    result = run("cache", "ls", "--tenant", "acme", "--query", "capital of france", "--limit", "5")
    assert result.exit_code == 0, result.output
    assert (gw.last.method, gw.last.url.path) == ("GET", "/admin/cache/entries")
    assert dict(gw.last.url.params) == {"tenant": "acme", "q": "capital of france", "limit": "5"}
    out = lines(result.stdout)
    assert out[0].split() == [
        "ID",
        "TENANT",
        "MODEL",
        "AGE",
        "EXPIRES",
        "IN",
        "HITS",
        "SIMILARITY",
        "QUESTION",
    ]
    row1, row2 = out[1], out[2]
    assert row1.split()[:7] == [ID1[:12], "acme", "gpt-4o-mini", "5m00s", "2h00m", "7", "0.971"]
    assert ID1 not in result.stdout
    assert "What is the capital of France? Answer briefly." in row1  # newline flattened
    assert row1.endswith("...")
    question = row1[out[0].index("QUESTION") :]
    assert len(question) <= 60
    assert row2.split() == [ID2[:12], "globex", "llama-3", "3d00h", "expired", "0", "-", "-"]


def test_cache_ls_defaults_and_no_similarity_column(gw: FakeGateway) -> None:
    gw.body = {"entries": [ENTRIES["entries"][1]]}
    result = run("cache", "ls", "--full-ids")
    assert result.exit_code == 0, result.output
    assert dict(gw.last.url.params) == {"limit": "20"}
    assert "SIMILARITY" not in result.stdout
    assert ID2 in result.stdout


def test_cache_ls_empty_and_json(gw: FakeGateway) -> None:
    gw.body = {"entries": []}
    result = run("cache", "ls")
    assert (result.exit_code, result.stdout.strip()) == (0, "no cache entries")
    gw.body = ENTRIES
    result = run("cache", "ls", "--json")
    assert json.loads(result.stdout) == ENTRIES


def test_cache_ls_rejects_bad_limit(gw: FakeGateway) -> None:
    assert run("cache", "ls", "--limit", "0").exit_code == 2
    assert not gw.requests


# --------------------------------------------------------------------------- cache rm


def test_cache_rm(gw: FakeGateway) -> None:
    gw.body = {"id": ID1, "deleted": True}
    result = run("cache", "rm", ID1)
    assert result.exit_code == 0, result.output
    assert (gw.last.method, gw.last.url.path) == ("DELETE", f"/admin/cache/entries/{ID1}")
    assert result.stdout.strip() == f"removed {ID1}"
    result = run("cache", "rm", ID1, "--json")
    assert json.loads(result.stdout) == {"id": ID1, "deleted": True}


@pytest.mark.parametrize("bad", [ID1[:12], "../flush", ID1 + "0", "g" * 64, ""])
def test_cache_rm_needs_a_full_id(gw: FakeGateway, bad: str) -> None:
    result = run("cache", "rm", bad)
    assert result.exit_code == 2
    assert "--full-ids" in result.stderr
    assert not gw.requests


def test_cache_rm_lowercases_the_id(gw: FakeGateway) -> None:
    gw.body = {"id": ID1, "deleted": True}
    assert run("cache", "rm", ID1.upper()).exit_code == 0
    assert gw.last.url.path == f"/admin/cache/entries/{ID1}"


# --------------------------------------------------------------------------- invalidate


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90.0),
        ("90s", 90.0),
        ("15m", 900.0),
        ("2h", 7200.0),
        ("7d", 604800.0),
        ("1.5h", 5400.0),
        (" 30s ", 30.0),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "s", "-5m", "0", "0s", "5w", "5 min", "1e3", "2h30m", "nan"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_invalidate_body_and_output(gw: FakeGateway) -> None:
    gw.body = {"count": 2, "ids": [ID1, ID2], "dry_run": False}
    result = run(
        "cache",
        "invalidate",
        "--tenant",
        "acme",
        "--model",
        "gpt-4o-mini",
        "--namespace",
        "docs",
        "--older-than",
        "15m",
        "--query",
        "refund policy",
        "--min-similarity",
        "0.9",
    )
    assert result.exit_code == 0, result.output
    assert (gw.last.method, gw.last.url.path) == ("POST", "/admin/cache/invalidate")
    assert gw.last.headers["content-type"] == "application/json"
    assert gw.last_json() == {
        "tenant": "acme",
        "model": "gpt-4o-mini",
        "namespace": "docs",
        "older_than": 900.0,
        "query": "refund policy",
        "min_similarity": 0.9,
    }
    assert lines(result.stdout) == ["removed 2 entries", f"  {ID1[:12]}", f"  {ID2[:12]}"]


def test_invalidate_dry_run_omits_unset_options(gw: FakeGateway) -> None:
    gw.body = {"count": 1, "ids": [ID1], "dry_run": True}
    result = run("cache", "invalidate", "--older-than", "7d", "--dry-run")
    assert result.exit_code == 0, result.output
    assert gw.last_json() == {"older_than": 604800.0, "dry_run": True}
    assert lines(result.stdout)[0] == "would remove 1 entry"
    result = run("cache", "invalidate", "--older-than", "7d", "--dry-run", "--json")
    assert json.loads(result.stdout) == gw.body


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--dry-run"],
        ["--min-similarity", "0.9"],
        ["--tenant", "acme", "--min-similarity", "0.9"],  # min-similarity needs --query
        ["--older-than", "soon"],
        ["--older-than", "0"],
        ["--query", "x", "--min-similarity", "1.5"],
        ["--tenant", ""],
    ],
)
def test_invalidate_refused_locally(gw: FakeGateway, args: list[str]) -> None:
    result = run("cache", "invalidate", *args)
    assert result.exit_code == 2, result.output
    assert not gw.requests


def test_invalidate_without_filter_points_to_flush(gw: FakeGateway) -> None:
    result = run("cache", "invalidate")
    assert "deja cache flush" in result.stderr


# --------------------------------------------------------------------------- flush


def test_flush_refuses_without_tty(gw: FakeGateway) -> None:
    result = run("cache", "flush", stdin="y\n")
    assert result.exit_code == 2
    assert "--yes" in result.stderr
    assert not gw.requests


def test_flush_yes(gw: FakeGateway) -> None:
    gw.body = {"count": 42}
    result = run("cache", "flush", "--yes")
    assert result.exit_code == 0, result.output
    assert (gw.last.method, gw.last.url.path, gw.last_json()) == ("POST", "/admin/cache/flush", {})
    assert result.stdout.strip() == "removed 42 entries (ALL tenants)"
    result = run("cache", "flush", "-y", "--tenant", "acme", "--json")
    assert gw.last_json() == {"tenant": "acme"}
    assert json.loads(result.stdout) == {"count": 42}


def test_flush_confirms_on_a_tty(gw: FakeGateway, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admin_cli, "_stdin_is_tty", lambda: True)
    gw.body = {"count": 3}
    result = run("cache", "flush", "--tenant", "acme", stdin="n\n")
    assert result.exit_code == 2
    assert not gw.requests
    result = run("cache", "flush", "--tenant", "acme", stdin="y\n")
    assert result.exit_code == 0, result.output
    assert "tenant 'acme'" in result.stdout  # the prompt
    assert gw.last_json() == {"tenant": "acme"}


# --------------------------------------------------------------------------- threshold

THRESHOLDS = {
    "global": 0.92,
    "tenants": {"acme": 0.97},
    "models": {"gpt-4o-mini": 0.9},
    "precision": {"global": 0.92, "tenants": {"acme": 0.95}, "models": {}},
}


def test_threshold_get(gw: FakeGateway) -> None:
    gw.body = THRESHOLDS
    result = run("threshold", "get")
    assert result.exit_code == 0, result.output
    assert gw.last.method == "GET"
    assert [line.split() for line in lines(result.stdout)] == [
        ["SETTING", "SCOPE", "NAME", "VALUE"],
        ["precision", "global", "-", "0.92"],
        ["precision", "tenant", "acme", "0.95"],
        ["theta", "global", "-", "0.92"],
        ["theta", "tenant", "acme", "0.97"],
        ["theta", "model", "gpt-4o-mini", "0.9"],
    ]
    result = run("threshold", "get", "--json")
    assert json.loads(result.stdout) == THRESHOLDS


@pytest.mark.parametrize(
    ("args", "body"),
    [
        (["0.93"], {"global": 0.93}),
        (["1"], {"global": 1.0}),
        (["0.97", "--tenant", "acme"], {"tenants": {"acme": 0.97}}),
        (["0.9", "--model", "gpt-4o-mini"], {"models": {"gpt-4o-mini": 0.9}}),
        (["--clear", "--tenant", "acme"], {"tenants": {"acme": None}}),
        (["--clear", "--model", "m"], {"models": {"m": None}}),
        (["--precision", "0.95"], {"precision": {"global": 0.95}}),
        (["--precision", "0.9", "--tenant", "a"], {"precision": {"tenants": {"a": 0.9}}}),
    ],
)
def test_threshold_set(gw: FakeGateway, args: list[str], body: dict[str, Any]) -> None:
    gw.body = THRESHOLDS
    result = run("threshold", "set", *args)
    assert result.exit_code == 0, result.output
    assert (gw.last.method, gw.last.url.path) == ("PUT", "/admin/threshold")
    assert gw.last_json() == body
    assert "SCOPE" in result.stdout  # the resulting table


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["1.5"],
        ["-0.1"],
        ["nan"],
        ["abc"],
        ["0.9", "--tenant", "a", "--model", "m"],
        ["--clear"],
        ["0.9", "--clear", "--tenant", "a"],
    ],
)
def test_threshold_set_usage_errors(gw: FakeGateway, args: list[str]) -> None:
    result = run("threshold", "set", *args)
    assert result.exit_code == 2, result.output
    assert not gw.requests


def test_threshold_api_error(gw: FakeGateway) -> None:
    gw.status = 400
    gw.body = {"error": {"message": "unknown model 'm'", "type": "invalid_request_error"}}
    result = run("threshold", "set", "0.9", "--model", "m")
    assert result.exit_code == 1
    assert "unknown model 'm'" in result.stderr


# --------------------------------------------------------------------------- keys


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def add_key(path: Path, tenant: str) -> tuple[Result, str]:
    result = CliRunner().invoke(deja, ["keys", "add", tenant, "--keys-file", str(path)])
    assert result.exit_code == 0, result.output
    key = result.stdout.strip()
    return result, key


def test_keys_add_creates_a_private_file(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    result, key = add_key(path, "acme")
    assert key.startswith("dj-") and len(key) > 40
    assert result.stdout == key + "\n"  # printed once, alone on stdout
    assert "cannot be shown again" in result.stderr
    assert key not in result.stderr
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    doc = yaml.safe_load(path.read_text())
    assert doc == {"tenants": {"acme": {"key_hashes": [sha256(key)]}}}
    assert key not in path.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["keys.yaml"]  # no temp file left


def test_keys_add_preserves_other_tenants_and_appends(tmp_path: Path) -> None:
    path = tmp_path / "deja-keys.yaml"
    path.write_text(
        "tenants:\n"
        "  globex:\n"
        "    key_hashes: ['" + "f" * 64 + "']\n"
        "    cache: false\n"
        "    ttl_seconds: 60\n"
        "  acme:\n"
        "    cache: true\n"
        "    threshold: 0.95\n"
        "    rate_limit_rpm: 600\n"
        "extra_top_level: kept\n"
    )
    path.chmod(0o644)
    _, first = add_key(path, "acme")
    _, second = add_key(path, "acme")
    assert first != second
    doc = yaml.safe_load(path.read_text())
    assert doc == {
        "tenants": {
            "globex": {"key_hashes": ["f" * 64], "cache": False, "ttl_seconds": 60},
            "acme": {
                "cache": True,
                "threshold": 0.95,
                "rate_limit_rpm": 600,
                "key_hashes": [sha256(first), sha256(second)],
            },
        },
        "extra_top_level": "kept",
    }
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_keys_add_uses_env_default_and_warns_about_comments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "k.yaml"
    path.write_text("# managed by ops\ntenants: {}\n")
    result = CliRunner(env={"DEJA_KEYS_FILE": str(path)}).invoke(deja, ["keys", "add", "t1"])
    assert result.exit_code == 0, result.output
    assert "comments" in result.stderr
    assert list(yaml.safe_load(path.read_text())["tenants"]) == ["t1"]
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(deja, ["keys", "add", "t2"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "deja-keys.yaml").exists()


@pytest.mark.parametrize(
    "text", ["tenants: [a, b]\n", "- x\n", "tenants:\n  a: 3\n", "tenants: {a: {key_hashes: x}}\n"]
)
def test_keys_add_refuses_a_malformed_file(tmp_path: Path, text: str) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(text)
    result = CliRunner().invoke(deja, ["keys", "add", "acme", "--keys-file", str(path)])
    assert result.exit_code == 1
    assert result.stdout == ""  # no key printed when none was stored
    assert path.read_text() == text


@pytest.mark.parametrize("tenant", ["", " acme", "a\nb"])
def test_keys_add_rejects_bad_tenant(tmp_path: Path, tenant: str) -> None:
    result = CliRunner().invoke(deja, ["keys", "add", tenant, "--keys-file", str(tmp_path / "k")])
    assert result.exit_code == 2
    assert not (tmp_path / "k").exists()


def test_keys_list(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    _, key = add_key(path, "acme")
    add_key(path, "acme")
    doc = yaml.safe_load(path.read_text())
    doc["tenants"]["globex"] = {"cache": False}
    path.write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(deja, ["keys", "list", "--keys-file", str(path)])
    assert result.exit_code == 0, result.output
    out = lines(result.stdout)
    assert out[0].split() == ["TENANT", "KEYS", "HASH", "PREFIXES", "SETTINGS"]
    assert out[1].split()[:3] == ["acme", "2", sha256(key)[:8]]
    assert out[2].split() == ["globex", "0", "-", "cache=False"]
    for h in doc["tenants"]["acme"]["key_hashes"]:
        assert h not in result.stdout


def test_keys_list_missing_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(deja, ["keys", "list", "--keys-file", str(tmp_path / "none")])
    assert result.exit_code == 1
    assert "deja keys add" in result.stderr
