"""Consistent hashing with bounded loads: construction, walks, load bounds, key movement."""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterator, Mapping
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deja.upstream.ring import (
    HashRing,
    NoReplicaError,
    Placement,
    capacity,
    hash64,
    least_loaded,
)

replica_ids = st.lists(
    st.text(alphabet="abcdef0123456789.:", min_size=1, max_size=12), min_size=1, max_size=8
).map(lambda ids: list(dict.fromkeys(ids)))
weights_st = st.floats(min_value=0.25, max_value=4.0)


HASH_OF_FIRST_VNODE = 0x064B33CA554F959D  # blake2b-64 of "10.0.0.1:8000#0", pinned


def names(n: int) -> list[str]:
    return [f"10.0.0.{i}:8000" for i in range(1, n + 1)]


def keys(count: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.getrandbits(64):016x}" for _ in range(count)]


def exact_bound(total: int, weight: float, total_weight: float, epsilon: float) -> int:
    """ceil((1 + ε) · total · w / W) in exact arithmetic (ε as written, e.g. 0.1 = 1/10)."""
    value = (1 + Fraction(str(epsilon))) * total * Fraction(weight) / Fraction(total_weight)
    return math.ceil(value)


# --------------------------------------------------------------------------- construction


@given(replica_ids, st.data())
@settings(max_examples=40, deadline=None)
def test_every_replica_is_on_the_ring_with_weighted_vnodes(
    ids: list[str], data: st.DataObject
) -> None:
    weights = {r: data.draw(weights_st) for r in ids}
    ring = HashRing(ids, weights, vnodes_per_weight=40)
    assert set(ring.replicas) == set(ids)
    assert len(ring) == len(ids)
    for replica in ids:
        assert replica in ring
        assert ring.vnodes(replica) == max(1, round(40 * weights[replica]))
    share = ring.share_of_keys()
    assert set(share) == set(ids)
    assert sum(share.values()) == pytest.approx(1.0, abs=1e-12)
    assert all(s > 0 for s in share.values())


def test_default_weight_is_160_vnodes() -> None:
    ring = HashRing(names(3), {names(3)[0]: 2.0})
    assert [ring.vnodes(r) for r in names(3)] == [320, 160, 160]
    assert ring.weights == {names(3)[0]: 2.0, names(3)[1]: 1.0, names(3)[2]: 1.0}


def test_share_of_keys_is_roughly_proportional_to_weight() -> None:
    weights = {"a:1": 1.0, "b:1": 2.0, "c:1": 3.0, "d:1": 1.0, "e:1": 1.0}
    share = HashRing(list(weights), weights).share_of_keys()
    total = sum(weights.values())
    for replica, weight in weights.items():
        assert share[replica] == pytest.approx(weight / total, rel=0.3)


def test_share_of_keys_matches_where_keys_land() -> None:
    ring = HashRing(names(5))
    landed = Counter(ring.home(k) for k in keys(20_000))
    for replica, share in ring.share_of_keys().items():
        assert landed[replica] / 20_000 == pytest.approx(share, abs=0.015)


@given(replica_ids, st.lists(st.text(max_size=20), min_size=1, max_size=20))
@settings(max_examples=40, deadline=None)
def test_rings_are_deterministic_across_instances_and_input_order(
    ids: list[str], sample: list[str]
) -> None:
    one, two = HashRing(ids, vnodes_per_weight=20), HashRing(ids[::-1], vnodes_per_weight=20)
    for key in sample:
        assert list(one.walk(key)) == list(two.walk(key))
    assert one.share_of_keys() == two.share_of_keys()


def test_hash64_is_stable() -> None:
    # A fixed value: the ring must hash identically in every process and on every machine.
    assert hash64("10.0.0.1:8000#0") == HASH_OF_FIRST_VNODE
    assert 0 <= hash64("x") < 2**64


