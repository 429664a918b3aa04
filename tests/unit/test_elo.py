"""Unit tests for rl_pbt.sampling.elo: update rule, team and mirror matches, saving, episodes."""

from __future__ import annotations

import json

import pytest

from rl_pbt.sampling.elo import (
    EloRatings,
    elo_update,
    expected_score,
    matches_from_episode,
    scores_against_snapshots,
)


@pytest.mark.parametrize("r_a,r_b", [(1200, 1200), (1500, 1200), (900, 1700), (0, 400)])
def test_expected_score_symmetric_and_sums_to_one(r_a, r_b):
    e_ab = expected_score(r_a, r_b)
    e_ba = expected_score(r_b, r_a)
    assert e_ab + e_ba == pytest.approx(1.0)
    assert expected_score(r_a + 123, r_b + 123) == pytest.approx(e_ab)


def test_expected_score_values():
    assert expected_score(1200, 1200) == pytest.approx(0.5)
    assert expected_score(1600, 1200) == pytest.approx(10 / 11)
    assert expected_score(1000, 1400) == pytest.approx(1 / 11)


@pytest.mark.parametrize("score", [1.0, 0.0, 0.5])
def test_update_is_zero_sum(score):
    a, b = elo_update(1350.0, 1180.0, score, 24.0)
    assert a + b == pytest.approx(1350.0 + 1180.0)


def test_winner_gains_loser_drops():
    a, b = elo_update(1200.0, 1300.0, 1.0, 16.0)
    assert a > 1200.0 and b < 1300.0
    a, b = elo_update(1300.0, 1200.0, 0.0, 16.0)
    assert a < 1300.0 and b > 1200.0


def test_equal_ratings_k16_moves_by_eight():
    assert elo_update(1200.0, 1200.0, 1.0, 16.0) == pytest.approx((1208.0, 1192.0))
    assert elo_update(1200.0, 1200.0, 0.0, 16.0) == pytest.approx((1192.0, 1208.0))
    assert elo_update(1200.0, 1200.0, 0.5, 16.0) == pytest.approx((1200.0, 1200.0))


def test_draw_between_unequal_ratings_pulls_them_together():
    a, b = elo_update(1500.0, 1100.0, 0.5, 16.0)
    assert a < 1500.0 and b > 1100.0
    assert a - b < 400.0


def test_bad_score_rejected():
    with pytest.raises(ValueError, match="score_a"):
        elo_update(1200.0, 1200.0, 2.0, 16.0)


def test_ratings_record_match_1v1():
    elo = EloRatings(initial=1200.0, k=16.0)
    assert elo.rating(0) == 1200.0
    elo.record_match([0], [1], 1.0)
    assert elo.rating(0) == pytest.approx(1208.0)
    assert elo.rating(1) == pytest.approx(1192.0)
    assert elo.games(0) == elo.games(1) == 1
    elo.record_match([1], ["snap:0@1000"], 0.5)
    assert elo.rating(1) > 1192.0
    assert elo.rating("snap:0@1000") < 1200.0


def test_mirror_match_is_noop():
    elo = EloRatings()
    elo.record_match([3], [3], 1.0)
    elo.record_match([3, 3], [3, 3], 0.0)
    assert elo.rating(3) == 1200.0
    assert elo.games(3) == 0
    assert len(elo) == 0


def test_partial_mirror_skips_only_shared_key():
    elo = EloRatings(k=16.0)
    elo.record_match([0, 1], [0, 2], 1.0)
    assert elo.rating(0) == 1200.0
    assert elo.rating(1) == pytest.approx(1208.0)
    assert elo.rating(2) == pytest.approx(1192.0)


def test_team_update_uses_mean_and_moves_every_member_by_team_delta():
    elo = EloRatings(k=16.0)
    elo.set_rating(0, 1300.0)
    elo.set_rating(1, 1100.0)  # team A mean 1200
    elo.set_rating(2, 1250.0)
    elo.set_rating(3, 1150.0)  # team B mean 1200
    elo.record_match([0, 1], [2, 3], 1.0)
    assert elo.rating(0) == pytest.approx(1308.0)
    assert elo.rating(1) == pytest.approx(1108.0)
    assert elo.rating(2) == pytest.approx(1242.0)
    assert elo.rating(3) == pytest.approx(1142.0)


def test_same_policy_in_two_seats_of_one_team_moves_once():
    elo = EloRatings(k=16.0)
    elo.record_match([0, 0], [1, 1], 1.0)
    assert elo.rating(0) == pytest.approx(1208.0)
    assert elo.games(0) == 1


def test_serialization_round_trip_through_json():
    elo = EloRatings(initial=1000.0, k=32.0)
    elo.record_match([0], [1], 1.0)
    elo.record_match([1, 2], ["snap:3@1200000", 0], 0.5)
    restored = EloRatings.from_dict(json.loads(json.dumps(elo.to_dict())))
    assert restored.initial == 1000.0 and restored.k == 32.0
    assert set(restored.keys()) == {0, 1, 2, "snap:3@1200000"}
    for key in elo.keys():
        assert restored.rating(key) == elo.rating(key)
        assert restored.games(key) == elo.games(key)


