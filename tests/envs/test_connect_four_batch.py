"""The batched connect four (`ConnectFourBatch`, what rollout workers step) plays exactly what the
PettingZoo AEC adapter around `connect_four_v3` gives, copy for copy: observations, masks,
rewards, game ends, `is_active` and `true_objective`, random openings included; a serial run
trains on it; its state saves and loads."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pettingzoo")

from pettingzoo.classic import connect_four_v3  # noqa: E402

import envs  # noqa: E402,F401  (registers connect_four)
from envs.connect_four_batch import ConnectFourBatch  # noqa: E402
from envs.pettingzoo_adapter import PettingZooAECAdapter  # noqa: E402
from rl_pbt.envs.registry import has_batched_env, make_env, make_env_batch  # noqa: E402


def _adapters(seeds, board, opening):
    return [
        PettingZooAECAdapter(
            connect_four_v3.env(),
            seed=s,
            objective=lambda r: 1.0 if r > 0 else 0.0 if r < 0 else 0.5,
            board=board,
            random_opening=opening,
        )
        for s in seeds
    ]


def _same_obs(a, b):
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x["observation"], y["observation"])
        assert x["observation"].dtype == y["observation"].dtype == np.float32
        np.testing.assert_array_equal(x["action_mask"], y["action_mask"])


@pytest.mark.parametrize("board,opening", [(False, 0), (False, 6), (True, 3)])
def test_random_games_match_the_pettingzoo_adapter(board, opening):
    seeds = [11, 12, 13, 14]
    refs = _adapters(seeds, board, opening)
    batch = ConnectFourBatch(seeds, board_planes=board, random_opening=opening)
    assert batch.observation_space == refs[0].observation_space
    assert batch.action_space == refs[0].action_space
    for k, ref in enumerate(refs):
        ref_obs, ref_infos = ref.reset()
        obs, infos = batch.reset_copy(k)
        _same_obs(obs, ref_obs)
        assert infos == ref_infos
    rng = np.random.default_rng(0)
    games = 0
    moves = 0
    while games < 300:
        actions = np.zeros((len(seeds), 2), dtype=np.int64)
        for k, ref in enumerate(refs):
            m = ref.agent_names.index(ref.env.agent_selection)
            legal = np.flatnonzero(ref._mover_mask)
            actions[k, m] = rng.choice(legal)
            actions[k, 1 - m] = rng.integers(7)  # ignored, even when illegal
        obs, rewards, term, trunc, infos = batch.step(actions)
        moves += len(seeds)
        assert not trunc.any()
        for k, ref in enumerate(refs):
            r_obs, r_rew, r_term, r_trunc, r_infos = ref.step(list(actions[k]))
            _same_obs(obs[k], r_obs)
            assert rewards[k].tolist() == r_rew
            assert bool(term[k]) == all(r_term)
            assert infos[k] == r_infos
            games += bool(term[k])
    assert moves > 300 * 7


def test_long_openings_match_the_adapter_including_the_ones_that_end_a_game():
    """Openings of up to 30 random moves often end the game (a four, by chance), and such a
    game starts again empty: the batch's fast opening draws and plays what the adapter does."""
    seeds = list(range(120))
    refs = _adapters(seeds, False, 30)
    batch = ConnectFourBatch(seeds, random_opening=30)
    empty = 0
    for k, ref in enumerate(refs):
        for _ in range(2):  # the second opening draws on from the same generator
            ref_obs, ref_infos = ref.reset()
            obs, infos = batch.reset_copy(k)
            _same_obs(obs, ref_obs)
            assert infos == ref_infos
            empty += not obs[0]["observation"].any()
    assert empty >= 20  # openings that ended a game were among them


def test_an_illegal_move_names_the_copy_and_the_legal_columns():
    batch = ConnectFourBatch([0, 1])
    for k in range(2):
        batch.reset_copy(k)
    for _ in range(6):  # fill column 0 of both games
        batch.step([[0, 0], [0, 0]])
    with pytest.raises(ValueError, match=r"copy 0 played the illegal action 0 \(legal: \[1, 2"):
        batch.step([[0, 0], [1, 1]])


def test_state_round_trip_replays_the_same_games():
    a = ConnectFourBatch([5, 6], random_opening=4)
    for k in range(2):
        a.reset_copy(k)
    rng = np.random.default_rng(1)

    def moves(env, n):
        out = []
        for _ in range(n):
            cols = [rng.choice(np.flatnonzero(env.heights[k] < 6)) for k in range(2)]
            acts = np.array([[c, c] for c in cols])
            obs, rew, term, _, _ = env.step(acts)
            out.append((obs[0][0]["observation"].copy(), rew.copy(), term.copy()))
        return out

    moves(a, 30)
    saved = a.get_state()
    b = ConnectFourBatch([0, 0], random_opening=4)
    b.set_state(saved)
    state = rng.bit_generator.state
    first = moves(a, 60)
    rng.bit_generator.state = state
    second = moves(b, 60)
    for x, y in zip(first, second):
        for u, v in zip(x, y):
            np.testing.assert_array_equal(u, v)


def test_connect_four_registers_the_batch_with_the_same_flags():
    from rl_pbt.config.parse import parse_cfg

    assert has_batched_env("connect_four") and has_batched_env("connect_four_planes")
    cfg = parse_cfg(["--env=connect_four", "--seed=3", "--random_opening_moves=2"])
    batch = make_env_batch("connect_four", cfg, [{"env_id": 0}, {"env_id": 1}])
    single = make_env("connect_four", cfg, {"env_id": 1})
    # copy 1 opens its games with the same draws as the env built alone for env_id 1
    for _ in range(20):
        obs_b, _ = batch.reset_copy(1)
        obs_s, _ = single.reset()
        _same_obs(obs_b, obs_s)
