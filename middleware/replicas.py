"""The replica pool: which vLLM replicas exist, which models they serve, which are usable now.

Selection is round-robin over the replicas that serve the model and are not cooling down after a
refused connection. The routing issue replaces the policy; the pool's shape stays.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from app.errors import NoHealthyReplicaError


@dataclass(slots=True)
class Replica:
    """One upstream vLLM (or simulated) replica."""

    url: str
    simulated: bool = False
    down_until: float = 0.0
    models: list[dict[str, Any]] = field(default_factory=list)
    last_error: str | None = None

    @property
    def name(self) -> str:
        return urlsplit(self.url).netloc

    def usable(self, now: float) -> bool:
        return now >= self.down_until

    def serves(self, model: str) -> bool:
        return any(entry.get("id") == model for entry in self.models)


class ReplicaPool:
    """Round-robin selection among usable replicas serving a model."""

    def __init__(self, urls: list[str], *, cooldown: float, simulated: bool = False) -> None:
        self.replicas = [Replica(url=url, simulated=simulated) for url in urls]
        self._cooldown = cooldown
        self._cursor = 0
        self._known: frozenset[str] = frozenset()
        self.models_refreshed_at = 0.0

    def candidates(self, model: str) -> list[Replica]:
        """Replicas to try for ``model``, in order: the round-robin pick first, then the rest.

        Replicas whose served models are not yet known are included, so a pool whose model
        list could not be read still forwards.
        """
        now = time.monotonic()
        serving = [r for r in self.replicas if r.serves(model) or not r.models]
        usable = [r for r in serving if r.usable(now)]
        if not usable:
            raise NoHealthyReplicaError(f"no healthy replica serves model {model!r} right now")
        start = self._cursor % len(usable)
        self._cursor += 1
        return usable[start:] + usable[:start]

    def mark_failed(self, replica: Replica, reason: str) -> None:
        replica.down_until = time.monotonic() + self._cooldown
        replica.last_error = reason

    def mark_ok(self, replica: Replica) -> None:
        if replica.down_until:
            replica.down_until = 0.0
            replica.last_error = None

    def set_models(self, replica: Replica, models: list[dict[str, Any]]) -> None:
        """Record what ``replica`` serves (from its ``/v1/models``)."""
        replica.models = models
        self._known = frozenset(str(m.get("id")) for r in self.replicas for m in r.models)

    def known_models(self) -> frozenset[str]:
        """Every model id some replica serves (kept current by ``set_models``)."""
        return self._known

    def model_list(self) -> list[dict[str, Any]]:
        """The models the replicas serve, once each, as OpenAI model objects."""
        seen: dict[str, dict[str, Any]] = {}
        for replica in self.replicas:
            for entry in replica.models:
                seen.setdefault(str(entry.get("id")), entry)
        return list(seen.values())