@pytest.mark.parametrize(
    ("ids", "weights", "kwargs"),
    [
        (["a", "a"], None, {}),
        (["a", ""], None, {}),
        (["a"], {"b": 1.0}, {}),
        (["a"], {"a": 0.0}, {}),
        (["a"], {"a": -1.0}, {}),
        (["a"], {"a": math.nan}, {}),
        (["a"], {"a": math.inf}, {}),
        (["a"], None, {"vnodes_per_weight": 0}),
    ],
)
def test_invalid_rings_are_refused(
    ids: list[str], weights: dict[str, float] | None, kwargs: dict[str, int]
) -> None:
    with pytest.raises(ValueError):
        HashRing(ids, weights, **kwargs)


def test_empty_ring() -> None:
    ring = HashRing([])
    assert list(ring.walk("k")) == []
    assert ring.share_of_keys() == {}
    with pytest.raises(NoReplicaError):
        ring.home("k")
    with pytest.raises(NoReplicaError):
        ring.place("k", {}, [], 0.25)


# --------------------------------------------------------------------------- walk


@given(replica_ids, st.text(max_size=30))
@settings(max_examples=60, deadline=None)
def test_walk_yields_each_replica_once_starting_at_home(ids: list[str], key: str) -> None:
    ring = HashRing(ids, vnodes_per_weight=10)
    walked = list(ring.walk(key))
    assert sorted(walked) == sorted(ids)
    assert walked[0] == ring.home(key)


def test_walk_follows_ring_order() -> None:
    ring = HashRing(names(4), vnodes_per_weight=5)
    ring_order = ring._owners  # the owners of the sorted points
    for key in keys(50):
        index = next(i for i, p in enumerate([*ring._points, 2**64]) if p >= hash64(key))
        rotated = ring_order[index % len(ring_order) :] + ring_order[: index % len(ring_order)]
        assert list(ring.walk(key)) == list(dict.fromkeys(rotated))


# --------------------------------------------------------------------------- placement


def test_balanced_loads_keep_every_key_home() -> None:
    ring = HashRing(names(6))
    loads = dict.fromkeys(names(6), 10)
    for key in keys(500):
        assert ring.place(key, loads, set(names(6)), 0.25) == Placement(ring.home(key), "home")


def test_capacity_formula() -> None:
    # 4 equal replicas, 9 in flight, ε = 0.25: ceil(1.25 · 10 · 1/4) = ceil(3.125) = 4.
    assert capacity(9, 1.0, 4.0, 0.25) == 4
    # Float noise: 1.1 · 20 / 2 = 11.000000000000002 in floats, but the capacity is exactly 11.
    assert capacity(19, 1.0, 2.0, 0.1) == 11
    # A weight-2 replica among weights 1 + 2 + 1 gets half: ceil(1.5 · 8 · 2/4) = 6.
    assert capacity(7, 2.0, 4.0, 0.5) == 6


def test_full_home_spills_along_the_walk() -> None:
    ring = HashRing(names(4))
    key = keys(1)[0]
    home, second, third, _ = ring.walk(key)
    # 8 in flight + 1, ε = 0.25 → capacity ceil(1.25 · 9 / 4) = 3.
    loads = {home: 3, second: 3, third: 2}
    assert ring.place(key, loads, set(names(4)), 0.25) == Placement(third, "spill")
    loads = {home: 3, second: 2, third: 3}
    assert ring.place(key, loads, set(names(4)), 0.25) == Placement(second, "spill")


def test_unhealthy_replicas_are_skipped() -> None:
    ring = HashRing(names(5))
    for key in keys(200):
        order = list(ring.walk(key))
        healthy = order[2:]
        placed = ring.place(key, {}, healthy, 0.25)
        # The first healthy replica on the walk is the key's home while the home is down.
        assert placed == Placement(order[2], "home")
    with pytest.raises(NoReplicaError):
        ring.place("k", {}, [], 0.25)
    with pytest.raises(NoReplicaError):
        ring.place("k", {}, ["not-on-the-ring"], 0.25)


