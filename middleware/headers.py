"""The response headers of a request a replica answered (a miss, a bypass, a coalesced
request's leader): one function, used by the direct path and the single-flight producer."""

from __future__ import annotations

from deja.request import GatewayRequest
from middleware.lookup import Lookup
from middleware.retrieve import Retrieval, source_records, sources_header


def miss_headers(
    req: GatewayRequest,
    rag: Retrieval,
    lookup: Lookup,
    replica: str,
    reason: str,
    prefix_key: str | None,
) -> dict[str, str]:
    """The headers of an answer a replica gave: the outcome, where it was routed and why, how
    close the cache came, and a RAG request's sources."""
    headers = {
        "x-deja-cache": lookup.outcome.value,
        "x-deja-replica": replica,
        "x-deja-route": reason,
        "x-request-id": req.request_id,
    }
    if prefix_key is not None:
        headers["x-prefix-hash"] = prefix_key
    if lookup.entry_id is not None:
        headers["x-deja-entry"] = lookup.entry_id
    if lookup.similarity is not None:  # how close the miss came
        headers["x-deja-similarity"] = f"{lookup.similarity:.4f}"
    if lookup.verifier_score is not None:
        headers["x-deja-verifier-score"] = f"{lookup.verifier_score:.4f}"
    if lookup.bypass is not None:
        headers["x-deja-bypass"] = lookup.bypass
    if req.corpus is not None:
        headers["x-deja-sources"] = sources_header(source_records(rag.sources))
    if rag.outcome is not None:
        headers["x-deja-retrieval"] = rag.outcome
    return headers
