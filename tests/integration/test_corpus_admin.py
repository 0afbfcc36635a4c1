"""The corpus admin API and ``deja corpus`` against a real gateway (uvicorn on a socket, the
ONNX embedder, Qdrant Edge under its data dir), and the start-up preload."""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from click.testing import CliRunner, Result

from app.cli.main import main
from app.cli.support import Api
from deja.tenancy.keyring import key_hash
from tests.pdfs import encrypt_pdf, make_pdf

pytestmark = pytest.mark.integration

ADMIN_KEY = "adm-corpus"
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}
GUIDE = b"# Guide\n\n## Install\n\nRun make run, then open the console.\n"
DOCS = "/admin/corpora/kb/documents"


class Gw:
    def __init__(self, url: str, app: Any) -> None:
        self.url = url
        self.app = app
        self.http = httpx.AsyncClient(base_url=url, headers=ADMIN, timeout=60)


@pytest.fixture(scope="module")
async def gw(make_gateway: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Gw]:
    keys = tmp_path_factory.mktemp("keys") / "keys.yaml"
    tenants = {name: {"key_hashes": [key_hash(f"dj-{name}")]} for name in ("alpha", "beta")}
    keys.write_text(yaml.safe_dump({"tenants": tenants}))
    async with make_gateway(
        corpora_enabled=True, admin_key=ADMIN_KEY, keys_file=keys, corpus_max_file_bytes=8192
    ) as (url, app):
        env = Gw(url, app)
        yield env
        await env.http.aclose()


