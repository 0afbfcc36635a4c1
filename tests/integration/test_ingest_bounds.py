"""Ingest per document is bounded (issue 19, finding 7): in pages, chunks and CPU seconds (the
PDF parse runs in its own worker process, killed past its budget), and it stops when its
client leaves. On base-stop17 a 33 KB PDF (200 pages sharing one content stream) cost 205 s of
CPU in the gateway's own process, ran on after the client gave up, and was added anyway."""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from typing import Any

import httpx
import pytest

from tests.pdfs import make_pdf, shared_stream_pdf

pytestmark = pytest.mark.integration

ADMIN = {"authorization": "Bearer adm"}
DOCS = "/admin/corpora/kb/documents"


def limits(**extra: Any) -> dict[str, Any]:
    return {"corpora_enabled": True, "admin_key": "adm", **extra}


async def test_pages_chunks_and_cpu_are_bounded(make_gateway: Any) -> None:
    async with (
        make_gateway(
            **limits(corpus_max_pages=5, corpus_max_chunks=3, corpus_parse_cpu_seconds=1)
        ) as (url, _),
        httpx.AsyncClient(base_url=url, headers=ADMIN, timeout=60) as http,
    ):
        pages = await http.put(f"{DOCS}/long.pdf", content=make_pdf([["a page."]] * 6))
        assert pages.status_code == 400
        assert "6 pages, above the limit of 5" in pages.json()["error"]["message"]
        many = "\n\n".join(f"# Part {i}\n\n" + "word " * 150 for i in range(10))
        chunks = await http.put(f"{DOCS}/many.md", content=many.encode())
        assert chunks.status_code == 400
        assert "above the limit of 3" in chunks.json()["error"]["message"]
        started = time.monotonic()
        hostile = await http.put(f"{DOCS}/hostile.pdf", content=shared_stream_pdf(5, 20000))
        assert hostile.status_code == 400, hostile.text
        assert "more than 1 s of CPU" in hostile.json()["error"]["message"]
        assert time.monotonic() - started < 30
        assert (await http.get("/healthz")).status_code == 200
        fine = await http.put(f"{DOCS}/ok.pdf", content=make_pdf([["Fine text."]] * 2))
        assert fine.status_code == 200, fine.text
        listed = (await http.get(DOCS)).json()["documents"]
        assert [d["document"] for d in listed] == ["ok.pdf"]


async def test_an_ingest_stops_when_its_client_leaves(make_gateway: Any) -> None:
    async with (
        make_gateway(**limits(corpus_parse_cpu_seconds=120)) as (url, _),
        httpx.AsyncClient(base_url=url, headers=ADMIN) as http,
    ):
        with pytest.raises(httpx.ReadTimeout):
            await http.put(f"{DOCS}/hostile.pdf", content=shared_stream_pdf(200, 800), timeout=2.0)
        for _ in range(100):  # the parse worker is killed once the disconnect is seen
            if not multiprocessing.active_children():
                break
            await asyncio.sleep(0.1)
        assert not multiprocessing.active_children()
        await asyncio.sleep(0.5)
        response = await http.get(DOCS, timeout=10)
        assert response.status_code in (200, 404)  # no corpus, or one without the document
        if response.status_code == 200:
            assert response.json()["documents"] == []