def test_unhealthy_loads_do_not_count_toward_capacity() -> None:
    ring = HashRing(names(2))
    key = keys(1)[0]
    home, other = ring.walk(key)
    # Only `home` is healthy: its capacity is ceil(1.25 · (2 + 1)) = 4 whatever `other` holds.
    assert ring.place(key, {home: 2, other: 1000}, [home], 0.25) == Placement(home, "home")


def test_infinite_epsilon_is_plain_consistent_hashing() -> None:
    ring = HashRing(names(3))
    key = keys(1)[0]
    home = ring.home(key)
    assert ring.place(key, {home: 10**6}, set(names(3)), math.inf) == Placement(home, "home")


@pytest.mark.parametrize("epsilon", [-0.1, math.nan])
def test_invalid_epsilon_is_refused(epsilon: float) -> None:
    with pytest.raises(ValueError):
        HashRing(names(2)).place("k", {}, names(2), epsilon)


def test_healthy_may_be_any_collection() -> None:
    ring = HashRing(names(3))
    loads = {names(3)[0]: 1}
    expected = ring.place("key", loads, set(names(3)), 0.1)
    for healthy in (names(3), tuple(names(3)), frozenset(names(3)), dict.fromkeys(names(3)).keys()):
        assert ring.place("key", loads, healthy, 0.1) == expected


class _LyingLoads(Mapping[str, int]):
    """Loads that read low while totals are summed, then high: inconsistent on purpose."""

    def __init__(self, replicas: list[str]) -> None:
        self._replicas = replicas
        self.reads = 0

    def __getitem__(self, key: str) -> int:
        self.reads += 1
        return 0 if self.reads <= len(self._replicas) else 100 + self._replicas.index(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._replicas)

    def __len__(self) -> int:
        return len(self._replicas)


def test_everyone_at_capacity_falls_back_to_least_loaded() -> None:
    ring = HashRing(names(3))
    placed = ring.place("key", _LyingLoads(names(3)), names(3), 0.25)
    assert placed.replica == names(3)[0]  # lowest load (100) once the walk reads them


def test_least_loaded_uses_load_per_weight_and_name_ties() -> None:
    loads = {"a": 4, "b": 4, "c": 3}
    assert least_loaded(loads, ["a", "b", "c"]) == "c"
    assert least_loaded(loads, ["a", "b"]) == "a"  # tie → smallest name
    assert least_loaded(loads, ["b", "a"]) == "a"
    assert least_loaded(loads, ["a", "b", "c"], {"b": 2.0}) == "b"  # 4/2 < 3/1
    assert least_loaded({}, ["z", "y"]) == "y"
    with pytest.raises(NoReplicaError):
        least_loaded(loads, [])


def _zipf_keys(count: int, distinct: int, rng: random.Random) -> list[str]:
    population = [f"{i:016x}" for i in range(distinct)]
    weights = [1 / (rank + 1) ** 1.2 for rank in range(distinct)]
    return rng.choices(population, weights, k=count)


def _assert_bounded_simulation(
    ring: HashRing, sequence: list[str], healthy: list[str], epsilon: float
) -> Counter[str]:
    """Place ``sequence`` one by one (loads only grow) and check the bound after every step."""
    loads: Counter[str] = Counter()
    total_weight = sum(ring.weights[r] for r in healthy)
    healthy_set = set(healthy)
    for step, key in enumerate(sequence, start=1):
        replica, _ = ring.place(key, loads, healthy_set, epsilon)
        assert replica in healthy_set
        loads[replica] += 1
        for r in healthy:
            assert loads[r] <= exact_bound(step, ring.weights[r], total_weight, epsilon), (
                step,
                r,
                dict(loads),
            )
    return loads


