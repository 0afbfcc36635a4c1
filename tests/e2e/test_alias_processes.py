"""Every way an entry can go takes its aliases with it, across two `deja serve` processes that
share a real Redis (issue 24): delete, filter invalidation, TTL, provenance, feedback.

Process A promotes (sync judge; the simulator knows the two questions as one cluster, so its
judge says "same" and the confirming re-ask agrees: SIMULATED, mechanics only), process B serves
the alias from Redis, then the entry goes through one process and
neither serves the alias any more. Each process keeps its own Qdrant Edge (no Qdrant server
can be installed here), so the vector layer is checked in the process that removed the entry;
the promise that matters, "never served", is the exact layer's, which Redis shares."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from deja.redisclient import connect_redis
from deja.semantic.crossencoder import SHIPPED_DIR
from deja.semantic.cutoffs import CALIBRATION_FILE
from deja.tenancy.thresholds import REDIS_KEY as THRESHOLDS_KEY
from sim.runner import SimCluster
from tests.e2e.test_workers import env_for
from tests.support import SIM_MODEL, free_port, labelled_sim

pytestmark = pytest.mark.e2e

ADMIN = {"authorization": "Bearer adm"}
CLIENT = {"authorization": "Bearer any-key"}
ASKED = "How do I reset my password?"
PARAPHRASE = "How do I reset my password please?"
DOC = "# Account\n\nTo reset your password, open Settings and press Reset.\n"


@dataclass
class Case:
    """One entry and its alias, made through A; ``namespace`` keeps the cases apart."""

    namespace: str
    entry: str = ""
    alias: str = ""
    corpus: str | None = None

    def headers(self, **extra: str) -> dict[str, str]:
        found = {**CLIENT, "x-deja-namespace": self.namespace, **extra}
        if self.corpus is not None:
            found["x-deja-corpus"] = self.corpus
        return found


async def ask(base: str, case: Case, question: str, **extra: str) -> httpx.Response:
    body = {"model": SIM_MODEL, "messages": [{"role": "user", "content": question}]}
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        reply = await http.post("/v1/chat/completions", json=body, headers=case.headers(**extra))
    assert reply.status_code == 200, reply.text
    return reply


async def admin(
    base: str, method: str, path: str, headers: dict[str, str] | None = None, **kw: Any
) -> httpx.Response:
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        return await http.request(method, path, headers={**ADMIN, **(headers or {})}, **kw)


async def start(env: dict[str, str]) -> tuple[asyncio.subprocess.Process, str]:
    port = free_port()
    cmd = [sys.executable, "-m", "app", "serve", "--port", str(port)]
    proc = await asyncio.create_subprocess_exec(
        *cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    base = f"http://127.0.0.1:{port}"
    for _ in range(1200):
        try:
            async with httpx.AsyncClient(base_url=base, timeout=2) as http:
                if (await http.get("/readyz")).status_code == 200:
                    return proc, base
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.05)
    proc.kill()
    raise AssertionError("a gateway process never became ready")


@pytest.fixture(scope="module")
async def labelled(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[SimCluster]:
    """A simulator that knows ASKED and PARAPHRASE as one cluster: one answer for both (what
    the re-ask that confirms a sync promotion compares), and a "same" from its judge."""
    async with labelled_sim(tmp_path_factory.mktemp("labels"), ASKED, PARAPHRASE) as cluster:
        yield cluster


@pytest.fixture(scope="module")
async def pair(
    labelled: SimCluster, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[str, str]]:
    """Gateways A and B: separate processes and data dirs, one Redis."""
    sims = labelled
    redis = connect_redis(redis_url, timeout=2.0)
    try:  # θ and targets other tests left in the shared Redis would move the grey zone
        await redis.delete(THRESHOLDS_KEY)
    finally:
        await redis.aclose()
    root = tmp_path_factory.mktemp("aliases")
    table = json.loads((SHIPPED_DIR / CALIBRATION_FILE).read_text())
    for row in table["table"]:  # no candidate clears the target's cut-off: all go to the judge
        if row["precision"] >= 0.9:
            row["tau"] = 1.0
    (root / "calibration.json").write_text(json.dumps(table))
    procs = []
    try:
        for name in ("a", "b"):
            env = env_for(
                root / name,
                DEJA_REPLICAS=",".join(sims.urls),
                DEJA_REDIS_URL=redis_url,
                DEJA_SEMANTIC_ENABLED="true",
                DEJA_CORPORA_ENABLED="true",
                DEJA_SEMANTIC_JUDGE="sync",
                DEJA_SEMANTIC_JUDGE_FLOOR="0.5",
                DEJA_SEMANTIC_SHADOW_RATE="0",
                DEJA_SEMANTIC_CALIBRATION_FILE=str(root / "calibration.json"),
                DEJA_TEMPORAL_BYPASS="false",
            )
            procs.append(await start(env))
        yield procs[0][1], procs[1][1]
    finally:
        for proc, _ in procs:
            proc.terminate()
            await proc.wait()


async def promoted(a: str, b: str, case: Case, **extra: str) -> None:
    """A stores the entry and promotes the paraphrase; B serves the alias from Redis."""
    case.entry = (await ask(a, case, ASKED, **extra)).headers["x-deja-entry"]
    judged = await ask(a, case, PARAPHRASE, **extra)
    assert judged.headers["x-deja-cache"] == "semantic"
    for _ in range(200):  # the promotion runs in A's background
        entry = (await admin(a, "GET", f"/admin/cache/entries/{case.entry}")).json()
        if entry.get("aliases"):
            case.alias = entry["aliases"][0]["id"]
            break
        await asyncio.sleep(0.02)
    assert case.alias, "the paraphrase was never promoted"
    served = await ask(b, case, PARAPHRASE, **extra)
    assert served.headers["x-deja-cache"] == "exact"
    assert served.headers["x-deja-entry"] == case.alias


async def gone_everywhere(a: str, b: str, case: Case, remover: str) -> None:
    """Neither process serves the alias (asked with ``no-store``, so that one process's fresh
    answer is not what the other then finds); the remover's vectors hold neither question."""
    for base in (b, a):
        again = await ask(base, case, PARAPHRASE, **{"cache-control": "no-store"})
        assert again.headers["x-deja-cache"] == "miss", base
        assert again.headers["x-deja-entry"] == case.alias  # its own key, a fresh answer
    for base in (a, b):  # the alias record itself went from Redis, not only its entry
        assert (await admin(base, "GET", f"/admin/cache/entries/{case.alias}")).status_code == 404
    listed = await admin(remover, "GET", "/admin/cache/entries", params={"q": PARAPHRASE})
    ids = [e["id"] for e in listed.json()["entries"]]
    assert case.entry not in ids


