"""The console's in-memory views: recent lookups and near misses, the θ preview, the traffic
timeline, the audit trail, and the replicas' prefix-cache counters."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from deja.errors import InvalidRequestError
from deja.observability.audit import AuditTrail
from deja.observability.lookups import BINS, Candidate, LookupSample, RecentLookups
from deja.observability.metrics import Metrics
from deja.observability.stats import Stats
from deja.observability.timeline import Counts, Timeline, difference, read_counts
from deja.request import Outcome
from deja.semantic.cutoffs import parse_table
from deja.semantic.preview import preview, would_serve
from deja.tenancy.thresholds import Thresholds
from deja.upstream.health import parse_vllm_metrics
from deja.upstream.pool import ReplicaPool

TABLE = parse_table(
    {
        "k": 2,
        "cosine_floor": 0.7,
        "decision": "verifier",
        "table": [
            {"precision": 0.80, "tau": 0.50, "hit_rate": 0.45},
            {"precision": 0.85, "tau": 0.60, "hit_rate": 0.40},
            {"precision": 0.90, "tau": 0.75, "hit_rate": 0.30},
            {"precision": 0.95, "tau": 0.90, "hit_rate": 0.10},
            {"precision": 0.97, "tau": None, "hit_rate": None},
        ],
    },
    Path("t.json"),
)


def sample(
    similarity: float | None,
    score: float | None,
    served: bool = False,
    tenant: str = "t",
    model: str = "m",
) -> LookupSample:
    return LookupSample(1.0, tenant, model, None, similarity, score, served)


def candidate(similarity: float, score: float | None) -> Candidate:
    return Candidate("asked?", "cached?", "e" * 64, similarity, score)


def test_a_miss_just_under_the_cut_off_is_a_near_miss_and_others_are_not() -> None:
    recent = RecentLookups(margin=0.1)
    recent.record(sample(0.9, 0.80), candidate(0.9, 0.80), "tau", 0.85)  # 0.05 under τ
    recent.record(sample(0.9, 0.70), candidate(0.9, 0.70), "tau", 0.85)  # 0.15 under: too far
    recent.record(sample(0.9, 0.90, served=True), candidate(0.9, 0.9), "tau", 0.85)
    recent.record(sample(0.66, None), candidate(0.66, None), "theta", 0.70)  # under θ by 0.04
    recent.record(sample(None, None), None, "theta", 0.70)  # nothing in scope
    misses = recent.near_misses()
    assert [(m.cut, m.gap) for m in misses] == [
        ("theta", pytest.approx(0.04)),
        ("tau", pytest.approx(0.05)),
    ]
    assert recent.near_misses(margin=0.045)[0].cut == "theta"
    assert recent.near_misses(tenant="other") == []
    row = misses[1].as_json()
    assert row["question"] == "asked?" and row["cached_question"] == "cached?"
    assert row["score"] == 0.8 and row["cutoff"] == 0.85
    assert len(recent.samples) == 5


def test_the_rings_are_bounded_and_texts_cut() -> None:
    recent = RecentLookups(size=3, near_size=2)
    long = Candidate("q" * 2000, "c" * 2000, "e" * 64, 0.69, None)
    for _ in range(5):
        recent.record(sample(0.69, None), long, "theta", 0.70)
    assert len(recent.samples) == 3 and len(recent.near) == 2
    assert len(recent.near[0].question) == 500


def test_histograms_split_served_and_missed_over_fixed_bins() -> None:
    recent = RecentLookups()
    recent.record(sample(0.99, 0.95, served=True))
    recent.record(sample(0.99, 0.40))
    recent.record(sample(1.0, None))  # exactly 1.0 lands in the last bin
    recent.record(sample(None, None))
    h = recent.histograms()
    assert h["lookups"] == 4 and h["no_candidate"] == 1
    assert len(h["similarity"]) == BINS
    last = h["similarity"][-1]
    assert (last["served"], last["missed"]) == (1, 2)
    assert sum(b["served"] + b["missed"] for b in h["score"]) == 2
    assert recent.histograms(tenant="nobody")["lookups"] == 0


def test_would_serve_follows_theta_then_tau_and_admits_what_it_cannot_know() -> None:
    th = Thresholds(global_=0.7)
    th.precision.global_ = 0.90  # τ 0.75
    assert would_serve(sample(0.8, 0.8), th, TABLE) is True
    assert would_serve(sample(0.8, 0.7), th, TABLE) is False
    assert would_serve(sample(0.6, 0.99), th, TABLE) is False  # under θ
    assert would_serve(sample(0.8, None), th, TABLE) is None  # never verified
    assert would_serve(sample(None, None), th, TABLE) is False
    assert would_serve(sample(0.8, None), th, None) is True  # cosine alone


def test_preview_of_a_stricter_target_and_a_per_tenant_theta() -> None:
    th = Thresholds(global_=0.7)
    th.precision.global_ = 0.85  # τ 0.60
    samples = [
        sample(0.95, 0.95, served=True),
        sample(0.90, 0.70, served=True),
        sample(0.80, 0.55),
        sample(0.65, None),
    ]
    report = preview(samples, th, {"precision": {"global": 0.95}}, TABLE)
    assert report["lookups"] == 4
    assert report["observed"] == {"served": 2, "hit_rate": 0.5}
    assert report["current"] == {"served": 2, "unknown": 0, "hit_rate": 0.5}
    assert report["proposed"] == {"served": 1, "unknown": 0, "hit_rate": 0.25}
    assert report["calibration"]["current"] == {"target": 0.85, "tau": 0.60, "hit_rate": 0.40}
    assert report["calibration"]["proposed"] == {"target": 0.95, "tau": 0.90, "hit_rate": 0.10}
    # A lower θ for tenant t lets the 0.65 lookup in, but it was never verified: unknown.
    lower = preview(samples, th, {"tenants": {"t": 0.6}}, TABLE, tenant="t")
    assert lower["proposed"]["unknown"] == 1
    assert lower["theta"] == {"current": 0.7, "proposed": 0.6}
    assert th.tenants == {}  # nothing was applied to the live thresholds


def test_preview_of_an_unreachable_target_serves_nothing() -> None:
    th = Thresholds(global_=0.7)
    report = preview([sample(0.99, 0.99)], th, {"precision": {"global": 0.99}}, TABLE)
    assert report["proposed"]["served"] == 0
    assert report["calibration"]["proposed"] == {"target": 0.99, "tau": None, "hit_rate": 0.0}


def test_preview_rejects_a_value_saving_would_reject() -> None:
    with pytest.raises(InvalidRequestError):
        preview([], Thresholds(global_=0.7), {"global": 1.5}, TABLE)


def test_timeline_differences_counts_and_survives_a_counter_reset() -> None:
    before = Counts({"exact": 3, "miss": 5}, 10.0, 1.0, {"r1": (100.0, 40.0), "r2": (50.0, 0.0)})
    after = Counts({"exact": 5, "miss": 6, "semantic": 1}, 25.0, 1.5, {"r1": (200.0, 90.0)})
    p = difference(before, after, at=100.0, seconds=10.0)
    assert p.outcomes == {"exact": 2, "miss": 1, "semantic": 1}
    assert (p.tokens_saved, p.seconds_saved) == (15.0, 0.5)
    assert p.prefix_hit_rate == {"r1": 0.5}
    restarted = difference(after, Counts({"exact": 1}, 0.0, 0.0, {"r1": (10.0, 5.0)}), 1, 1)
    assert restarted.outcomes == {"exact": 0} and restarted.prefix_hit_rate == {"r1": None}
    assert p.as_json()["requests"] == 4


def test_timeline_samples_the_gateway_counts_into_a_bounded_ring() -> None:
    stats, metrics = Stats(), Metrics()
    pool = ReplicaPool(["http://127.0.0.1:1"], cooldown=10.0, scrape_interval=5.0)
    timeline = Timeline(lambda: read_counts(stats, metrics, pool.samples), interval=10, size=2)
    stats.record("a", Outcome.EXACT)
    stats.record("a", Outcome.MISS)
    metrics.served_from_cache(12, 0.01)
    first = timeline.sample(now=1000.0)
    assert first.outcomes["exact"] == 1 and first.outcomes["miss"] == 1
    assert first.tokens_saved == 12 and math.isclose(first.seconds_saved, 0.12)
    replica = pool.replicas[0]
    replica.metrics.prefix_cache_queries, replica.metrics.prefix_cache_hits = 80.0, 60.0
    assert timeline.sample(now=1010.0).prefix_hit_rate == {replica.name: 0.75}
    timeline.sample(now=1020.0)
    doc: dict[str, Any] = timeline.as_json()
    assert [p["at"] for p in doc["points"]] == [1010.0, 1020.0]
    assert doc["totals"]["requests"] == 2 and doc["totals"]["tokens_saved"] == 12


def test_audit_trail_newest_first_filtered_by_action_or_family() -> None:
    trail = AuditTrail(size=3)
    for action in ("cache.flush", "threshold.set", "cache.delete", "cache.invalidate"):
        trail.add({"action": action})
    assert [r["action"] for r in trail.recent()] == [
        "cache.invalidate",
        "cache.delete",
        "threshold.set",
    ]
    assert [r["action"] for r in trail.recent(action="cache")] == [
        "cache.invalidate",
        "cache.delete",
    ]
    assert trail.recent(limit=1, action="threshold.set") == [{"action": "threshold.set"}]
    assert trail.recent(action="cach") == []


def test_prefix_cache_counters_are_scraped() -> None:
    text = (
        'vllm:prefix_cache_queries_total{model_name="m"} 300.0\n'
        'vllm:prefix_cache_hits_total{model_name="m"} 120.0\n'
        'vllm:prefix_cache_queries_total{model_name="n"} 100.0\n'
        "vllm:num_requests_running 2\n"
    )
    m = parse_vllm_metrics(text, 1.0)
    assert (m.prefix_cache_queries, m.prefix_cache_hits, m.running) == (400.0, 120.0, 2.0)
