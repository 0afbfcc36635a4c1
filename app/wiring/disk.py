"""The data disk at start-up (issue 19): one line of what this configuration needs there
against what is free, Qdrant Edge left off when its collections cannot be created, and the
``DiskSpace`` guard that the Edge stores, the pipeline and ``/readyz`` share while serving.
``Gateway.build`` calls it once the embedder (which names the collections) is loaded."""

from __future__ import annotations

import logging

from app.wiring.stores import uses_data_dir_exclusively
from config.settings import Settings
from deja.corpus.index import CHUNKS
from deja.diskspace import MIB, DiskCollector, DiskSpace, startup_line
from deja.embedding.base import Embedder
from deja.observability.metrics import Metrics
from deja.semantic.index import QUESTIONS

log = logging.getLogger("deja")


def edge_parts(settings: Settings, embedder: Embedder | None) -> dict[str, str]:
    """Setting to turn off → the Qdrant Edge collection it would open under data_dir."""
    if embedder is None or settings.qdrant_url:
        return {}
    parts: dict[str, str] = {}
    if settings.cache_enabled and settings.semantic_enabled:
        parts["semantic_enabled"] = QUESTIONS.collection(embedder.model_id, embedder.dim)
    if settings.corpora_enabled:
        parts["corpora_enabled"] = CHUNKS.collection(embedder.model_id, embedder.dim)
    return parts


def data_disk(
    settings: Settings, embedder: Embedder | None, metrics: Metrics
) -> tuple[Settings, DiskSpace | None]:
    """The guard of data_dir's disk (None when this process keeps nothing there: Redis and a
    Qdrant server), and the settings to run with: the Edge parts whose collections do not fit
    above the reserve turned off, said in the one start-up line."""
    if not uses_data_dir_exclusively(settings):
        return settings, None
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    space = DiskSpace(settings.data_dir, settings.disk_reserve_mb * MIB)
    metrics.registry.register(DiskCollector(space))
    root = settings.data_dir / "qdrant-edge"
    new = {
        flag: name
        for flag, name in edge_parts(settings, embedder).items()
        if not (root / name / "edge_config.json").exists()
    }
    fits, line = startup_line(space, len(new))
    if fits:
        log.info("%s", line)
        return settings, space
    log.error("%s", line)
    return settings.model_copy(update=dict.fromkeys(new, False)), space