Remove = Callable[[str, str, Case], Coroutine[Any, Any, str]]


async def by_delete(a: str, b: str, case: Case) -> str:
    assert (await admin(b, "DELETE", f"/admin/cache/entries/{case.entry}")).status_code == 200
    return b


async def by_filter(a: str, b: str, case: Case) -> str:
    spec = {"namespace": case.namespace}
    reply = await admin(b, "POST", "/admin/cache/invalidate", json=spec)
    assert reply.status_code == 200 and reply.json()["count"] == 1, reply.text
    return b


async def by_feedback(a: str, b: str, case: Case) -> str:
    async with httpx.AsyncClient(base_url=b, timeout=30) as http:
        reply = await http.post(
            "/v1/feedback", json={"entry_id": case.entry, "verdict": "wrong"}, headers=CLIENT
        )
    assert reply.status_code == 200 and reply.json()["removed"] is True, reply.text
    return b


@pytest.mark.parametrize("remove", [by_delete, by_filter, by_feedback], ids=lambda f: f.__name__)
async def test_an_alias_goes_with_its_entry(pair: tuple[str, str], remove: Remove) -> None:
    a, b = pair
    case = Case(f"ns-{uuid.uuid4().hex[:8]}")
    await promoted(a, b, case)
    remover = await remove(a, b, case)
    await gone_everywhere(a, b, case, remover)


async def test_an_alias_expires_with_its_entry(pair: tuple[str, str]) -> None:
    a, b = pair
    case = Case(f"ns-{uuid.uuid4().hex[:8]}")
    started = time.time()
    await promoted(a, b, case, **{"x-deja-ttl": "3"})
    await asyncio.sleep(max(0.0, started + 3.2 - time.time()))
    for base in (b, a):
        again = await ask(base, case, PARAPHRASE, **{"cache-control": "no-store"})
        assert again.headers["x-deja-cache"] == "miss", base
        assert (await admin(base, "GET", f"/admin/cache/entries/{case.alias}")).status_code == 404


async def test_provenance_takes_the_alias_with_the_answer(pair: tuple[str, str]) -> None:
    a, b = pair
    case = Case(f"ns-{uuid.uuid4().hex[:8]}", corpus=f"c{uuid.uuid4().hex[:8]}")
    for base in (a, b):  # each process indexes the corpus in its own Edge
        put = await admin(
            base,
            "PUT",
            f"/admin/corpora/{case.corpus}/documents/account.md",
            params={"tenant": "default"},
            content=DOC.encode(),
            headers={"content-type": "text/markdown"},
        )
        assert put.status_code == 200, put.text
    await promoted(a, b, case)
    changed = await admin(
        b,
        "PUT",
        f"/admin/corpora/{case.corpus}/documents/account.md",
        params={"tenant": "default"},
        content=(DOC + "\nPasswords now reset from the mobile app.\n").encode(),
        headers={"content-type": "text/markdown"},
    )
    assert changed.status_code == 200, changed.text
    await gone_everywhere(a, b, case, b)
