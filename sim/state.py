"""State of one simulator app and the base of its route-handler groups.

:class:`SimState` is everything one app holds (``app.state.sim``); :class:`SimHandlers` is the
base of the classes whose methods are the app's route handlers (:mod:`sim.generation`
and :mod:`sim.server`).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from sim.config import SimConfig
from sim.labels import Labels
from sim.loop import SimEngine
from sim.metrics import SimMetrics
from sim.responses import error_body, json_response

__all__ = ["FaultSettings", "SimHandlers", "SimState"]


class FaultSettings(BaseModel):
    """Faults a running replica injects; changed at runtime through ``PUT /sim/faults``."""

    model_config = ConfigDict(extra="forbid")

    error_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    error_status: int = Field(default=500, ge=400, le=599)
    added_latency_ms: float = Field(default=0.0, ge=0.0)
    stall_ms: float = Field(default=0.0, ge=0.0)
    kv_events_drop: int = Field(default=0, ge=0)
    """Leave this many next KV event batches off the PUB socket (a replay still has them)."""
    kv_events_paused: bool = False
    """Publish no KV events at all (and buffer none) until set back."""


@dataclass
class SimState:
    """Everything one simulator app holds (reachable as ``app.state.sim``)."""

    config: SimConfig
    engine: SimEngine
    metrics: SimMetrics
    faults: FaultSettings
    rng: random.Random
    #: The labelled judge (``judge_labels``), or None.
    labels: Labels | None = None
    created: int = field(default_factory=lambda: int(time.time()))


class SimHandlers:
    """Base of a group of route handlers sharing one app's :class:`SimState`."""

    def __init__(self, state: SimState) -> None:
        self.state = state
        self.config = state.config
        self.engine = state.engine
        self.metrics = state.metrics
        self.replica_header = {"X-Sim-Replica": state.config.replica_name}

    def error(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        param: str | None = None,
        code: str | int | None = None,
    ) -> Response:
        """An OpenAI-shaped JSON error response carrying the replica header."""
        return json_response(error_body(message, type_, param, code), status, self.replica_header)
