"""The learning loop's arithmetic (issue 24): per-entry cut-offs from evidence, and per-tenant
targets raised by live precision."""

from __future__ import annotations

from typing import Any

from deja.semantic.correction import Correction
from deja.semantic.evidence import Evidence

TAU, FLOOR, PRIOR, TARGET = 0.60, 0.30, 0.80, 0.90


def test_an_entry_without_evidence_keeps_the_calibrated_cut_off() -> None:
    evidence = Evidence()
    assert evidence.cutoff("e", TAU, FLOOR, PRIOR, TARGET) == TAU
    evidence.record("e", score=0.5, correct=True, source="judge")
    assert evidence.cutoff("e", TAU, FLOOR, PRIOR, TARGET) == TAU  # one verdict is not enough


def test_a_wrong_verdict_raises_the_cut_off_past_its_score_whatever_else() -> None:
    evidence = Evidence()
    for _ in range(60):
        evidence.record("e", score=0.4, correct=True, source="judge")
    evidence.record("e", score=0.72, correct=False, source="shadow")
    assert evidence.cutoff("e", TAU, FLOOR, PRIOR, TARGET) == 0.72 + evidence.step


def test_many_right_grey_verdicts_lower_the_cut_off_to_the_lowest_judged_right() -> None:
    evidence = Evidence(per_entry=64)
    scores = [0.35 + 0.005 * i for i in range(50)]
    for score in scores[:10]:
        evidence.record("e", score=score, correct=True, source="judge")
    assert evidence.cutoff("e", TAU, FLOOR, PRIOR, TARGET) == TAU  # 10 of 10: not yet
    for score in scores[10:]:
        evidence.record("e", score=score, correct=True, source="judge")
    assert evidence.cutoff("e", TAU, FLOOR, PRIOR, TARGET) == min(scores)


def test_evidence_is_bounded_per_entry_and_in_entries() -> None:
    evidence = Evidence(per_entry=4, entries=3)
    for n in range(10):
        evidence.record("e", score=0.5, correct=n % 2 == 0, source="judge")
    assert len(evidence.of("e")) == 4
    for name in ("a", "b", "c"):
        evidence.record(name, score=0.5, correct=True, source="judge")
    assert len(evidence) == 3 and "e" not in evidence  # the least recently told went


def test_a_relabelled_pair_counts_once_as_last_labelled() -> None:
    evidence = Evidence()
    evidence.record("e", score=0.7, correct=False, source="label", key="pair-1")
    assert evidence.cutoff("e", TAU, FLOOR, PRIOR, TARGET) == 0.7 + evidence.step
    # the operator changes their mind: the pair's first label no longer holds the entry up
    evidence.record("e", score=0.7, correct=True, source="label", key="pair-1")
    assert [v.correct for v in evidence.of("e")] == [True]
    assert evidence.cutoff("e", TAU, FLOOR, PRIOR, TARGET) == TAU
    # another pair's label, and keyless verdicts, are kept beside it
    evidence.record("e", score=0.45, correct=True, source="label", key="pair-2")
    evidence.record("e", score=0.4, correct=True, source="judge")
    evidence.record("e", score=0.4, correct=True, source="judge")
    evidence.record("e", score=0.5, correct=True, source="label", key="pair-1")
    assert [v.source for v in evidence.of("e")] == ["label", "judge", "judge", "label"]
    # removing the label withdraws it; the others stay
    assert evidence.withdraw("e", "pair-1") and not evidence.withdraw("e", "pair-1")
    assert [v.key for v in evidence.of("e")] == ["pair-2", None, None]
    assert not evidence.withdraw("unknown", "pair-2")


def correction(**kw: Any) -> tuple[Correction, list[dict[str, Any]]]:
    moves: list[dict[str, Any]] = []
    made = Correction(high=0.95, window=50, min_verdicts=20, on_move=moves.append, **kw)
    return made, moves


def test_live_precision_under_the_target_raises_it_and_starts_a_new_window() -> None:
    fix, moves = correction()
    for n in range(20):
        fix.observe("t", n % 4 != 0, TARGET)  # 0.75 measured: the interval is under 0.90
    assert fix.target("t", TARGET) == TARGET + 0.01 and fix.target("u", TARGET) == TARGET
    assert moves[0]["from"] == TARGET and moves[0]["to"] == 0.91
    assert fix.as_json()["tenants"]["t"]["verdicts"] == 0  # a fresh window


def test_precision_whose_interval_reaches_the_target_moves_nothing() -> None:
    fix, moves = correction()
    for n in range(40):
        fix.observe("t", n % 10 != 0, TARGET)  # 0.90 measured
    assert moves == [] and fix.target("t", TARGET) == TARGET


def test_the_raise_stops_at_the_table_highest_target_and_a_pin_holds() -> None:
    fix, moves = correction(step=0.02)
    for _ in range(10):
        for _ in range(20):
            fix.observe("t", False, TARGET)
    assert fix.target("t", TARGET) == 0.95 and len(moves) == 3
    fix.reset("t")
    fix.pin("t", True)
    for _ in range(40):
        fix.observe("t", False, TARGET)
    assert fix.target("t", TARGET) == TARGET and len(moves) == 3
