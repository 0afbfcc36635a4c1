"""Admission: what a generation request must pass before the pipeline sees it.

authenticate → the tenant, the tenant's rate limit, the body (bounded, 413; the body-read
timeout, 408, is ``middleware.bodyread``), the request memo (byte-identical requests skip the
next two), validation (``middleware.validate``, 400 with ``param``) and the cache policy
(``middleware.policy``), the model (404, or 503 when no replica's models are known) and a RAG
request's corpus (404 unless the tenant owns it, hit or miss). A request refused here is
recorded once, as ``rejected``, by ``RecordStep.rejected``.

The route stays thin: HTTP in (``AdmitStep.admit``), ``Pipeline.handle``, the response out.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import time
from collections.abc import Hashable
from dataclasses import dataclass

from starlette.requests import Request
from starlette.types import Receive

from config.settings import Settings
from deja.cache.keys import Endpoint
from deja.errors import (
    BodyTooLargeError,
    ClientGoneError,
    CorpusNotFoundError,
    DejaError,
    ModelNotFoundError,
    NoHealthyReplicaError,
)
from deja.request import GatewayRequest
from deja.tenancy.keyring import Caller, KeyRing, Tenant
from deja.tenancy.ratelimit import RateLimiter
from deja.upstream.discovery import ModelDiscovery
from middleware.disconnect import Disconnected
from middleware.lookup import LookupStep
from middleware.memo import (
    CONTEXT_ID_HEADER,
    CORPUS_FILTER_HEADER,
    CORPUS_HEADER,
    NAMESPACE_HEADER,
    Prepared,
    RequestMemo,
    memo_key,
)
from middleware.policy import parse_policy
from middleware.record import RecordStep
from middleware.retrieve import RetrieveStep
from middleware.validate import validate

#: The 503 when the gateway was started without replicas (not a health problem: a setup one).
NO_REPLICAS_CONFIGURED = (
    "no replicas are configured: set DEJA_REPLICAS to your vLLM servers' URLs "
    "(e.g. DEJA_REPLICAS=http://10.0.0.5:8000,http://10.0.0.6:8000) and restart, or start "
    "with `deja serve --demo` for simulated replicas"
)

#: A body above this is validated and hashed on a worker thread, not the event loop: three
#: 4 MB bodies at once raised exact-hit p99 from 4.9 to 51 ms when parsed on the loop (the
#: thread still holds the GIL, but yields it every switch interval, so hits interleave).
OFF_LOOP_BODY_BYTES = 256 * 1024

_REQUEST_PREFIX = secrets.token_hex(4)
_REQUEST_COUNTER = itertools.count(1)


def header_map(request: Request) -> dict[str, str]:
    """The request headers as a plain dict with lower-case names, built in one pass (the
    ASGI server already lower-cases names; a repeated header keeps its last value)."""
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in request.scope["headers"]}


def request_id(sent: str | None) -> str:
    """The client's ``X-Request-Id`` when it is sane, else a new process-unique id."""
    if sent and len(sent) <= 128 and sent.isprintable():
        return sent
    return f"deja-{_REQUEST_PREFIX}-{next(_REQUEST_COUNTER):x}"


async def read_body(request: Request, headers: dict[str, str], limit: int) -> bytes:
    """The whole body, or 413 as soon as it is known to exceed ``limit``."""
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLargeError(f"Request body of {declared} bytes exceeds the {limit}-byte limit.")
    body = b""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            raise ClientGoneError("the client went away while sending its request")
        chunk: bytes = message.get("body", b"")
        body += chunk
        if len(body) > limit:
            raise BodyTooLargeError(f"Request body exceeds the {limit}-byte limit.")
        if not message.get("more_body", False):
            return body


def disconnect_waiter(receive: Receive) -> Disconnected:
    """Completes when the client disconnects (read once the body is in)."""

    async def wait() -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return

    return wait


@dataclass(slots=True)
class Admitted:
    """A request the pipeline may run: validated, with this request's id and deadline, what
    the lookup derived from its bytes, and how to tell that its client left. Treat it as
    immutable; not ``frozen``, whose ``__init__`` costs ~2 µs more on every request."""

    req: GatewayRequest
    prepared: Prepared
    disconnected: Disconnected


