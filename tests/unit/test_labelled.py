"""The labelled pairs ops mark in the console: bounded, persisted as JSON lines, reloaded, shared
by processes on one data dir, handed to subscribers, exported as ``deja calibrate`` reads."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from deja.semantic.labelled import (
    FILE_NAME,
    TEXT_LIMIT,
    Label,
    LabelledPairs,
    calibration_jsonl,
    pair_id,
)
from deja.semantic.pairs import read_pairs
from tests.support import until


def label(n: int = 0, same: bool = True, tenant: str = "t", at: float | None = None) -> Label:
    return Label(
        at=float(n) if at is None else at,
        tenant=tenant,
        model="m",
        question=f"asked {n}?",
        cached_question=f"cached {n}?",
        entry_id="e" * 64,
        similarity=0.91,
        score=None if n % 2 else 0.7,
        same=same,
        who="admin:abcd1234",
    )


async def test_labels_are_listed_newest_first_and_filtered_by_tenant(tmp_path: Path) -> None:
    pairs = LabelledPairs.load(tmp_path / FILE_NAME)
    await pairs.add(label(1))
    await pairs.add(label(2, tenant="other"))
    await pairs.add(label(3))
    assert [x.question for x in await pairs.recent()] == ["asked 3?", "asked 2?", "asked 1?"]
    assert [x.question for x in await pairs.recent(tenant="t", limit=1)] == ["asked 3?"]


async def test_labelling_a_pair_again_replaces_its_label(tmp_path: Path) -> None:
    pairs = LabelledPairs.load(tmp_path / FILE_NAME)
    await pairs.add(label(1, same=True))
    await pairs.add(label(2))
    await pairs.add(label(1, same=False, at=9.0))
    listed = await pairs.recent()
    assert [(x.question, x.same) for x in listed] == [("asked 1?", False), ("asked 2?", True)]
    assert pairs.get("t", "m", "asked 1?", "cached 1?") == listed[0]
    assert listed[0].id == pair_id("t", "m", "asked 1?", "cached 1?")


async def test_the_store_is_bounded_oldest_first(tmp_path: Path) -> None:
    pairs = LabelledPairs.load(tmp_path / FILE_NAME, size=3)
    for n in range(5):
        await pairs.add(label(n))
    assert [x.question for x in await pairs.recent()] == ["asked 4?", "asked 3?", "asked 2?"]
    again = LabelledPairs.load(tmp_path / FILE_NAME, size=3)
    assert len(again) == 3 and again.get("t", "m", "asked 1?", "cached 1?") is None


async def test_labels_and_removals_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "sub" / FILE_NAME
    pairs = LabelledPairs.load(path)
    await pairs.add(label(1))
    await pairs.add(label(2, same=False))
    removed = await pairs.remove(label(1).id)
    assert removed is not None and removed.question == "asked 1?"
    assert await pairs.remove(label(1).id) is None
    again = LabelledPairs.load(path)
    assert [(x.question, x.same, x.score) for x in await again.recent()] == [
        ("asked 2?", False, 0.7)
    ]
    assert (await again.recent())[0] == label(2, same=False)


async def test_the_file_is_compacted_past_twice_the_bound(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    pairs = LabelledPairs.load(path, size=2)
    for n in range(5):
        await pairs.add(label(n))
    lines = path.read_text().splitlines()  # the fifth line passed 2 × 2: rewritten
    assert [json.loads(x)["question"] for x in lines] == ["asked 3?", "asked 4?"]
    assert len(LabelledPairs.load(path, size=2)) == 2


async def test_a_torn_line_is_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    pairs = LabelledPairs.load(path)
    await pairs.add(label(1))
    with path.open("a") as handle:
        handle.write('{"at": 1, "tenant": "t", "quest')
    again = LabelledPairs.load(path)
    assert again.skipped == 1 and len(again) == 1


async def test_another_process_s_labels_are_read_through_the_file(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    first, second = LabelledPairs.load(path), LabelledPairs.load(path)
    await first.add(label(1))
    await second.add(label(2))
    await first.remove(label(2).id)
    assert [x.question for x in await second.recent()] == ["asked 1?"]


async def test_subscribers_get_each_new_label_until_they_unsubscribe() -> None:
    pairs = LabelledPairs(None)
    seen: list[Label] = []
    gone: list[Label] = []
    stop = pairs.subscribe(seen.append, gone.append)
    await pairs.add(label(1))
    await pairs.add(label(1, same=False))
    await pairs.remove(label(1).id)
    await pairs.remove(label(1).id)  # nothing left to remove: no call
    stop()
    await pairs.add(label(2))
    await pairs.remove(label(2).id)
    assert [(x.question, x.same) for x in seen] == [("asked 1?", True), ("asked 1?", False)]
    assert [(x.question, x.same) for x in gone] == [("asked 1?", False)]
    assert all(isinstance(x, Label) for x in seen)


def heard(seen: list[tuple[Label, bool]]) -> list[str]:
    """Each change as "+question" (added) or "-question" (removed), " ≠" for "different"."""
    return [("+" if added else "-") + x.question + ("" if x.same else " ≠") for x, added in seen]


def listen(pairs: LabelledPairs, *, replay: bool = False) -> list[tuple[Label, bool]]:
    seen: list[tuple[Label, bool]] = []
    pairs.subscribe(
        lambda x: seen.append((x, True)), lambda x: seen.append((x, False)), replay=replay
    )
    return seen


async def test_a_subscriber_hears_the_labels_already_on_disk_when_it_asks(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    before = LabelledPairs.load(path)
    await before.add(label(1))
    await before.add(label(2, same=False))
    restarted = LabelledPairs.load(path)
    assert listen(restarted) == []
    assert heard(listen(restarted, replay=True)) == ["+asked 1?", "+asked 2? ≠"]


async def test_another_process_s_changes_reach_the_subscribers(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    mine, other = LabelledPairs.load(path), LabelledPairs.load(path)
    seen = listen(mine)
    await other.add(label(1))
    await other.add(label(2))
    assert seen == []  # nothing until this process reads the file
    await mine.refresh()
    await mine.refresh()  # the file did not move since: nothing new
    assert heard(seen) == ["+asked 1?", "+asked 2?"]
    seen.clear()
    await other.add(label(1, same=False))  # relabelled
    await other.remove(label(2).id)
    await mine.add(label(3))  # a call of this process reads the file first
    assert heard(seen) == ["-asked 2?", "+asked 1? ≠", "+asked 3?"]


async def test_labels_dropped_past_the_bound_are_heard_as_removed(tmp_path: Path) -> None:
    pairs = LabelledPairs.load(tmp_path / FILE_NAME, size=2)
    seen = listen(pairs)
    for n in range(3):
        await pairs.add(label(n))
    assert heard(seen) == ["+asked 0?", "+asked 1?", "-asked 0?", "+asked 2?"]


async def test_follow_brings_another_process_s_labels_without_a_call(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    mine, other = LabelledPairs.load(path), LabelledPairs.load(path)
    seen = listen(mine)
    task = asyncio.create_task(mine.follow(0.01))
    try:
        await other.add(label(1))
        await until(lambda: bool(seen), within=2.0)
    finally:
        task.cancel()
    assert heard(seen) == ["+asked 1?"]


async def test_texts_are_cut_and_the_cut_pair_is_still_found() -> None:
    pairs = LabelledPairs(None)
    long = "x" * (TEXT_LIMIT + 50)
    saved = await pairs.add(
        Label(1.0, "t", "m", long, long, "e", None, None, True, "admin:abcd1234")
    )
    assert len(saved.question) == len(saved.cached_question) == TEXT_LIMIT
    assert pairs.get("t", "m", long, long) == saved
    assert pairs.get("t", "m", long[:TEXT_LIMIT], long[:TEXT_LIMIT]) == saved


async def test_the_export_is_what_deja_calibrate_reads(tmp_path: Path) -> None:
    labels = [label(2, same=False, at=5.0), label(1, same=True, at=1.0)]
    out = tmp_path / "pairs.jsonl"
    out.write_bytes(calibration_jsonl(labels))
    rows = read_pairs(out)
    assert [(r.a, r.b, r.duplicate) for r in rows] == [
        ("cached 1?", "asked 1?", True),
        ("cached 2?", "asked 2?", False),
    ]
