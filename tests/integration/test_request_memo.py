"""The request memo keeps every promise of the exact layer: byte-identical requests reuse their
validated form and key, never an answer, and nothing that authenticates, limits, isolates or
invalidates is skipped."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from deja.request import CachePolicy, GatewayRequest
from deja.tenancy.keyring import key_hash
from middleware.memo import MAX_BODY_BYTES, SHAPING_HEADERS, Prepared, RequestMemo, memo_key
from sim.runner import SimCluster
from tests.support import SIM_MODEL

pytestmark = pytest.mark.integration

KEYS = {"alpha": "dj-alpha", "beta": "dj-beta", "slow": "dj-slow"}
ADMIN = {"authorization": "Bearer admin"}


def prepared(raw: bytes) -> Prepared:
    req = GatewayRequest("chat", {}, raw, "m", False, False, True, "t", CachePolicy())
    return Prepared(req, "e" * 64, None)


def test_memo_is_bounded_by_entries_and_bytes_oldest_out_first() -> None:
    memo = RequestMemo(max_entries=2, max_bytes=1000)
    for name in ("a", "b", "c"):
        memo.put(name, prepared(name.encode() * 10))
    assert len(memo) == 2 and memo.get("a") is None and memo.get("c") is not None
    memo.put("big", prepared(b"x" * 995))  # evicts until the bodies fit in 1000 bytes
    assert len(memo) == 1 and memo.get("big") is not None
    memo.put("huge", prepared(b"x" * (MAX_BODY_BYTES + 1)))
    assert memo.get("huge") is None
    off = RequestMemo(max_entries=0)
    off.put("a", prepared(b"a"))
    assert off.get("a") is None


def test_memo_key_covers_tenant_body_and_every_shaping_header() -> None:
    base = memo_key("chat", "t", b"{}", {})
    assert memo_key("chat", "t", b"{}", {"x-request-id": "r", "user-agent": "u"}) == base
    for header in SHAPING_HEADERS:  # the RAG headers (corpus, filter, context id) included
        assert memo_key("chat", "t", b"{}", {header: "1"}) != base, header
    assert {"x-deja-corpus", "x-deja-corpus-filter", "x-deja-context-id"} <= set(SHAPING_HEADERS)
    assert memo_key("chat", "u", b"{}", {}) != base
    assert memo_key("completion", "t", b"{}", {}) != base
    assert memo_key("chat", "t", b"{ }", {}) != base


def test_for_request_copies_every_field() -> None:
    policy = CachePolicy(read=False, write=False, max_age=3.0, ttl=5, min_similarity=0.9)
    req = GatewayRequest(
        "completion", {"a": 1}, b"raw", "m", True, True, False, "t", policy, "p", "ns", False, 0.5
    )
    req = dataclasses.replace(
        req,
        corpus="docs",
        context_id="kb-1",
        share_prefix_cache=True,
        promote=False,
        rag_on_failure="answer",
        corpus_filter=(("lang", "en"),),
    )
    defaults = GatewayRequest("chat", {}, b"", "x", False, False, True, "u", CachePolicy())
    for field in dataclasses.fields(GatewayRequest):  # every field differs from its default
        if field.name not in ("request_id", "deadline"):
            assert getattr(req, field.name) != getattr(defaults, field.name), field.name
    copied = req.for_request("r2", 12.5)
    assert copied == dataclasses.replace(req, request_id="r2", deadline=12.5)


@pytest.fixture
async def gw(sims: SimCluster, tmp_path: Path, make_gateway: Any) -> Any:
    tenants: dict[str, Any] = {name: {"key_hashes": [key_hash(k)]} for name, k in KEYS.items()}
    tenants["slow"]["rate_limit_rpm"] = 2
    keys = tmp_path / "keys.yaml"
    keys.write_text(yaml.safe_dump({"tenants": tenants}))
    async with make_gateway(replicas=sims.urls, keys_file=keys, admin_key="admin") as gateway:
        yield gateway


async def post(url: str, app: Any, raw: bytes, tenant: str, **headers: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=url) as http:
        sent = {"authorization": f"Bearer {KEYS[tenant]}", "content-type": "application/json"}
        resp = await http.post("/v1/chat/completions", content=raw, headers={**sent, **headers})
    await app.state.gateway.pipeline.drain()
    return resp


def body() -> bytes:
    question = f"memo {uuid.uuid4().hex}"
    return (
        f'{{"model":"{SIM_MODEL}","messages":[{{"role":"user","content":"{question}"}}]}}'.encode()
    )


async def test_an_invalidated_entry_is_a_miss_for_a_memoised_request(gw: Any) -> None:
    url, app = gw
    raw = body()
    first = await post(url, app, raw, "alpha")
    assert first.headers["x-deja-cache"] == "miss"
    for _ in range(3):
        assert (await post(url, app, raw, "alpha")).headers["x-deja-cache"] == "exact"
    assert len(app.state.gateway.pipeline.memo) == 1  # the repeats came from the memo
    entry = first.headers["x-deja-entry"]
    async with httpx.AsyncClient(base_url=url, headers=ADMIN) as http:
        assert (await http.delete(f"/admin/cache/entries/{entry}")).status_code == 200
    again = await post(url, app, raw, "alpha")
    assert again.headers["x-deja-cache"] == "miss" and again.headers["x-deja-entry"] == entry


async def test_the_same_bytes_from_another_tenant_or_with_other_headers_do_not_share(
    gw: Any,
) -> None:
    url, app = gw
    raw = body()
    await post(url, app, raw, "alpha")
    assert (await post(url, app, raw, "alpha")).headers["x-deja-cache"] == "exact"
    assert (await post(url, app, raw, "beta")).headers["x-deja-cache"] == "miss"
    assert (await post(url, app, raw, "alpha", **{"x-deja-namespace": "n"})).headers[
        "x-deja-cache"
    ] == "miss"
    assert (await post(url, app, raw, "alpha", **{"cache-control": "no-cache"})).headers[
        "x-deja-cache"
    ] == "miss"
    bad = await post(url, app, raw, "alpha", **{"x-deja-ttl": "soon"})
    assert bad.status_code == 400  # validated again, not served from the memo
    assert (await post(url, app, raw, "alpha")).headers["x-deja-cache"] == "exact"


async def test_keys_and_rate_limits_are_checked_on_every_memoised_request(gw: Any) -> None:
    url, app = gw
    raw = body()
    assert (await post(url, app, raw, "slow")).status_code == 200
    assert (await post(url, app, raw, "slow")).headers["x-deja-cache"] == "exact"
    assert (await post(url, app, raw, "slow")).status_code == 429
    async with httpx.AsyncClient(base_url=url) as http:
        wrong = await http.post(
            "/v1/chat/completions",
            content=raw,
            headers={"authorization": "Bearer nope", "content-type": "application/json"},
        )
    assert wrong.status_code == 401