def error_of(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    error: dict[str, Any] = body["error"]
    return error


async def put(gw: Gw, path: str, data: bytes, tenant: str = "alpha", **headers: str) -> Any:
    return await gw.http.put(
        f"{DOCS}/{path}", params={"tenant": tenant}, content=data, headers=headers
    )


async def test_put_list_update_delete(gw: Gw) -> None:
    added = await put(gw, "docs/guide.md", GUIDE, **{"content-type": "text/markdown"})
    assert added.status_code == 200, added.text
    body = added.json()
    assert (body["status"], body["version"], body["document"]) == ("added", 1, "docs/guide.md")
    assert body["chunks"] >= 1 and body["tenant"] == "alpha"
    assert (await put(gw, "docs/guide.md", GUIDE)).json()["status"] == "unchanged"
    updated = (await put(gw, "docs/guide.md", GUIDE + b"\nAlso: deja corpus ls.\n")).json()
    assert (updated["status"], updated["old_version"], updated["version"]) == ("updated", 1, 2)
    assert updated["invalidated"] == 0

    listing = (await gw.http.get("/admin/corpora", params={"tenant": "alpha"})).json()
    kb = [c for c in listing["corpora"] if c["name"] == "kb"]  # other tests add their own
    assert kb == [{"name": "kb", "documents": 1, "chunks": updated["chunks"]}]
    docs = (await gw.http.get(DOCS, params={"tenant": "alpha"})).json()["documents"]
    assert [(d["document"], d["version"], d["title"], d["format"]) for d in docs] == [
        ("docs/guide.md", 2, "Guide", "markdown")
    ]
    assert gw.app.state.gateway.corpora.has_corpus("alpha", "kb")

    # Another tenant's corpus is a 404, exactly as one that does not exist.
    for tenant, corpus in (("beta", "kb"), ("alpha", "nope")):
        missing = await gw.http.get(f"/admin/corpora/{corpus}/documents", params={"tenant": tenant})
        assert missing.status_code == 404
        assert error_of(missing)["code"] == "corpus_not_found"
    assert (
        await gw.http.delete(f"{DOCS}/docs/guide.md", params={"tenant": "beta"})
    ).status_code == 404

    metrics = (await gw.http.get("/metrics")).text
    assert 'deja_corpus_chunks_ingested_total{corpus="kb"}' in metrics
    assert 'deja_corpus_documents_total{action="updated",corpus="kb"} 1.0' in metrics

    removed = await gw.http.delete(f"{DOCS}/docs/guide.md", params={"tenant": "alpha"})
    assert removed.status_code == 200
    assert (removed.json()["version"], removed.json()["invalidated"]) == (2, 0)
    again = await gw.http.delete(f"{DOCS}/docs/guide.md", params={"tenant": "alpha"})
    assert again.status_code == 404 and error_of(again)["code"] == "corpus_not_found"


async def test_bad_uploads_are_refused_with_their_reason(gw: Gw) -> None:
    locked = encrypt_pdf(make_pdf([["secret"]]), "pw")
    refused = await put(gw, "locked.pdf", locked)
    assert refused.status_code == 400
    assert "locked.pdf: the PDF is encrypted" in error_of(refused)["message"]
    assert (await put(gw, "a.docx", b"PK\x03\x04")).status_code == 400
    too_big = await put(gw, "big.md", b"# Big\n\n" + b"word " * 4000)
    assert too_big.status_code == 413
    unknown = await put(gw, "a.md", GUIDE, tenant="nobody")
    assert unknown.status_code == 400 and error_of(unknown)["param"] == "tenant"
    meta = await gw.http.put(
        f"{DOCS}/a.md", params={"tenant": "alpha", "meta": "no-equals"}, content=GUIDE
    )
    assert meta.status_code == 400 and error_of(meta)["param"] == "meta"
    async with httpx.AsyncClient(base_url=gw.url) as anonymous:
        assert (await anonymous.get("/admin/corpora")).status_code == 401


def invoke(gw: Gw, *args: str) -> Result:
    runner = CliRunner()
    return runner.invoke(main, ["corpus", *args, "--url", gw.url, "--key", ADMIN_KEY])


async def cli(gw: Gw, *args: str) -> Result:
    # The gateway serves on this event loop: the (synchronous) CLI runs in a thread.
    return await asyncio.to_thread(invoke, gw, *args)


async def test_cli_ingest_ls_rm(gw: Gw, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "a.md").write_bytes(GUIDE)
    (docs / "sub" / "b.html").write_text("<html><body><h1>B</h1><p>Bee text.</p></body></html>")
    (docs / "c.pdf").write_bytes(make_pdf([["Sea text."]], title="C"))
    (docs / "locked.pdf").write_bytes(encrypt_pdf(make_pdf([["x"]]), "pw"))
    (tmp_path / "notes.txt").write_text("Plain notes.")
    (docs / "ignored.py").write_text("print()")
    args = ("--corpus", "kb2", "--tenant", "alpha", "--root", str(tmp_path))

    first = await cli(gw, "ingest", str(docs), str(tmp_path / "notes.txt"), *args)
    assert first.exit_code == 1, first.output
    assert "added      docs/a.md (v1," in first.output
    assert "failed     docs/locked.pdf: the PDF is encrypted" in first.output
    assert "kb2: 5 files (4 added, 0 updated, 0 unchanged, 1 failed)" in first.output
    (docs / "locked.pdf").unlink()

    second = await cli(gw, "ingest", str(docs), str(tmp_path / "notes.txt"), *args)
    assert second.exit_code == 0, second.output
    assert "(0 added, 0 updated, 4 unchanged, 0 failed)" in second.output

    listed = await cli(gw, "ls", "--tenant", "alpha")
    assert listed.exit_code == 0 and "kb2" in listed.output
    removed = await cli(gw, "rm", "docs/a.md", "--corpus", "kb2", "--tenant", "alpha")
    assert removed.exit_code == 0, removed.output
    assert "removed docs/a.md (v1" in removed.output
    table = await cli(gw, "ls", "--corpus", "kb2", "--tenant", "alpha")
    assert table.exit_code == 0
    assert "docs/sub/b.html" in table.output and "docs/a.md" not in table.output
    missing = await cli(gw, "rm", "docs/a.md", "--corpus", "kb2", "--tenant", "alpha")
    assert missing.exit_code == 1 and "no document 'docs/a.md'" in missing.output
    other = await cli(gw, "ls", "--corpus", "kb2", "--tenant", "beta")
    assert other.exit_code == 1 and "no corpus named 'kb2'" in other.output


async def test_preload_at_start_up_is_idempotent(make_gateway: Any, tmp_path: Path) -> None:
    tree = tmp_path / "tree" / "docs"
    tree.mkdir(parents=True)
    (tree / "guide.md").write_bytes(GUIDE)
    (tree / "bad.pdf").write_bytes(b"not a pdf")
    settings = {
        "corpora_enabled": True,
        "admin_key": ADMIN_KEY,
        "data_dir": tmp_path / "data",
        "corpus_preload": {"deja-docs": [str(tree)]},
    }
    seen = []
    for _ in range(2):
        async with (
            make_gateway(**settings) as (url, _app),
            httpx.AsyncClient(base_url=url, headers=ADMIN) as http,
        ):
            response = await http.get("/admin/corpora/deja-docs/documents")
            assert response.status_code == 200, response.text
            seen.append(
                [
                    (d["document"], d["version"], d["ingested_at"])
                    for d in response.json()["documents"]
                ]
            )
    assert [doc for doc, _, _ in seen[0]] == ["docs/guide.md"]
    assert seen[1] == seen[0]  # the restart found the file unchanged: not re-ingested


async def test_cli_ingest_refuses_links_out_of_the_tree_and_undecodable_names(
    gw: Gw, tmp_path: Path
) -> None:
    """Issue 19 (2, 10): a ``passwd.md`` link to a file outside the tree is refused by name,
    never read; a file name that is not UTF-8 is refused by name with the summary, not a
    traceback; ``--follow-symlinks`` takes the link when asked."""
    secret = tmp_path / "outside" / "passwd"
    secret.parent.mkdir()
    secret.write_text("root:x:0:0:SECRET-LINE:/root:/bin/bash\n")
    tree = tmp_path / "tree"
    (tree / "inner").mkdir(parents=True)
    (tree / "guide.md").write_bytes(GUIDE)
    (tree / "passwd.md").symlink_to(secret)
    (tree / "inner" / "alias.md").symlink_to(tree / "guide.md")  # inside the tree: taken
    (tree / "linked").symlink_to(secret.parent, target_is_directory=True)
    os.close(os.open(os.fsencode(tree) + b"/caf\xe9.md", os.O_CREAT | os.O_WRONLY, 0o644))
    args = ("--corpus", "kb-links", "--tenant", "alpha", "--root", str(tree))

    result = await cli(gw, "ingest", str(tree), *args)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert result.exit_code == 1, result.output
    assert "failed     passwd.md" not in result.output  # refused under its path, not an id
    assert f"{tree}/passwd.md: a symbolic link to {secret}" in result.output
    assert "caf\\xe9.md: the file name is not valid UTF-8" in result.output
    assert "(2 added, 0 updated, 0 unchanged, 2 failed)" in result.output
    docs = await gw.http.get("/admin/corpora/kb-links/documents", params={"tenant": "alpha"})
    ids = sorted(d["document"] for d in docs.json()["documents"])
    assert ids == ["guide.md", "inner/alias.md"]
    chunks = gw.app.state.gateway.corpora
    assert chunks.has_corpus("alpha", "kb-links")

    again = await cli(gw, "ingest", str(tree / "passwd.md"), *args)  # named on its own too
    assert again.exit_code == 1 and "a symbolic link to" in again.output

    followed = await cli(gw, "ingest", str(tree), *args, "--follow-symlinks")
    assert "added      passwd.md (v1," in followed.output, followed.output


async def test_preload_refuses_links_out_of_the_tree_unless_set(
    make_gateway: Any, tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "guide.md").write_bytes(GUIDE)
    (tree / "passwd.md").symlink_to(tmp_path / "secret.md")
    (tmp_path / "secret.md").write_text("# Secret\n\nSECRET-LINE\n")
    for follow, expected in (
        (False, ["tree/guide.md"]),
        (True, ["tree/guide.md", "tree/passwd.md"]),
    ):
        settings = {
            "corpora_enabled": True,
            "admin_key": ADMIN_KEY,
            "data_dir": tmp_path / f"data-{follow}",
            "corpus_preload": {"deja-docs": [str(tree)]},
            "corpus_preload_follow_symlinks": follow,
        }
        async with (
            make_gateway(**settings) as (url, _app),
            httpx.AsyncClient(base_url=url, headers=ADMIN) as http,
        ):
            response = await http.get("/admin/corpora/deja-docs/documents")
            assert sorted(d["document"] for d in response.json()["documents"]) == expected


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("caf%FF.md", "not valid UTF-8"),
        ("caf%FE.md", "not valid UTF-8"),
        ("report%E2%80%AEdm.txt", "bidirectional control"),
        ("a%E2%81%A6b.md", "bidirectional control"),
        ("a%E2%80%8Fb.md", "bidirectional control"),
    ],
)
async def test_api_refuses_undecodable_and_bidi_document_ids(gw: Gw, path: str, why: str) -> None:
    """Two different undecodable byte names must not both become ``caf\\ufffd.md``."""
    response = await put(gw, path, GUIDE)
    assert response.status_code == 400, response.text
    assert why in error_of(response)["message"]