@pytest.mark.parametrize("epsilon", [0.1, 0.25, 1.0])
@pytest.mark.parametrize("distribution", ["identical", "zipf"])
def test_no_replica_above_the_bound_under_skew(epsilon: float, distribution: str) -> None:
    rng = random.Random(42)
    sequence = ["hot"] * 1500 if distribution == "identical" else _zipf_keys(1500, 50, rng)
    ring = HashRing(names(6))
    loads = _assert_bounded_simulation(ring, sequence, names(6), epsilon)
    bound = exact_bound(1500, 1.0, 6.0, epsilon)
    assert max(loads.values()) <= bound
    if distribution == "identical":
        # The bound binds: the hot key's home is filled up to it and the rest spills over.
        assert loads[ring.home("hot")] >= bound - 1
        assert len(loads) >= math.ceil(1500 / bound)


@given(
    st.lists(weights_st, min_size=1, max_size=6),
    st.lists(st.integers(0, 5), min_size=1, max_size=150),
    st.sampled_from([0.0, 0.1, 0.25, 1.0]),
    st.integers(0, 5),
)
@settings(max_examples=40, deadline=None)
def test_weighted_bound_holds_for_any_key_sequence(
    weight_list: list[float], key_ids: list[int], epsilon: float, down: int
) -> None:
    ids = names(len(weight_list))
    ring = HashRing(ids, dict(zip(ids, weight_list, strict=True)), vnodes_per_weight=20)
    healthy = [r for i, r in enumerate(ids) if i != down] or ids
    _assert_bounded_simulation(ring, [f"k{i}" for i in key_ids], healthy, epsilon)


def test_weights_are_respected_under_load() -> None:
    ids = names(3)
    ring = HashRing(ids, {ids[0]: 2.0})
    loads = _assert_bounded_simulation(ring, ["same"] * 1000, ids, 0.1)
    # Under a single hot key the bound binds on every replica the walk passes, and the weight-2
    # replica's bound is twice the others': it ends up with the most (45% to 55% of them).
    assert loads[ids[0]] > max(loads[ids[1]], loads[ids[2]])
    assert 430 <= loads[ids[0]] <= 560
    share = ring.share_of_keys()
    assert share[ids[0]] == pytest.approx(0.5, rel=0.2)


# --------------------------------------------------------------------------- key movement


@pytest.mark.parametrize("n", [4, 5, 6, 7, 8])
def test_adding_a_replica_moves_about_one_in_n_plus_one_keys_all_to_it(n: int) -> None:
    before, after = HashRing(names(n)), HashRing(names(n + 1))
    new = names(n + 1)[-1]
    sample = keys(20_000, seed=n)
    moved = [k for k in sample if before.home(k) != after.home(k)]
    assert all(after.home(k) == new for k in moved)
    assert len(moved) / len(sample) <= 1.5 / (n + 1)
    assert len(moved) / len(sample) >= 0.5 / (n + 1)


@pytest.mark.parametrize("n", [4, 6, 8])
def test_removing_a_replica_moves_only_its_keys(n: int) -> None:
    ids = names(n)
    gone = ids[n // 2]
    before, after = HashRing(ids), HashRing([r for r in ids if r != gone])
    for key in keys(20_000, seed=100 + n):
        if before.home(key) != gone:
            assert after.home(key) == before.home(key)
        else:
            # Its keys go to the next replica on their walk: the failover order is the ring's.
            assert after.home(key) == list(before.walk(key))[1]


@given(replica_ids, st.text(alphabet="xyz0123456789", min_size=1, max_size=10))
@settings(max_examples=40, deadline=None)
def test_a_join_only_moves_keys_to_the_newcomer(ids: list[str], newcomer: str) -> None:
    if newcomer in ids:
        return
    before = HashRing(ids, vnodes_per_weight=20)
    after = HashRing([*ids, newcomer], vnodes_per_weight=20)
    for key in keys(300):
        assert after.home(key) in (before.home(key), newcomer)
