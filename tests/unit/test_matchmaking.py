"""Unit tests for rl_pbt.sampling.matchmaking: seat distributions, Elo preference, snapshots."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from rl_pbt.sampling.elo import EloRatings
from rl_pbt.sampling.matchmaking import (
    EloMatchmaker,
    LeastServedMatchmaker,
    Matchmaker,
    SnapshotPool,
    UniformMatchmaker,
    is_snapshot,
    make_matchmaker,
    parse_snapshot_id,
    snapshot_id,
)

# chi-square upper quantiles at p = 0.001, by degrees of freedom
CHI2_999 = {3: 16.27, 4: 18.47, 5: 20.52}


def chi_square(counts: Counter, categories: list, probs: list[float]) -> float:
    total = sum(counts[c] for c in categories)
    return sum((counts[c] - total * p) ** 2 / (total * p) for c, p in zip(categories, probs))


def test_uniform_seats_are_uniform_and_independent():
    mm = UniformMatchmaker(num_policies=4, mix_policies_in_one_env=True)
    rng = np.random.default_rng(123)
    episodes = [mm.assign(4, rng) for _ in range(5000)]
    for seat in range(4):
        counts = Counter(ep[seat] for ep in episodes)
        assert chi_square(counts, [0, 1, 2, 3], [0.25] * 4) < CHI2_999[3]
    all_same = sum(len(set(ep)) == 1 for ep in episodes) / len(episodes)
    assert all_same == pytest.approx(1 / 64, abs=0.01)
    assert all(isinstance(s, int) for ep in episodes for s in ep)


def test_no_mix_gives_identical_seats_with_uniform_policy():
    for mm in (
        UniformMatchmaker(5, mix_policies_in_one_env=False),
        EloMatchmaker(5, EloRatings(), mix_policies_in_one_env=False),
    ):
        rng = np.random.default_rng(7)
        episodes = [mm.assign(6, rng) for _ in range(5000)]
        assert all(len(set(ep)) == 1 for ep in episodes)
        counts = Counter(ep[0] for ep in episodes)
        assert chi_square(counts, list(range(5)), [0.2] * 5) < CHI2_999[4]


def test_single_seat_episode():
    mm = UniformMatchmaker(3, snapshot_prob=1.0, snapshot_ids=lambda: ["snap:0@1"])
    rng = np.random.default_rng(0)
    for _ in range(50):
        seats = mm.assign(1, rng)
        assert len(seats) == 1 and not is_snapshot(seats[0])


def test_elo_opponent_probs_follow_the_kernel():
    ratings = EloRatings()
    for p, r in enumerate([1000.0, 1050.0, 1400.0, 1800.0]):
        ratings.set_rating(p, r)
    mm = EloMatchmaker(4, ratings, temperature=200.0)
    probs = mm.opponent_probs(0)
    weights = np.exp(-np.array([0.0, 50.0, 400.0, 800.0]) / 200.0)
    np.testing.assert_allclose(probs, weights / weights.sum())
    assert probs.sum() == pytest.approx(1.0)
    assert probs[0] > probs[1] > probs[2] > probs[3]


def test_elo_matchmaker_prefers_close_opponents():
    ratings = EloRatings()
    for p, r in enumerate([1000.0, 1050.0, 1400.0, 1800.0]):
        ratings.set_rating(p, r)
    mm = EloMatchmaker(4, ratings, temperature=200.0)
    rng = np.random.default_rng(2024)
    opponents: dict[int, Counter] = {p: Counter() for p in range(4)}
    firsts = Counter()
    for _ in range(20000):
        seats = mm.assign(2, rng)
        firsts[seats[0]] += 1
        opponents[seats[0]][seats[1]] += 1
    # first seat stays uniform
    assert chi_square(firsts, [0, 1, 2, 3], [0.25] * 4) < CHI2_999[3]
    # policy 0 (1000) meets 1 (1050) far more often than 3 (1800): expected ratio e^3.75 ~ 42
    assert opponents[0][1] > 10 * max(opponents[0][3], 1)
    assert opponents[0][0] > 0  # self-play is allowed
    # empirical opponent distribution matches opponent_probs for every first policy
    for p in range(4):
        assert chi_square(opponents[p], [0, 1, 2, 3], list(mm.opponent_probs(p))) < CHI2_999[3]
    # policy 2 (1400) meets itself most, then the nearest other rating (1050, 350 points away)
    assert opponents[2][2] > opponents[2][1] > opponents[2][3]


def test_elo_large_temperature_tends_to_uniform():
    ratings = EloRatings()
    for p, r in enumerate([800.0, 1200.0, 1600.0]):
        ratings.set_rating(p, r)
    probs = EloMatchmaker(3, ratings, temperature=1e9).opponent_probs(0)
    np.testing.assert_allclose(probs, [1 / 3] * 3, atol=1e-6)


def test_snapshot_prob_zero_never_gives_snapshots():
    pool = SnapshotPool(4)
    pool.add(snapshot_id(0, 1000))
    mm = make_matchmaker("uniform", 3, True, 0.0, pool=pool)
    rng = np.random.default_rng(1)
    assert not any(is_snapshot(s) for _ in range(2000) for s in mm.assign(4, rng))


@pytest.mark.parametrize("kind,mix", [("uniform", True), ("uniform", False), ("elo", True)])
def test_snapshot_prob_half_gives_about_half_the_opponent_seats(kind, mix):
    pool = SnapshotPool(3)
    for steps in (100, 200, 300):
        pool.add(snapshot_id(1, steps))
    mm = make_matchmaker(kind, 4, mix, 0.5, ratings=EloRatings(), pool=pool)
    rng = np.random.default_rng(99)
    episodes = [mm.assign(4, rng) for _ in range(4000)]
    assert all(any(not is_snapshot(s) for s in ep) for ep in episodes)  # a live member plays
    n = 3 * len(episodes)  # the opponent seats, wherever the shuffle put them
    frac = sum(is_snapshot(s) for ep in episodes for s in ep) / n
    assert abs(frac - 0.5) < 4 * math.sqrt(0.25 / n)
    snaps = Counter(s for ep in episodes for s in ep if is_snapshot(s))
    assert chi_square(snaps, pool.ids(), [1 / 3] * 3) < 13.82  # df=2, p=0.001
    if not mix:
        for ep in episodes:
            assert len({s for s in ep if not is_snapshot(s)}) == 1


def test_snapshot_prob_with_empty_pool_falls_back_to_policies():
    pool = SnapshotPool(2)
    mm = make_matchmaker("uniform", 2, True, 1.0, pool=pool)
    rng = np.random.default_rng(5)
    assert all(isinstance(s, int) for s in mm.assign(3, rng))
    pool.add("snap:0@10")  # the provider is live: later episodes see the new snapshot
    seats = mm.assign(3, rng)
    assert [s for s in seats if is_snapshot(s)] == ["snap:0@10"] * 2
    assert sum(isinstance(s, int) for s in seats) == 1  # the live member, in any seat


def test_live_member_takes_any_seat_against_snapshots():
    """Seats are turns in turn-based games: against a snapshot the member moves first in about
    half of the episodes, and the snapshots in the other half (the seat order was fixed)."""
    pool = SnapshotPool(2)
    pool.add(snapshot_id(0, 100))
    mm = make_matchmaker("uniform", 2, True, 1.0, pool=pool)
    rng = np.random.default_rng(3)
    episodes = [mm.assign(2, rng) for _ in range(2000)]
    assert all(sum(is_snapshot(s) for s in ep) == 1 for ep in episodes)
    first = sum(not is_snapshot(ep[0]) for ep in episodes) / len(episodes)
    assert abs(first - 0.5) < 4 * math.sqrt(0.25 / len(episodes))


def test_pool_is_bounded_fifo_and_returns_evicted_id():
    pool = SnapshotPool(3)
    assert [pool.add(f"snap:0@{i}") for i in range(3)] == [None, None, None]
    assert pool.add("snap:0@3") == "snap:0@0"
    assert pool.add("snap:1@4") == "snap:0@1"
    assert pool.ids() == ["snap:0@2", "snap:0@3", "snap:1@4"]
    assert len(pool) == 3 and "snap:0@0" not in pool
    with pytest.raises(ValueError, match="already"):
        pool.add("snap:0@3")
    with pytest.raises(ValueError):
        SnapshotPool(0)


def test_pool_round_trip():
    pool = SnapshotPool(4)
    for i in range(6):
        pool.add(snapshot_id(i % 2, i * 100))
    restored = SnapshotPool.from_dict(pool.to_dict())
    assert restored.max_size == 4 and restored.ids() == pool.ids()


def test_snapshot_ids():
    sid = snapshot_id(3, 1_200_000)
    assert sid == "snap:3@1200000"
    assert is_snapshot(sid) and not is_snapshot(3) and not is_snapshot("policy")
    assert parse_snapshot_id(sid) == (3, 1_200_000)
    with pytest.raises(ValueError):
        parse_snapshot_id("snap:x@y")
    with pytest.raises(ValueError):
        parse_snapshot_id("3")


def test_make_matchmaker_kinds_and_errors():
    assert isinstance(make_matchmaker("uniform", 2, True, 0.0), UniformMatchmaker)
    mm = make_matchmaker("elo", 2, True, 0.0, ratings=EloRatings())
    assert isinstance(mm, EloMatchmaker) and isinstance(mm, Matchmaker)
    with pytest.raises(ValueError, match="allowed: uniform, elo"):
        make_matchmaker("swiss", 2, True, 0.0)
    with pytest.raises(ValueError, match="EloRatings"):
        make_matchmaker("elo", 2, True, 0.0)
    with pytest.raises(ValueError, match="SnapshotPool"):
        make_matchmaker("uniform", 2, True, 0.5)
    with pytest.raises(ValueError):
        UniformMatchmaker(0)
    with pytest.raises(ValueError):
        UniformMatchmaker(2, snapshot_prob=1.5, snapshot_ids=lambda: [])
    with pytest.raises(ValueError):
        EloMatchmaker(2, EloRatings(), temperature=0.0)
    with pytest.raises(TypeError):  # the base class is abstract: a strategy must subclass it
        Matchmaker(2)


def simulate_least_served(focus_steps: int, steps: int = 60_000, envs: int = 8, seed: int = 0):
    """Envs whose episodes last 5-300 steps, each policy with its own typical length; returns
    the matchmaker and, per step, how many distinct policies were playing."""
    rng = np.random.default_rng(seed)
    mm = LeastServedMatchmaker([1, 3, 5, 7], focus_steps)
    typical = {1: 10, 3: 60, 5: 150, 7: 300}
    seat = [mm.assign(1, rng)[0] for _ in range(envs)]
    left = [int(rng.integers(5, typical[p] + 1)) for p in seat]
    distinct = []
    for _ in range(steps):
        distinct.append(len(set(seat)))
        for e in range(envs):
            mm.record_steps(seat[e], 1)
            left[e] -= 1
            if left[e] == 0:
                seat[e] = mm.assign(1, rng)[0]
                left[e] = int(rng.integers(5, typical[seat[e]] + 1))
    return mm, np.array(distinct)


@pytest.mark.parametrize("focus_steps", [0, 2_000, 16_384])
def test_least_served_balances_experience(focus_steps):
    mm, _ = simulate_least_served(focus_steps)
    counts = np.array(list(mm.steps.values()))
    # bound: the focus lead plus the episodes in flight (8 envs x 300 steps at most)
    assert counts.max() - counts.min() <= focus_steps + 8 * 300, mm.steps
    assert counts.sum() == 60_000 * 8


def test_focus_plays_fewer_policies_at_once():
    _, spread = simulate_least_served(0)
    _, focused = simulate_least_served(16_384)
    assert spread.mean() > 2.5  # least-served alone mixes most of the four all the time
    assert focused.mean() < 1.2 and np.mean(focused == 1) > 0.9


def test_preferred_policies_take_new_episodes_then_balance_returns():
    rng = np.random.default_rng(0)
    mm = LeastServedMatchmaker([0, 2, 4, 6], focus_steps=100)
    for p in (0, 2, 4, 6):
        mm.record_steps(p, 1000)
    mm.record_steps(4, 500)  # policies 4 and 6 are well ahead
    mm.record_steps(6, 400)
    mm.prefer(4, 50)  # e.g. their weights were just replaced by PBT copies
    mm.prefer(6, 100)
    mm.prefer(9, 100)  # not in this worker's share: ignored
    taken = []
    for _ in range(30):
        (p,) = mm.assign(1, rng)
        taken.append(p)
        mm.record_steps(p, 10)
    assert Counter(taken[:15]) == {4: 5, 6: 10}  # each until it has its steps
    assert set(taken[15:]) <= {0, 2}  # then the least served catch up
