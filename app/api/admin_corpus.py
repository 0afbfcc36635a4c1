"""Admin: corpora and their documents (issue 11). Same key and audit lines as the rest of
``/admin``; every route names the tenant (``?tenant=``, default ``default``), and a corpus the
tenant does not have is a 404 whether or not another tenant has one of that name.

* ``GET    /admin/corpora?tenant=T`` — the tenant's corpora, with document and chunk counts
* ``GET    /admin/corpora/{corpus}/documents?tenant=T`` — each document's newest version
* ``PUT    /admin/corpora/{corpus}/documents/{document}?tenant=T[&meta=k=v…]`` — the raw file
  as the body (its format from ``Content-Type`` or the id's extension, at most
  ``corpus_max_file_bytes``): added, updated (old → new version) or unchanged; a file deja
  cannot use is a 400 whose message is the reason
* ``POST   /admin/corpora/{corpus}/documents?tenant=T[&meta=k=v…]`` — many files in one
  request (``deja corpus ingest`` sends small files in groups, so their chunks are embedded and
  written together): ``{"files": [{"document", "content_type", "data": base64}]}``, one line
  per file in the order sent; a file deja cannot use is a ``failed`` line and the others go on
* ``DELETE /admin/corpora/{corpus}/documents/{document}?tenant=T`` — the document's chunks,
  and the cached answers built from it

Document ids are paths relative to the ingest root (``docs/architecture.md``).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response

from app.api.admin import Admin, audit
from app.api.json import json_response
from app.gateway import Gateway
from deja.corpus.names import check_corpus_name, check_document_id, check_metadata
from deja.corpus.reports import FileReport, SourceFile
from deja.corpus.service import Corpora
from deja.errors import InvalidRequestError, NotFoundError
from deja.tenancy.keyring import DEFAULT_TENANT
from middleware.admit import disconnect_waiter, header_map, read_body
from middleware.disconnect import until_disconnect

router = APIRouter(prefix="/admin")

Tenant = Annotated[
    str, Query(min_length=1, max_length=128, description="The tenant that owns the corpus.")
]
Meta = Annotated[list[str] | None, Query(description="Metadata as key=value, repeatable.")]


def _corpora(gateway: Gateway) -> Corpora:
    if gateway.corpora is None:
        raise InvalidRequestError("corpora are disabled on this gateway (corpora_enabled)")
    return gateway.corpora


def _known_tenant(gateway: Gateway, tenant: str) -> str:
    """A tenant that can send requests: one of the keys file's, or ``default`` in open mode.
    A corpus for any other name could never be retrieved from."""
    keys = gateway.keys
    known = {DEFAULT_TENANT} if keys.open else set(keys.tenants)
    if tenant not in known:
        raise InvalidRequestError(f"no tenant named {tenant!r} in the keys file", param="tenant")
    return tenant


def _metadata(pairs: list[str]) -> dict[str, str]:
    metadata: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise InvalidRequestError(f"meta {pair!r} is not key=value", param="meta")
        metadata[key] = value
    return check_metadata(metadata, param="meta")


@dataclass(frozen=True, slots=True)
class Upload:
    """Where the documents of a PUT or POST go, checked before the body is read: corpora on,
    a tenant that can send requests, a valid corpus name, the metadata."""

    corpora: Corpora
    tenant: str
    corpus: str
    metadata: dict[str, str]
    dry_run: bool


def upload(
    corpus: str,
    gateway: Admin,
    tenant: Tenant = DEFAULT_TENANT,
    meta: Meta = None,
    dry_run: bool = False,
) -> Upload:
    corpora = _corpora(gateway)
    _known_tenant(gateway, tenant)
    check_corpus_name(corpus)
    return Upload(corpora, tenant, corpus, _metadata(meta or []), dry_run)


Uploading = Annotated[Upload, Depends(upload)]


@router.get("/corpora")
async def list_corpora(gateway: Admin, tenant: Tenant = DEFAULT_TENANT) -> Response:
    """The tenant's corpora: name, documents, chunks (newest versions)."""
    corpora = _corpora(gateway)
    totals: dict[str, list[int]] = {name: [0, 0] for name in corpora.corpora(tenant)}
    for head in await corpora.documents(tenant):
        counts = totals.setdefault(head.corpus, [0, 0])
        counts[0] += 1
        counts[1] += head.chunks
    rows = [
        {"name": name, "documents": docs, "chunks": chunks}
        for name, (docs, chunks) in sorted(totals.items())
        if docs
    ]
    return json_response({"tenant": tenant, "corpora": rows})