def entry(document: str, data: bytes, ctype: str | None = "text/plain") -> dict[str, Any]:
    return {"document": document, "content_type": ctype, "data": base64.b64encode(data).decode()}


async def test_batch_post_reports_each_file_in_order_and_one_bad_file_fails_alone(gw: Gw) -> None:
    docs_path = "/admin/corpora/kb-post/documents"  # its own corpus: others list kb's
    files = [
        entry("b/one.txt", b"The lighthouse keeper lit the lamp at dusk."),
        {"document": "b/bad64.txt", "data": "not base64!"},
        entry("b/locked.pdf", encrypt_pdf(make_pdf([["x"]]), "pw"), None),
        entry("b/big.md", b"# Big\n\n" + b"word " * 4000),
        entry("/etc/passwd", b"x"),
        entry("b/two.md", GUIDE, "text/markdown"),
    ]
    response = await gw.http.post(docs_path, params={"tenant": "alpha"}, json={"files": files})
    assert response.status_code == 200, response.text
    lines = response.json()["files"]
    assert [(line["document"], line["status"]) for line in lines] == [
        ("b/one.txt", "added"),
        ("b/bad64.txt", "failed"),
        ("b/locked.pdf", "failed"),
        ("b/big.md", "failed"),
        ("/etc/passwd", "failed"),
        ("b/two.md", "added"),
    ]
    assert lines[1]["reason"] == "data is not base64"
    assert "encrypted" in lines[2]["reason"] and "8192-byte limit" in lines[3]["reason"]
    again = await gw.http.post(docs_path, params={"tenant": "alpha"}, json={"files": [files[0]]})
    assert again.json()["files"][0]["status"] == "unchanged"
    docs = (await gw.http.get(docs_path, params={"tenant": "alpha"})).json()["documents"]
    assert {"b/one.txt", "b/two.md"} <= {d["document"] for d in docs}
    shape = await gw.http.post(docs_path, params={"tenant": "alpha"}, json={"documents": []})
    assert shape.status_code == 400 and error_of(shape)["param"] == "body"


