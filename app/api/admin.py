"""The admin surface (``/admin/…``), behind its own bearer key (``DEJA_ADMIN_KEY``).

No key configured: the admin API is disabled (403). A missing or wrong key: 401. A client key:
403 — client keys never reach ``/admin``. Every admin action writes one audit log line.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field
from starlette.responses import Response

from app.api.json import json_response
from app.gateway import Gateway, gateway_of
from config.settings import Settings
from deja.errors import (
    AuthenticationError,
    ConfigError,
    InvalidRequestError,
    PermissionDeniedError,
)
from deja.tenancy.keyring import bearer_token
from deja.upstream.pool import ReplicaMetrics


def shows_admin_key(gateway: Gateway, authorization: str | None) -> bool:
    """True when ``authorization`` carries the admin key (constant-time comparison)."""
    key = gateway.settings.admin_key
    token = bearer_token(authorization or "")
    if key is None or not key.get_secret_value() or not token:
        return False
    return hmac.compare_digest(token.encode(), key.get_secret_value().encode())


#: The 403 of a gateway started without an admin key. Setting the key in the client's shell
#: does not help: the gateway reads it at start-up.
ADMIN_DISABLED = (
    "the admin API is disabled: this gateway was started without DEJA_ADMIN_KEY; restart it "
    "with DEJA_ADMIN_KEY set (the CLI and the console then use that same key)"
)


def require_admin(request: Request) -> Gateway:
    """The gateway, once the caller has shown the admin key."""
    gateway = gateway_of(request)
    key = gateway.settings.admin_key
    if key is None or not key.get_secret_value():
        raise PermissionDeniedError(ADMIN_DISABLED)
    sent = request.headers.get("authorization", "")
    token = bearer_token(sent)
    expected = key.get_secret_value().encode()
    if token and hmac.compare_digest(token.encode(), expected):
        return gateway
    if token and not gateway.keys.open:
        try:
            gateway.keys.authenticate(sent)
        except AuthenticationError:
            pass
        else:
            raise PermissionDeniedError("client keys cannot use the admin API")
    raise AuthenticationError("a valid admin bearer key is required for /admin")


def admin_who(gateway: Gateway) -> str:
    """Who an admin action names: ``admin:`` and 8 hex digits of the admin key's sha256."""
    key = gateway.settings.admin_key
    if key is None:
        return "-"
    return "admin:" + hashlib.sha256(key.get_secret_value().encode()).hexdigest()[:8]


def audit(gateway: Gateway, action: str, *, who: str | None = None, **details: Any) -> None:
    """One JSON line per admin action (who, what, how many) and a counter bump; ``who`` is the
    admin key's hash unless given (an application's feedback names its key)."""
    if who is None:
        who = admin_who(gateway)
    gateway.metrics.count(gateway.metrics.admin_actions, action)
    gateway.audit_trail.write(action, who, **details)


Admin = Annotated[Gateway, Depends(require_admin)]
router = APIRouter(prefix="/admin")


def _hit_rate(metrics: ReplicaMetrics) -> float | None:
    """Prefix-cache hits / queries since the replica started (None before any query)."""
    queries = metrics.prefix_cache_queries
    return round(metrics.prefix_cache_hits / queries, 4) if queries > 0 else None


def _replica_report(gateway: Gateway) -> dict[str, Any]:
    pool = gateway.pool
    now = time.monotonic()
    shares = pool.ring.share_of_keys()
    kv = gateway.upstream.router.kv
    replicas = []
    for r in pool.replicas:
        scraped = r.metrics.scraped_at
        replicas.append(
            {
                "url": r.url,
                "name": r.name,
                "simulated": r.simulated,
                "weight": r.weight,
                "healthy": r.healthy,
                "usable": r.usable(now),
                "breaker": {
                    "state": r.breaker.state.value,
                    "consecutive_failures": r.breaker.failures,
                    "open_for_seconds": round(max(0.0, r.breaker.open_until - now), 3),
                },
                "in_flight": r.in_flight,
                "max_inflight": pool.limit(r),
                "max_num_seqs": r.max_num_seqs,
                "max_num_seqs_source": None
                if r.max_num_seqs is None
                else ("learned" if r.max_num_seqs_learned else "exported"),
                "metrics": {
                    "num_requests_running": r.metrics.running,
                    "num_requests_waiting": r.metrics.waiting,
                    "kv_cache_usage_perc": r.metrics.kv_cache_usage,
                    "prefix_cache_queries": r.metrics.prefix_cache_queries,
                    "prefix_cache_hits": r.metrics.prefix_cache_hits,
                    "prefix_cache_hit_rate": _hit_rate(r.metrics),
                    "age_seconds": round(now - scraped, 3) if scraped else None,
                },
                "share_of_keys": round(shares.get(r.url, 0.0), 4),
                "models": [m.get("id") for m in r.models],
                "last_error": r.last_error,
                "kv_index": kv.report(r.url) if kv is not None else None,
            }
        )
    router_ = gateway.upstream.router
    return {
        "policy": router_.policy,
        "epsilon": router_.epsilon,
        "waiting": gateway.upstream.admission.waiting,
        "replicas": replicas,
    }


@router.get("/replicas")
async def get_replicas(gateway: Admin) -> Response:
    """Each replica's state, in-flight count, last scraped metrics, breaker and key share."""
    return json_response(_replica_report(gateway))


class ReplicaList(BaseModel):
    replicas: list[str] = Field(
        description="Replica URLs, optionally with ;weight=N and ;max_inflight=N."
    )


@router.put("/replicas")
async def put_replicas(body: ReplicaList, gateway: Admin) -> Response:
    """Replace the replica list; in-flight requests are not dropped."""
    try:
        checked = Settings.model_validate(
            {**gateway.settings.model_dump(), "replicas": body.replicas}
        ).replicas
    except ValueError as exc:
        raise InvalidRequestError(f"invalid replica list: {exc}", param="replicas") from exc
    gateway.reload_replicas(checked)
    audit(gateway, "replicas.set", count=len(checked))
    return json_response(_replica_report(gateway))


@router.post("/replicas/reload")
async def reload_replicas(gateway: Admin) -> Response:
    """Re-read the replica list from the configuration (as SIGHUP does)."""
    if gateway.reload is None:
        raise InvalidRequestError("this gateway was started without a reloadable configuration")
    try:
        replicas = gateway.configured_replicas(gateway.reload())
    except ConfigError as exc:
        raise InvalidRequestError(f"configuration not reloaded: {exc}") from exc
    gateway.reload_replicas(replicas)
    audit(gateway, "replicas.reload", count=len(replicas))
    return json_response(_replica_report(gateway))
