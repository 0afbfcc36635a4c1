"""The pairs behind the console's figures: the recent served pairs, and the lookups a θ or
precision change would start or stop serving."""

from __future__ import annotations

from deja.observability.lookups import TEXT_LIMIT, Candidate, LookupSample, RecentLookups
from deja.semantic.preview import preview
from deja.tenancy.thresholds import Thresholds
from tests.unit.test_console_rings import TABLE


def looked(
    question: str,
    similarity: float,
    score: float | None,
    served: bool = False,
    tenant: str = "t",
    entry: str = "e1",
) -> LookupSample:
    best = Candidate(question, f"cached for {question}", entry, similarity, score)
    return LookupSample(1.0, tenant, "m", None, similarity, score, served, best)


def test_served_pairs_are_the_recent_hits_newest_first_with_both_questions() -> None:
    recent = RecentLookups()
    recent.record(looked("one?", 0.95, 0.9, served=True))
    recent.record(looked("two?", 0.80, 0.5))
    recent.record(LookupSample(2.0, "t", "m", None, None, None, False))  # nothing in scope
    recent.record(looked("three?", 0.93, 0.8, served=True, tenant="u"))
    assert [s.pair_json()["question"] for s in recent.served()] == ["three?", "one?"]
    only = recent.served(tenant="t")
    assert [s.pair_json() for s in only] == [
        {
            "at": 1.0,
            "tenant": "t",
            "model": "m",
            "question": "one?",
            "cached_question": "cached for one?",
            "entry_id": "e1",
            "similarity": 0.95,
            "score": 0.9,
        }
    ]
    assert recent.served(limit=1)[0].pair_json()["question"] == "three?"


def test_a_sample_keeps_its_questions_cut() -> None:
    recent = RecentLookups()
    recent.record(looked("q" * (TEXT_LIMIT + 9), 0.95, 0.9, served=True))
    kept = recent.served()[0].candidate
    assert kept is not None and len(kept.question) == TEXT_LIMIT


def test_a_laxer_target_lists_what_it_would_start_serving_highest_score_first() -> None:
    th = Thresholds(global_=0.7)
    th.precision.global_ = 0.90  # τ 0.75
    samples = [
        looked("served already?", 0.95, 0.9, served=True),
        looked("close?", 0.90, 0.70),
        looked("closer?", 0.90, 0.74, entry="e2"),
        looked("closer?", 0.90, 0.74, entry="e2"),  # asked twice: one row, two lookups
        looked("far?", 0.90, 0.40),
        looked("never verified?", 0.65, None),
    ]
    report = preview(samples, th, {"precision": {"global": 0.85}}, TABLE)  # τ 0.60
    assert [(r["question"], r["lookups"]) for r in report["start"]] == [
        ("closer?", 2),
        ("close?", 1),
    ]
    assert report["start"][0]["cached_question"] == "cached for closer?"
    assert report["start"][0]["entry_id"] == "e2" and report["start"][0]["score"] == 0.74
    assert report["start_total"] == 2 and report["stop"] == [] and report["stop_total"] == 0


def test_a_stricter_theta_lists_what_it_would_stop_serving() -> None:
    th = Thresholds(global_=0.7)
    th.precision.global_ = 0.90  # τ 0.75: both served now
    samples = [looked("kept?", 0.97, 0.95, served=True), looked("lost?", 0.90, 0.80, served=True)]
    report = preview(samples, th, {"global": 0.95}, TABLE)
    assert [r["question"] for r in report["stop"]] == ["lost?"]
    assert report["start"] == []


def test_the_lists_are_bounded() -> None:
    th = Thresholds(global_=0.7)
    th.precision.global_ = 0.90
    samples = [looked(f"q{i}?", 0.9, 0.61 + i / 1000) for i in range(80)]
    report = preview(samples, th, {"precision": {"global": 0.85}}, TABLE)
    assert report["start_total"] == 80 and len(report["start"]) == 50
    assert report["start"][0]["question"] == "q79?"
