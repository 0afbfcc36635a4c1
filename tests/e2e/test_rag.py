"""RAG through the gateway with the official ``openai`` SDK: the cache sits ahead of the
retriever, answers carry their sources, a changed document invalidates exactly its answers,
corpora are per tenant, and ``X-Deja-Context-Id`` scopes apps that retrieve on their own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from deja.tenancy.keyring import key_hash
from sim.runner import SimCluster
from tests.support import SIM_MODEL, fresh_tag

pytestmark = pytest.mark.e2e

KEYS = {"acme": "dj-acme-rag", "globex": "dj-globex-rag", "lenient": "dj-lenient-rag"}
ADMIN = {"authorization": "Bearer rag-admin"}
DOCS = {
    "guide/install.md": "# Installing\n\nRun `make run` to install the gateway and start it "
    "with simulated replicas. Python 3.11 is required.\n",
    "guide/invalidate.md": "# Invalidation\n\nTo invalidate a tenant's entries, call POST "
    "/admin/cache/invalidate with the tenant, or run `deja cache invalidate --tenant T`.\n",
    "guide/account.md": "# Your account\n\nTo reset your password, open Settings, choose "
    "Security and press Reset; a link arrives by e-mail within a minute.\n",
    "guide/billing.md": "# Billing\n\nInvoices are sent monthly by e-mail to the account "
    "owner; refunds take five working days.\n",
}


class Env:
    def __init__(self, url: str, app: Any) -> None:
        self.url = url
        self.app = app
        self.http = httpx.AsyncClient(base_url=url, timeout=30)

    def client(self, tenant: str) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.url + "/v1", api_key=KEYS[tenant], max_retries=0)

    async def ingest(self, tenant: str, corpus: str, document: str, text: str) -> dict[str, Any]:
        reply = await self.http.put(
            f"/admin/corpora/{corpus}/documents/{document}",
            params={"tenant": tenant},
            content=text.encode(),
            headers={**ADMIN, "content-type": "text/markdown"},
        )
        assert reply.status_code == 200, reply.text
        result: dict[str, Any] = reply.json()
        return result

    async def ask(self, tenant: str, question: str, **headers: str) -> Any:
        raw = await self.client(tenant).chat.completions.with_raw_response.create(
            model=SIM_MODEL,
            messages=[{"role": "user", "content": question}],
            extra_headers=headers,
        )
        await self.app.state.gateway.pipeline.drain()
        return raw

    async def retrievals(self) -> float:
        text = (await self.http.get("/metrics")).text
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith('deja_retrievals_total{outcome="ok"}')
        )


def write_keys(path: Path) -> Path:
    tenants: dict[str, Any] = {name: {"key_hashes": [key_hash(k)]} for name, k in KEYS.items()}
    tenants["lenient"]["rag_on_failure"] = "answer"
    path.write_text(yaml.safe_dump({"tenants": tenants}))
    return path


@pytest.fixture(scope="module")
async def env(
    sims: SimCluster, tmp_path_factory: pytest.TempPathFactory, make_gateway: Any
) -> AsyncIterator[Env]:
    keys = write_keys(tmp_path_factory.mktemp("rag-keys") / "keys.yaml")
    async with make_gateway(
        replicas=sims.urls,
        keys_file=keys,
        admin_key="rag-admin",
        semantic_enabled=True,
        semantic_shadow_rate=0.0,
        rag_top_k=1,
        corpora_enabled=True,
    ) as (url, app):
        env = Env(url, app)
        for document, text in DOCS.items():
            await env.ingest("acme", "handbook", document, text)
        yield env
        await env.http.aclose()


async def test_a_rag_miss_then_a_paraphrase_hit_that_skipped_retrieval(env: Env) -> None:
    corpus = {"X-Deja-Corpus": "handbook"}
    before = await env.retrievals()
    first = await env.ask("acme", "How do I reset my password?", **corpus)
    assert first.headers["x-deja-cache"] == "miss"
    assert first.headers["x-deja-sources"] == "guide/account.md@1"
    sources = first.parse().model_extra["deja_sources"]
    assert sources == [{"corpus": "handbook", "document": "guide/account.md", "version": 1}]
    assert await env.retrievals() == before + 1

    second = await env.ask("acme", "How can I reset my password?", **corpus)
    assert second.headers["x-deja-cache"] == "semantic"
    assert second.headers["x-deja-sources"] == "guide/account.md@1"  # on hits too
    assert second.parse().model_extra["deja_sources"] == sources
    assert await env.retrievals() == before + 1  # the hit skipped retrieval

    # The same question without the corpus is another scope: no RAG answer leaks into it.
    plain = await env.ask("acme", "How can I reset my password?")
    assert plain.headers["x-deja-cache"] == "miss" and "x-deja-sources" not in plain.headers


async def test_questions_retrieving_the_same_chunks_share_a_prefix_key(env: Env) -> None:
    corpus = {"X-Deja-Corpus": "handbook", "Cache-Control": "no-cache"}
    one = await env.ask("acme", "How is the gateway installed?", **corpus)
    two = await env.ask("acme", "Which Python version does installing need?", **corpus)
    other = await env.ask("acme", "When are invoices sent?", **corpus)
    # (the version depends on whether the test that changes install.md ran first)
    assert one.headers["x-deja-sources"] == two.headers["x-deja-sources"]
    assert one.headers["x-deja-sources"].startswith("guide/install.md@")
    assert one.headers["x-prefix-hash"] == two.headers["x-prefix-hash"]
    assert other.headers["x-prefix-hash"] != one.headers["x-prefix-hash"]


async def test_a_changed_document_invalidates_exactly_its_answers(env: Env) -> None:
    corpus = {"X-Deja-Corpus": "handbook"}
    billing = f"When are invoices sent? {fresh_tag()}"
    install = f"What does installing the gateway need? {fresh_tag()}"
    assert (await env.ask("acme", billing, **corpus)).headers["x-deja-cache"] == "miss"
    first = await env.ask("acme", install, **corpus)
    assert first.headers["x-deja-sources"] == "guide/install.md@1"
    assert (await env.ask("acme", install, **corpus)).headers["x-deja-cache"] == "exact"

    changed = DOCS["guide/install.md"].replace("3.11", "3.12")
    report = await env.ingest("acme", "handbook", "guide/install.md", changed)
    assert report["version"] == 2 and report["invalidated"] >= 1

    again = await env.ask("acme", install, **corpus)
    assert again.headers["x-deja-cache"] == "miss"
    assert again.headers["x-deja-sources"] == "guide/install.md@2"
    assert (await env.ask("acme", billing, **corpus)).headers["x-deja-cache"] == "exact"

    unchanged = await env.ingest("acme", "handbook", "guide/install.md", changed)
    assert unchanged["status"] == "unchanged" and unchanged["version"] == 2
    assert (await env.ask("acme", install, **corpus)).headers["x-deja-cache"] == "exact"


async def test_a_tenant_never_sees_another_tenants_corpus(env: Env) -> None:
    for corpus in ("handbook", "no-such-corpus"):
        with pytest.raises(openai.NotFoundError) as info:
            await env.ask(
                "globex", "How do I invalidate a tenant's entries?", **{"X-Deja-Corpus": corpus}
            )
        assert info.value.code == "corpus_not_found"
        assert corpus in info.value.message  # the same words whether it exists or not
    listing = await env.http.get("/admin/corpora", params={"tenant": "globex"}, headers=ADMIN)
    assert "handbook" not in listing.text


async def test_context_id_hits_across_retrieved_chunk_orders(env: Env) -> None:
    question = f"What does the context say about refunds? {fresh_tag()}"

    async def ask(context: str, context_id: str | None) -> Any:
        headers = {"X-Deja-Context-Id": context_id} if context_id else {}
        raw = await env.client("acme").chat.completions.with_raw_response.create(
            model=SIM_MODEL,
            messages=[
                {"role": "system", "content": f"Answer from the context.\n{context}"},
                {"role": "user", "content": question},
            ],
            extra_headers=headers,
        )
        await env.app.state.gateway.pipeline.drain()
        return raw

    ab = "[a] Refunds take five days.\n[b] Invoices are monthly."
    ba = "[b] Invoices are monthly.\n[a] Refunds take five days."
    assert (await ask(ab, None)).headers["x-deja-cache"] == "miss"
    assert (await ask(ba, None)).headers["x-deja-cache"] == "miss"  # another context hash
    cd = "[c] Refunds take five days.\n[d] Invoices are monthly."
    dc = "[d] Invoices are monthly.\n[c] Refunds take five days."
    assert (await ask(cd, "kb-v7")).headers["x-deja-cache"] == "miss"
    hit = await ask(dc, "kb-v7")  # the app says both orders are one context
    assert hit.headers["x-deja-cache"] == "semantic"
    assert (await ask(dc, "kb-v8")).headers["x-deja-cache"] == "miss"


async def test_failed_retrieval_is_refused_or_answered_as_the_tenant_says(
    sims: SimCluster, tmp_path: Path, make_gateway: Any
) -> None:
    keys = write_keys(tmp_path / "keys.yaml")
    async with make_gateway(
        replicas=sims.urls,
        keys_file=keys,
        admin_key="rag-admin",
        rag_retrieval_timeout_seconds=1e-6,  # every retrieval times out
        corpora_enabled=True,
    ) as (url, app):
        env = Env(url, app)
        for tenant in ("acme", "lenient"):
            await env.ingest(tenant, "handbook", "guide/billing.md", DOCS["guide/billing.md"])
        with pytest.raises(openai.InternalServerError) as info:
            await env.ask("acme", "When are invoices sent?", **{"X-Deja-Corpus": "handbook"})
        assert info.value.status_code == 503 and info.value.code == "retrieval_unavailable"
        for _ in range(2):  # answered without context, marked, and never cached
            reply = await env.ask(
                "lenient", "When are invoices sent?", **{"X-Deja-Corpus": "handbook"}
            )
            assert reply.headers["x-deja-retrieval"] == "failed"
            assert reply.headers["x-deja-cache"] == "miss"
        await env.http.aclose()


async def test_near_invalidation_previews_then_drops_answers_a_new_document_contradicts(
    sims: SimCluster, tmp_path: Path, make_gateway: Any
) -> None:
    keys = write_keys(tmp_path / "keys.yaml")
    async with make_gateway(
        replicas=sims.urls,
        keys_file=keys,
        admin_key="rag-admin",
        semantic_enabled=True,
        semantic_shadow_rate=0.0,
        corpora_enabled=True,
        rag_top_k=1,
        rag_invalidate_near=0.5,
    ) as (url, app):
        env = Env(url, app)
        for document in ("guide/billing.md", "guide/install.md"):
            await env.ingest("acme", "handbook", document, DOCS[document])
        corpus = {"X-Deja-Corpus": "handbook"}
        invoices, python = "When are invoices sent?", "Which Python version is required?"
        for question in (invoices, python):
            assert (await env.ask("acme", question, **corpus)).headers["x-deja-cache"] == "miss"
        news = "# Invoices from 2027\n\nFrom 2027 invoices are sent every week, on Mondays.\n"
        preview = await env.http.put(
            "/admin/corpora/handbook/documents/guide/invoices-2027.md",
            params={"tenant": "acme", "dry_run": "true"},
            content=news.encode(),
            headers={**ADMIN, "content-type": "text/markdown"},
        )
        assert preview.json()["dry_run"] is True and preview.json()["invalidated"] == 1
        assert (await env.ask("acme", invoices, **corpus)).headers["x-deja-cache"] == "exact"
        listing = await env.http.get(
            "/admin/corpora/handbook/documents", params={"tenant": "acme"}, headers=ADMIN
        )
        assert "invoices-2027" not in listing.text  # the dry run wrote nothing

        added = await env.ingest("acme", "handbook", "guide/invoices-2027.md", news)
        assert added["status"] == "added" and added["invalidated"] == 1
        assert (await env.ask("acme", invoices, **corpus)).headers["x-deja-cache"] == "miss"
        assert (await env.ask("acme", python, **corpus)).headers["x-deja-cache"] == "exact"
        await env.http.aclose()


async def test_a_metadata_filter_narrows_retrieval_and_the_scope(env: Env) -> None:
    spanish = "# Facturas\n\nLas facturas se envían cada mes por correo al titular.\n"
    reply = await env.http.put(
        "/admin/corpora/handbook/documents/es/facturas.md",
        params={"tenant": "acme", "meta": "lang=es"},
        content=spanish.encode(),
        headers={**ADMIN, "content-type": "text/markdown"},
    )
    assert reply.status_code == 200
    tag = fresh_tag()
    filter_es = {"X-Deja-Corpus": "handbook", "X-Deja-Corpus-Filter": "lang=es"}
    filtered = await env.ask("acme", f"¿Cuándo se envían las facturas? {tag}", **filter_es)
    assert filtered.headers["x-deja-sources"] == "es/facturas.md@1"
    # English: with the filter only the Spanish page is searched, and it is under the
    # relevance floor for an English question (MiniLM is English-only): no context, marked.
    question = f"When are invoices sent? {tag}"
    narrowed = await env.ask("acme", question, **filter_es)
    assert narrowed.headers["x-deja-retrieval"] == "empty"
    unfiltered = await env.ask("acme", question, **{"X-Deja-Corpus": "handbook"})
    assert unfiltered.headers["x-deja-cache"] == "miss"  # another scope: not the filtered answer
    assert unfiltered.headers["x-deja-sources"] == "guide/billing.md@1"
