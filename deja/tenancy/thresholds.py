"""θ, tuned while the gateway runs: a global value, per-tenant and per-model overrides.

The values live in a shared store (Redis when configured, else a file in the data dir), so every
gateway process sees a change within ``THRESHOLD_POLL_SECONDS``. Resolution for one request:
the model's override, else the tenant's override, else the tenant's own setting from the keys
file, else the global value; a request's ``X-Deja-Threshold`` can only raise the result.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson

from deja.errors import InvalidRequestError, ThresholdStoreError, describe
from deja.files import write_atomic
from deja.redisclient import REDIS_ERRORS, RedisClient

log = logging.getLogger("deja.thresholds")

THRESHOLD_POLL_SECONDS = 2.0
REDIS_KEY = "deja:thresholds"
_READ_ERRORS: tuple[type[BaseException], ...] = (*REDIS_ERRORS, orjson.JSONDecodeError)


@dataclass
class Levels:
    """A global value with per-tenant and per-model overrides. Resolution for one request: the
    model's override, else the tenant's, else the tenant's own setting from the keys file,
    else the global value."""

    global_: float
    tenants: dict[str, float] = field(default_factory=dict)
    models: dict[str, float] = field(default_factory=dict)
    low: float = 0.0
    what: str = "θ"
    #: The greatest value that can be honoured: for precision targets, the highest target the
    #: calibration table measured (above it no candidate would ever pass, so hits would stop
    #: without a word); a change above it is refused.
    high: float = 1.0

    def resolve(self, tenant: str, model: str, tenant_default: float | None = None) -> float:
        if model in self.models:
            return self.models[model]
        if tenant in self.tenants:
            return self.tenants[tenant]
        return tenant_default if tenant_default is not None else self.global_

    def as_json(self) -> dict[str, Any]:
        return {"global": self.global_, "tenants": dict(self.tenants), "models": dict(self.models)}

    def apply(self, data: dict[str, Any]) -> None:
        """Merge a change: ``global``, and ``tenants``/``models`` maps (None removes one)."""
        if data.get("global") is not None:
            self.global_ = self._check(data["global"], "global")
        for name, target in (("tenants", self.tenants), ("models", self.models)):
            changes = data.get(name) or {}
            if not isinstance(changes, dict):
                raise InvalidRequestError(f"'{name}' must be an object", param=name)
            for key, value in changes.items():
                if value is None:
                    target.pop(str(key), None)
                else:
                    target[str(key)] = self._check(value, f"{name}.{key}")

    def replace(self, data: dict[str, Any]) -> None:
        self.global_ = self._check(data.get("global", self.global_), "global")
        check = self._check
        self.tenants = {str(k): check(v, k) for k, v in (data.get("tenants") or {}).items()}
        self.models = {str(k): check(v, k) for k, v in (data.get("models") or {}).items()}

    def _check(self, value: Any, where: str) -> float:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not self.low <= value <= 1
        ):
            raise InvalidRequestError(
                f"{self.what} for {where} must be a number in [{self.low}, 1]", param=where
            )
        if value > self.high:
            raise InvalidRequestError(
                f"{self.what} {value} for {where} cannot be served: the calibration table "
                f"covers targets up to {self.high:.2f} (above it no semantic hit would pass); "
                "recalibrate on more labelled pairs (deja calibrate) to reach it",
                param=where,
            )
        return float(value)


@dataclass
class Thresholds(Levels):
    """The live θ (the least cosine similarity of a semantic candidate) and the live precision
    target (which sets the verifier's cut-off) of this process. Stored as one document:
    ``{"global", "tenants", "models", "precision": {"global", "tenants", "models"}}``."""

    precision: Levels = field(default_factory=lambda: Levels(0.92, low=0.5, what="precision"))

    def as_json(self) -> dict[str, Any]:
        return {**super().as_json(), "precision": self.precision.as_json()}

    def apply(self, data: dict[str, Any]) -> None:
        super().apply(data)
        change = data.get("precision")
        if change is not None:
            if not isinstance(change, dict):
                raise InvalidRequestError("'precision' must be an object", param="precision")
            self.precision.apply(change)

    def replace(self, data: dict[str, Any]) -> None:
        super().replace(data)
        if isinstance(data.get("precision"), dict):
            self.precision.replace(data["precision"])


class ThresholdStore(Protocol):
    async def load(self) -> dict[str, Any] | None: ...

    async def save(self, data: dict[str, Any]) -> None: ...


class FileThresholdStore:
    """``data_dir/thresholds.json``, written atomically."""

    def __init__(self, path: Path) -> None:
        self.path = path

    async def load(self) -> dict[str, Any] | None:
        try:
            raw = await asyncio.to_thread(self.path.read_bytes)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ThresholdStoreError(f"cannot read {self.path}: {describe(exc)}") from exc
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ThresholdStoreError(f"{self.path} is not JSON: {exc}") from exc
        return data if isinstance(data, dict) else None

    async def save(self, data: dict[str, Any]) -> None:
        try:
            await asyncio.to_thread(write_atomic, self.path, orjson.dumps(data))
        except OSError as exc:
            raise ThresholdStoreError(f"cannot write {self.path}: {describe(exc)}") from exc


class RedisThresholdStore:
    """One Redis key holding the JSON document (on the gateway's one Redis client; on a
    cluster, on the master of that key's slot: one small key read every
    ``THRESHOLD_POLL_SECONDS`` by every process)."""

    def __init__(self, client: RedisClient) -> None:
        self._client = client

    async def load(self) -> dict[str, Any] | None:
        try:
            raw = await self._client.get(REDIS_KEY)
            data = orjson.loads(raw) if raw else None
        except _READ_ERRORS as exc:
            raise ThresholdStoreError(f"cannot read θ from redis: {describe(exc)}") from exc
        return data if isinstance(data, dict) else None

    async def save(self, data: dict[str, Any]) -> None:
        try:
            await self._client.set(REDIS_KEY, orjson.dumps(data))
        except REDIS_ERRORS as exc:
            raise ThresholdStoreError(f"cannot write θ to redis: {describe(exc)}") from exc


async def follow(thresholds: Thresholds, store: ThresholdStore) -> None:
    """Pick up changes made by any process (runs for the gateway's lifetime)."""
    while True:
        try:
            data = await store.load()
            if data is not None and data != thresholds.as_json():
                thresholds.replace(data)
                log.info("θ updated from the shared store: %s", data)
        except (ThresholdStoreError, InvalidRequestError) as exc:
            log.warning("cannot read thresholds from the shared store: %s", exc.message)
        await asyncio.sleep(THRESHOLD_POLL_SECONDS)