class AdmitStep:
    """Everything between the HTTP request and ``Pipeline.handle``."""

    def __init__(
        self,
        settings: Settings,
        limiter: RateLimiter,
        discovery: ModelDiscovery,
        *,
        lookup_step: LookupStep,
        memo: RequestMemo,
        record_step: RecordStep,
        retrieve_step: RetrieveStep | None = None,
    ) -> None:
        self.settings = settings
        self.limiter = limiter
        self.discovery = discovery
        self.lookup_step = lookup_step
        self.memo = memo
        self.record_step = record_step
        self.retrieve_step = retrieve_step

    async def admit(self, request: Request, endpoint: Endpoint, keys: KeyRing) -> Admitted:
        """The admitted request, or the DejaError that refuses it (recorded as rejected).
        ``keys`` is the key ring now (it is swapped whole when the keys file changes)."""
        arrived = time.monotonic()
        headers = header_map(request)
        tenant_name = "-"
        try:
            caller = keys.authenticate(headers.get("authorization"))
            tenant = caller.tenant
            tenant_name = tenant.name  # known before the rate limit, so a 429 is logged under it
            if tenant.rate_limit_rpm is not None:
                await self.take_rate_limit(caller)
            raw = await read_body(request, headers, self.settings.max_body_bytes)
            key = memo_key(endpoint, tenant, raw, headers)
            prepared = self.memo.get(key)  # on the loop, no await: the common case for repeats
            if prepared is None:
                prepared = await self.prepare(key, endpoint, tenant, raw, headers)
            deadline = arrived + self.settings.request_timeout_seconds  # body included
            req = prepared.req.for_request(request_id(headers.get("x-request-id")), deadline)
            if req.model not in self.discovery.pool.known_models():
                await self.check_model(req.model)
            if req.corpus is not None:
                self.check_corpus(req)
        except DejaError as exc:
            self.record_step.rejected(
                exc,
                route=endpoint,
                tenant=tenant_name,
                request_id=request_id(headers.get("x-request-id")),
                seconds=time.monotonic() - arrived,
            )
            raise
        return Admitted(req, prepared, disconnect_waiter(request.receive))

    async def take_rate_limit(self, caller: Caller) -> None:
        """429 when the caller's tenant has no room left (after authentication, 401, so the
        refusal is logged under the tenant); every client route (generation, embeddings)."""
        if caller.tenant.rate_limit_rpm is not None:
            await self.limiter.take(caller.key_id, caller.tenant.rate_limit_rpm)

    async def prepare(
        self,
        key: Hashable,
        endpoint: Endpoint,
        tenant: Tenant,
        raw: bytes,
        headers: dict[str, str],
    ) -> Prepared:
        """The validated request and what the lookup derives from it alone, remembered under
        ``key`` for byte-identical requests (same tenant, same shaping headers: the memo never
        holds an answer, ``middleware.memo``), which ``admit`` reads first. A large body is
        validated on a worker thread (the memo is read and written on the loop only)."""
        if len(raw) > OFF_LOOP_BODY_BYTES:  # validating and hashing it would stall hits
            prepared = await asyncio.to_thread(self.fresh, endpoint, tenant, raw, headers)
        else:
            prepared = self.fresh(endpoint, tenant, raw, headers)
        self.memo.put(key, prepared)
        return prepared

    def fresh(
        self, endpoint: Endpoint, tenant: Tenant, raw: bytes, headers: dict[str, str]
    ) -> Prepared:
        """Validation (400 with ``param``) and the lookup's bypass reason and exact key."""
        return self.lookup_step.prepare(self.validated(endpoint, tenant, raw, headers))

    def validated(
        self, endpoint: Endpoint, tenant: Tenant, raw: bytes, headers: dict[str, str]
    ) -> GatewayRequest:
        """Parse and validate one request. Every header read here must be in
        ``middleware.memo.SHAPING_HEADERS``, or the memo would mix requests."""
        settings = self.settings
        policy = parse_policy(
            headers,
            default_ttl=tenant.ttl_seconds or settings.cache_ttl_seconds,
            max_ttl=settings.cache_max_ttl_seconds,
        )
        return validate(
            endpoint,
            raw,
            tenant=tenant.name,
            policy=policy,
            prefix_override=headers.get("x-prefix-hash"),
            namespace=headers.get(NAMESPACE_HEADER, ""),
            cache=tenant.cache is not False,
            tenant_threshold=tenant.threshold,
            share_prefix_cache=tenant.share_prefix_cache,
            promote=settings.semantic_promote if tenant.promote is None else tenant.promote,
            corpus=headers.get(CORPUS_HEADER) or tenant.corpus,
            model_corpus=settings.rag_model_corpus,
            default_corpus=settings.rag_default_corpus,
            context_id=headers.get(CONTEXT_ID_HEADER),
            rag_on_failure=tenant.rag_on_failure or settings.rag_on_failure,
            corpus_filter=headers.get(CORPUS_FILTER_HEADER),
        )

    async def check_model(self, model: str) -> None:
        """404 for a model no replica serves; 503 when no replica's model list could be read."""
        if await self.discovery.knows(model):
            return
        if not self.discovery.pool.replicas:
            raise NoHealthyReplicaError(NO_REPLICAS_CONFIGURED)
        if not self.discovery.pool.known_models():
            raise NoHealthyReplicaError("no replica is reachable to serve this request")
        raise ModelNotFoundError(
            f"The model '{model}' does not exist or is not served by any replica.", param="model"
        )

    def check_corpus(self, req: GatewayRequest) -> None:
        """A RAG request names a corpus its tenant owns, hit or miss (404 otherwise: another
        tenant's corpus included, so its existence does not leak)."""
        if self.retrieve_step is None:
            raise CorpusNotFoundError(
                f"The corpus '{req.corpus}' does not exist.", param="X-Deja-Corpus"
            )
        self.retrieve_step.check(req)
