"""``POST /v1/embeddings``: the exact layer and the replica pool, nothing else.

An embedding is a deterministic function of (model, input, dimensions, encoding), so the one
cache that fits is the exact one, keyed like generation requests (tenant, namespace and every
field of the body except the delivery-only ones; ``encoding_format`` counts, so a base64 hit
is never served to a float request). There is no semantic layer (a paraphrase has another
vector), no RAG, no single-flight and no SSE. Admission, routing to replicas that serve the
model, retries, deadlines and error mapping are the generation path's own
(:class:`~deja.upstream.upstream.Upstream`); metrics count under ``route="embeddings"``.
"""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.responses import Response

from deja.cache.entry import CachedAnswer
from deja.cache.exact.base import ExactStore
from deja.cache.keys import Endpoint, cache_key
from deja.errors import CacheUnavailableError, DejaError, InvalidRequestError
from deja.observability.accesslog import AccessLog
from deja.observability.metrics import Metrics
from deja.observability.stats import Stats
from deja.request import CachePolicy, Outcome
from deja.upstream.upstream import Upstream
from middleware.disconnect import Disconnected, until_disconnect
from middleware.errors import http_error
from middleware.responses import JSON, prebuilt, prebuilt_raw
from middleware.tasks import BackgroundTasks

__all__ = ["EMBEDDINGS_PATH", "Embeddings", "EmbeddingsRequest", "parse_embeddings"]

log = logging.getLogger("deja.embeddings")

EMBEDDINGS_PATH = "/v1/embeddings"
ENDPOINT: Endpoint = "embeddings"
#: The largest number of inputs in one request (OpenAI's own limit is 2048).
MAX_INPUTS = 2048
#: An entry's question in the admin listing: the first input, cut to this many characters.
QUESTION_CHARS = 200
_ENCODINGS = ("float", "base64")


@dataclass(frozen=True, slots=True)
class EmbeddingsRequest:
    """One validated embeddings request."""

    tenant: str
    model: str
    raw: bytes
    body: dict[str, Any]
    policy: CachePolicy
    namespace: str
    cache: bool
    request_id: str = ""
    deadline: float | None = None

    @property
    def first_input(self) -> str:
        value = self.body["input"]
        first = value if isinstance(value, str) else value[0]
        return first if isinstance(first, str) else orjson.dumps(first).decode()


def _check_input(value: Any) -> None:
    """A string, a list of strings, a list of token ids, or a list of such lists (OpenAI's
    four forms), never empty."""
    if isinstance(value, str):
        return
    if not isinstance(value, list) or not value:
        raise InvalidRequestError(
            "'input' must be a string or a non-empty array of strings or token ids",
            param="input",
        )
    if len(value) > MAX_INPUTS:
        raise InvalidRequestError(f"'input' holds more than {MAX_INPUTS} items", param="input")
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    nested = all(
        isinstance(v, list) and v and all(isinstance(i, int) and not isinstance(i, bool) for i in v)
        for v in value
    )
    if not (ints or nested or all(isinstance(v, str) for v in value)):
        raise InvalidRequestError(
            "'input' must be a string, or an array of strings, of token ids, or of arrays of "
            "token ids (one kind throughout)",
            param="input",
        )


