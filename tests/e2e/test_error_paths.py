"""Error paths of the FastAPI routes (issue 19, findings 3 and 11): a client's mistake keeps its
keep-alive connection, logs no traceback, and is answered in OpenAI's error shape (422
included); HEAD works where GET does; no public OpenAPI schema lists the admin API."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from deja.tenancy.keyring import key_hash
from sim.runner import SimCluster

pytestmark = pytest.mark.e2e

ADMIN = {"authorization": "Bearer adm"}
CLIENT = {"authorization": "Bearer dj-alpha"}


def keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys.yaml"
    path.write_text(yaml.safe_dump({"tenants": {"alpha": {"key_hashes": [key_hash("dj-alpha")]}}}))
    return path


def shaped(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    error: dict[str, Any] = body["error"]
    return error


def client_addr(response: httpx.Response) -> Any:
    return response.extensions["network_stream"].get_extra_info("client_addr")


#: (method, path, headers, body, status): one client mistake per FastAPI error family.
MISTAKES: list[tuple[str, str, dict[str, str], bytes | None, int]] = [
    ("GET", "/admin/cache/stats", {}, None, 401),
    ("GET", "/admin/cache/stats", CLIENT, None, 403),
    ("GET", "/admin/cache/entries/" + "0" * 64, ADMIN, None, 404),
    ("PUT", "/admin/corpora/kb/documents/a.docx?tenant=alpha", ADMIN, b"PK\x03\x04", 400),
    (
        "PUT",
        "/admin/corpora/kb/documents/big.md?tenant=alpha",
        ADMIN,
        b"# Big\n\n" + b"w " * 8000,
        413,
    ),
    ("GET", "/metrics", {"authorization": "Bearer wrong"}, None, 401),
    ("GET", "/v1/models", {}, None, 401),
    ("GET", "/admin/cache/entries?limit=many", ADMIN, None, 422),
]


async def test_client_mistakes_keep_the_connection_and_log_no_traceback(
    sims: SimCluster, make_gateway: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # the client's own request lines
    async with (
        make_gateway(
            replicas=sims.urls,
            admin_key="adm",
            metrics_key="met",
            keys_file=keys_file(tmp_path),
            models_require_key=True,
            corpora_enabled=True,
            corpus_max_file_bytes=8192,
        ) as (url, _),
        httpx.AsyncClient(base_url=url, limits=httpx.Limits(max_connections=1)) as http,
    ):
        first = await http.get("/healthz")
        addr = client_addr(first)
        for _ in range(25):
            for method, path, headers, body, status in MISTAKES:
                failed = await http.request(method, path, headers=headers, content=body)
                assert failed.status_code == status, (path, failed.text)
                shaped(failed)
                ok = await http.get("/healthz")  # on the same connection, every time
                assert ok.status_code == 200
                assert client_addr(failed) == client_addr(ok) == addr
        invalid = await http.get("/admin/cache/entries?limit=many", headers=ADMIN)
        error = shaped(invalid)
        assert error["param"] == "limit" and error["type"] == "invalid_request_error"
    text = caplog.text
    assert "Exception in ASGI application" not in text
    assert "Traceback" not in text
    # A few start-up lines, none per mistake (the admin's own failed uploads are audited).
    lines = [r for r in caplog.records if r.name != "deja.audit"]
    assert len(lines) < 20, text


async def test_head_works_where_get_does_and_no_public_schema(
    sims: SimCluster, make_gateway: Any
) -> None:
    async with (
        make_gateway(replicas=sims.urls, admin_key="adm") as (url, _),
        httpx.AsyncClient(base_url=url) as http,
    ):
        for path, headers in (
            ("/admin/ui/", ADMIN),
            ("/admin/cache/stats", ADMIN),
            ("/admin/replicas", ADMIN),
            ("/v1/models", {}),
            ("/healthz", {}),
            ("/readyz", {}),
        ):
            got = await http.get(path, headers=headers, follow_redirects=True)
            head = await http.head(str(got.url), headers=headers)
            assert got.status_code == 200, path
            assert head.status_code == 200, path
            assert head.content == b""
            assert head.headers["content-type"] == got.headers["content-type"]
        for path in ("/openapi.json", "/docs", "/redoc"):
            assert (await http.get(path)).status_code == 404
            assert (await http.get(path, headers=ADMIN)).status_code == 404