async def test_cli_sends_small_files_in_groups_and_falls_back_to_one_by_one(
    gw: Gw, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """41 small files go as two POSTs (32 + 9, one holding an encrypted PDF that fails alone);
    a group over the gateway's body limit (corpus_max_file_bytes 8192 here) is refused whole
    and sent again file by file."""
    methods: list[str] = []
    call = Api.call

    def counted(self: Api, method: str, path: str, **kw: Any) -> Any:
        methods.append(method)
        return call(self, method, path, **kw)

    monkeypatch.setattr(Api, "call", counted)
    small = tmp_path / "small"
    small.mkdir()
    for i in range(40):
        (small / f"p{i:02}.txt").write_text(f"Page {i} is about topic number {i}.")
    (small / "p07.pdf").write_bytes(encrypt_pdf(make_pdf([["x"]]), "pw"))
    args = ("--corpus", "kb-batch", "--tenant", "alpha", "--root", str(small))
    first = await cli(gw, "ingest", str(small), *args)
    assert first.exit_code == 1, first.output
    assert "kb-batch: 41 files (40 added, 0 updated, 0 unchanged, 1 failed)" in first.output
    assert "failed     p07.pdf: the PDF is encrypted" in first.output
    assert methods == ["POST", "POST"]  # 32 + 9 files

    large = tmp_path / "large"
    large.mkdir()
    for i in range(20):  # 20 x 6 KB: under the file limit, over the batch body limit together
        (large / f"l{i:02}.md").write_text(f"# L{i}\n\n" + f"line {i} " * 700)
    args = ("--corpus", "kb-batch2", "--tenant", "alpha", "--root", str(large))
    second = await cli(gw, "ingest", str(large), *args)
    assert second.exit_code == 0, second.output
    assert "kb-batch2: 20 files (20 added, 0 updated, 0 unchanged, 0 failed)" in second.output
    assert methods[2:] == ["POST"] + ["PUT"] * 20  # refused as a whole (413), then one by one