def parse_embeddings(
    raw: bytes, *, tenant: str, policy: CachePolicy, namespace: str, cache: bool
) -> EmbeddingsRequest:
    """Validate an embeddings body the way OpenAI does; ``InvalidRequestError`` (400) names
    the field."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequestError(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidRequestError("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequestError("'model' is required and must be a string", param="model")
    if "input" not in body:
        raise InvalidRequestError("'input' is required", param="input")
    _check_input(body["input"])
    encoding = body.get("encoding_format")
    if encoding is not None and encoding not in _ENCODINGS:
        raise InvalidRequestError(
            "'encoding_format' must be 'float' or 'base64'", param="encoding_format"
        )
    dims = body.get("dimensions")
    if dims is not None and (isinstance(dims, bool) or not isinstance(dims, int) or dims < 1):
        raise InvalidRequestError("'dimensions' must be a positive integer", param="dimensions")
    return EmbeddingsRequest(tenant, model, raw, body, policy, namespace, cache)


class Embeddings:
    """The embeddings path of one gateway process (built once, shared by every request)."""

    def __init__(
        self,
        exact: ExactStore | None,
        upstream: Upstream,
        metrics: Metrics,
        access_log: AccessLog | None,
        background: BackgroundTasks,
        stats: Stats | None = None,
    ) -> None:
        self.exact = exact
        self.stats = stats
        self.upstream = upstream
        self.metrics = metrics
        self.access_log = access_log
        self.background = background

    def key(self, req: EmbeddingsRequest) -> str | None:
        """The exact key (which is also the entry id), None when the request is not cached."""
        if self.exact is None or not req.cache:
            return None
        return cache_key(req.tenant, ENDPOINT, req.body, req.namespace)

    async def handle(self, req: EmbeddingsRequest, disconnected: Disconnected) -> Response:
        """A stored answer, or the replica's (stored off the response path)."""
        started = time.perf_counter()
        key = self.key(req)
        outcome, replica, status, reason = (
            Outcome.OFF if key is None else Outcome.MISS,
            None,
            500,
            "",
        )
        try:
            hit = await self._lookup(req, key)
            if hit is not None:
                outcome, status = Outcome.EXACT, 200
                return self._replay(req, hit)
            reply = await until_disconnect(
                self.upstream.complete(
                    EMBEDDINGS_PATH, req.raw, req.model, None, deadline=req.deadline
                ),
                disconnected,
            )
            replica, status = reply.replica.name, 200
            if key is not None and req.policy.write:
                self.background.spawn(self._store(req, key, reply.body))
            headers = {
                "x-deja-cache": outcome.value,
                "x-deja-replica": replica,
                "x-request-id": req.request_id,
            }
            if key is not None:
                headers["x-deja-entry"] = key
            return prebuilt(reply.body, JSON, headers)
        except DejaError as exc:
            shape = http_error(exc)
            status, reason = shape.status, shape.code or shape.type
            raise
        finally:
            self._record(req, outcome, key, replica, status, reason, started)

    async def _lookup(self, req: EmbeddingsRequest, key: str | None) -> CachedAnswer | None:
        if self.exact is None or key is None or not req.policy.read:
            return None
        started = time.perf_counter()
        try:
            answer = await self.exact.get(key)
        except CacheUnavailableError:
            self.metrics.count(self.metrics.store_errors, "exact")
            return None
        self.metrics.lookup("exact", time.perf_counter() - started)
        if answer is None or answer.data is None or answer.older_than(req.policy.max_age):
            return None
        return answer

    def _replay(self, req: EmbeddingsRequest, answer: CachedAnswer) -> Response:
        assert self.exact is not None
        self.exact.note_hit(answer.entry_id)
        body = orjson.dumps(
            {
                "id": f"embd-{secrets.token_hex(12)}",
                "object": "list",
                "created": int(answer.created_at),
                "model": answer.model or req.model,
                "data": answer.data,
                "usage": answer.usage,
            }
        )
        headers = [
            (b"x-deja-cache", b"exact"),
            (b"x-deja-entry", answer.entry_id.encode()),
            (b"age", b"%d" % answer.age(time.time())),
            (b"x-request-id", req.request_id.encode("latin-1")),
        ]
        return prebuilt_raw(body, JSON, headers)

    async def _store(self, req: EmbeddingsRequest, key: str, body: bytes) -> None:
        assert self.exact is not None
        try:
            answer = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            log.warning("not caching an embeddings answer that is not JSON: %s", exc)
            return
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list) or not data:
            return
        usage = answer.get("usage")
        created = time.time()
        ttl = req.policy.ttl
        entry = CachedAnswer(
            entry_id=key,
            endpoint=ENDPOINT,
            model=str(answer.get("model") or req.model),
            finish_reason="stop",
            created_at=created,
            usage=usage if isinstance(usage, dict) else None,
            tenant=req.tenant,
            namespace=req.namespace,
            question=req.first_input[:QUESTION_CHARS],
            expires_at=created + ttl,
            data=data,
        )
        try:
            await self.exact.set(key, entry, ttl)
        except CacheUnavailableError:
            self.metrics.count(self.metrics.store_errors, "exact")

    def _record(
        self,
        req: EmbeddingsRequest,
        outcome: Outcome,
        key: str | None,
        replica: str | None,
        status: int,
        reason: str,
        started: float,
    ) -> None:
        """One count and one access-log line per request, as for generation."""
        seconds = time.perf_counter() - started
        if self.stats is not None and status == 200:
            self.stats.record(req.tenant, outcome)
        self.metrics.request(ENDPOINT, outcome.value, req.tenant, seconds, str(status), reason)
        if self.access_log is None:
            return
        self.access_log.request(
            request_id=req.request_id,
            tenant=req.tenant,
            route=ENDPOINT,
            outcome=outcome.value,
            status=status,
            seconds=seconds,
            reason=reason,
            model=req.model,
            entry=key,
            replica=replica,
        )