@router.get("/corpora/{corpus}/documents")
async def list_documents(corpus: str, gateway: Admin, tenant: Tenant = DEFAULT_TENANT) -> Response:
    heads = await _corpora(gateway).documents(tenant, corpus)
    return json_response(
        {"tenant": tenant, "corpus": corpus, "documents": [h.as_json() for h in heads]}
    )


@router.put("/corpora/{corpus}/documents/{document:path}")
async def put_document(document: str, request: Request, gateway: Admin, to: Uploading) -> Response:
    """Add or replace one document from the raw file in the body; ``dry_run=true`` writes
    nothing and reports what would change and how many cached answers it would invalidate."""
    check_document_id(document)
    headers = header_map(request)
    data = await read_body(request, headers, gateway.settings.corpus_max_file_bytes)
    file = SourceFile(document, data, headers.get("content-type"), to.metadata)
    # The ingest stops (its parse worker killed, nothing written) when the client goes away.
    report = await until_disconnect(
        to.corpora.ingest(to.tenant, to.corpus, [file], dry_run=to.dry_run),
        disconnect_waiter(request.receive),
    )
    line = report.files[0]
    details = line.as_json()
    if not to.dry_run:
        audit(gateway, f"corpus.{line.status}", tenant=to.tenant, corpus=to.corpus, **details)
    if line.status == "failed":
        raise InvalidRequestError(f"{document}: {line.reason}", param="body")
    return json_response({"tenant": to.tenant, "corpus": to.corpus, **details})


def _batch_files(
    body: bytes, metadata: dict[str, str], max_bytes: int
) -> tuple[list[SourceFile], dict[int, FileReport]]:
    """The files of a batch body, and the ``failed`` lines (by position) of those that cannot
    be decoded or are over ``max_bytes``; a body that is not the batch shape is a 400."""
    try:
        entries: Any = orjson.loads(body)["files"]
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise TypeError
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise InvalidRequestError(
            'the body must be JSON {"files": [{"document", "content_type", "data"}]}',
            param="body",
        ) from exc
    files: list[SourceFile] = []
    failed: dict[int, FileReport] = {}
    for i, entry in enumerate(entries):
        document, ctype = str(entry.get("document", "")), entry.get("content_type")
        try:
            data = base64.b64decode(str(entry.get("data", "")), validate=True)
        except (binascii.Error, ValueError):
            failed[i] = FileReport(document, "failed", reason="data is not base64")
            continue
        if len(data) > max_bytes:
            reason = f"the file is {len(data)} bytes, above the {max_bytes}-byte limit"
            failed[i] = FileReport(document, "failed", reason=reason)
            continue
        files.append(
            SourceFile(document, data, ctype if isinstance(ctype, str) else None, metadata)
        )
    return files, failed


@router.post("/corpora/{corpus}/documents")
async def post_documents(request: Request, gateway: Admin, to: Uploading) -> Response:
    """Add or replace many documents from one JSON body (base64 files, at most
    ``corpus_max_file_bytes`` each and as much in all); a line per file, in the order sent."""
    headers = header_map(request)
    max_bytes = gateway.settings.corpus_max_file_bytes
    body = await read_body(request, headers, max_bytes * 4 // 3 + 65536)
    files, failed = _batch_files(body, to.metadata, max_bytes)
    report = await until_disconnect(
        to.corpora.ingest(to.tenant, to.corpus, files, dry_run=to.dry_run),
        disconnect_waiter(request.receive),
    )
    ingested = iter(report.files)
    lines = [failed[i] if i in failed else next(ingested) for i in range(len(files) + len(failed))]
    if not to.dry_run:
        for line in lines:
            details = line.as_json()
            audit(gateway, f"corpus.{line.status}", tenant=to.tenant, corpus=to.corpus, **details)
    return json_response(
        {"tenant": to.tenant, "corpus": to.corpus, "files": [line.as_json() for line in lines]}
    )


@router.delete("/corpora/{corpus}/documents/{document:path}")
async def delete_document(
    corpus: str, document: str, gateway: Admin, tenant: Tenant = DEFAULT_TENANT
) -> Response:
    """Remove a document (every version) and the cached answers built from it."""
    removal = await _corpora(gateway).remove(tenant, corpus, document)
    if removal is None:
        raise NotFoundError(f"no document {document!r} in corpus {corpus!r}", param="document")
    details = removal.as_json()
    audit(gateway, "corpus.remove", **details)
    return json_response(details)