def test_table_sorted_by_rating():
    elo = EloRatings()
    elo.record_match([0], [1], 0.0)
    elo.record_match(["snap:1@5"], [0], 1.0)
    lines = elo.table().splitlines()
    assert "rating" in lines[0]
    ratings = [float(line.split()[2]) for line in lines[1:]]
    assert ratings == sorted(ratings, reverse=True)
    assert len(ratings) == 3
    assert "no rated" in EloRatings().table()


def test_remove_and_set_rating():
    elo = EloRatings()
    elo.set_rating("snap:0@1", 1500.0)
    assert "snap:0@1" in elo
    elo.remove("snap:0@1")
    assert "snap:0@1" not in elo
    assert elo.rating("snap:0@1") == 1200.0
    elo.remove("never-seen")


def test_matches_from_episode_1v1():
    assert matches_from_episode([2, 5], [0, 1], [3.0, -1.0]) == [([2], [5], 1.0)]
    assert matches_from_episode([2, 5], [0, 1], [0.0, 1.0]) == [([2], [5], 0.0)]
    assert matches_from_episode([2, 5], None, [1.0, 1.0]) == [([2], [5], 0.5)]


def test_matches_from_episode_2v2():
    matches = matches_from_episode([0, 1, 2, 3], ["red", "blue", "red", "blue"], [1, 0, 1, 0])
    assert matches == [([0, 2], [1, 3], 1.0)]


def test_matches_from_episode_ffa_three_players():
    matches = matches_from_episode([0, 1, "snap:2@10"], [0, 1, 2], [5.0, 7.0, 5.0])
    assert matches == [
        ([0], [1], 0.0),
        ([0], ["snap:2@10"], 0.5),
        ([1], ["snap:2@10"], 1.0),
    ]
    elo = EloRatings()
    for team_a, team_b, score in matches:
        elo.record_match(team_a, team_b, score)
    assert elo.rating(1) > elo.rating(0)
    assert elo.rating(1) > elo.rating("snap:2@10")


def test_matches_from_episode_single_team_gives_nothing_and_lengths_checked():
    assert matches_from_episode([0, 1], [0, 0], [1.0, 1.0]) == []
    with pytest.raises(ValueError, match="one entry per agent"):
        matches_from_episode([0, 1], [0, 1], [1.0])


def test_scores_against_snapshots_keeps_live_policies_against_snapshots_only():
    matches = [
        ([0], ["snap:1@100"], 1.0),  # live vs snapshot: policy 0 scores 1
        (["snap:2@200"], [3], 1.0),  # snapshot first: policy 3 scores 0
        ([1], [2], 0.5),  # live vs live: not counted
        ([4, "snap:1@100"], ["snap:2@200", "snap:3@50"], 0.5),  # mixed team: not counted
        ([5, 6], ["snap:a", "snap:b"], 0.5),  # a team of live policies: both score 0.5
        (["snap:a"], ["snap:b"], 1.0),  # two snapshots: nobody
    ]
    assert scores_against_snapshots(matches) == [(0, 1.0), (3, 0.0), (5, 0.5), (6, 0.5)]


def test_cross_play_tallies_one_on_one_games_between_members():
    from rl_pbt.sampling.elo import CrossPlay

    cp = CrossPlay(3, window=4)
    for score in (1.0, 1.0, 0.5, 0.0):
        cp.record((0,), (1,), score)
    cp.record((2,), (0,), 1.0)  # stored from the lower id's side: p0 lost
    cp.record((0, 1), (2,), 1.0)  # a team of two: no cell
    cp.record(("snap_a",), (2,), 0.0)  # a frozen snapshot: no cell
    cp.record((1,), (1,), 1.0)  # a mirror match: no cell
    for _ in range(4):  # the window keeps the newest 4 results of a pair
        cp.record((1,), (2,), 0.0)
    rate, games = cp.matrix()
    assert rate[0][1] == 0.625 and rate[1][0] == 0.375 and games[0][1] == 4
    assert rate[0][2] == 0.0 and rate[2][0] == 1.0 and games[2][0] == 1
    assert rate[1][2] == 0.0 and games[1][2] == 4
    assert all(rate[i][i] is None for i in range(3))
    assert cp.to_dict()["players"] == ["p0", "p1", "p2"]


def test_cross_play_goes_on_at_a_resume_and_forgets_a_copied_member():
    """The table is saved with each pair's recent results and restored from them (a resume
    started an empty one and overwrote the file); a member replaced by a PBT copy loses its
    cells (its games were the old weights')."""
    from rl_pbt.sampling.elo import CrossPlay

    cp = CrossPlay(3, window=4)
    for score in (1.0, 0.0, 1.0):
        cp.record((0,), (1,), score)
    cp.record((2,), (1,), 1.0)
    saved = json.loads(json.dumps(cp.to_dict()))
    again = CrossPlay.from_dict(saved, 3, window=4)
    assert again.matrix() == cp.matrix()
    assert CrossPlay.from_dict(saved, 2, window=4).matrix()[1] == [[0, 3], [3, 0]]
    assert CrossPlay.from_dict({"win_rate": [[None]]}, 3).matrix() == CrossPlay(3).matrix()
    broken = {"scores": {"0,1": [1.0, "x"], "a,b": [1.0], "2,1": [1.0], "0,2": 5}}
    assert CrossPlay.from_dict(broken, 3).matrix() == CrossPlay(3).matrix()
    again.forget(1)
    rate, games = again.matrix()
    assert games == [[0, 0, 0], [0, 0, 0], [0, 0, 0]] and rate[0][1] is None
