"""The turn-based (AEC) PettingZoo adapter on connect four: steps, masks and final rewards equal
PettingZoo's own env over 1,000 random games; only the mover acts; a short self-play run trains
on it without one illegal move."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from gymnasium import spaces

pytest.importorskip("pettingzoo")

from pettingzoo.classic import connect_four_v3  # noqa: E402

import envs  # noqa: E402,F401  (registers connect_four)
from envs.pettingzoo_adapter import PettingZooAECAdapter  # noqa: E402
from rl_pbt import parse_cfg, train  # noqa: E402
from rl_pbt.models.obs import obs_spec  # noqa: E402


def test_a_thousand_random_games_match_pettingzoo():
    rng = np.random.default_rng(0)
    ours = PettingZooAECAdapter(connect_four_v3.env())
    ref = connect_four_v3.env()
    names = ours.agent_names
    games = moves = 0
    obs, infos = ours.reset(seed=0)
    ref.reset(seed=0)
    while games < 1000:
        mover = ref.agent_selection
        m = names.index(mover)
        raw = ref.observe(mover)
        # the mover sees PettingZoo's board and mask; the waiting agent may play anything
        np.testing.assert_array_equal(obs[m]["observation"], raw["observation"].reshape(-1))
        np.testing.assert_array_equal(obs[m]["action_mask"], raw["action_mask"])
        assert obs[1 - m]["action_mask"].all()
        action = int(rng.choice(np.flatnonzero(raw["action_mask"])))
        actions = [0, 0]
        actions[m] = action
        actions[1 - m] = int(rng.integers(7))  # ignored, even when illegal
        obs, rewards, term, trunc, infos = ours.step(actions)
        ref.step(action)
        moves += 1
        # the step counts for the mover only (the learner trains on active steps)
        assert infos[m]["is_active"] and not infos[1 - m]["is_active"]
        # and says who moves next (in this game, or first in the one that starts)
        following = [infos[i]["acts_next"] for i in range(2)]
        assert rewards == [float(ref.rewards[a]) for a in names]
        over = any(ref.terminations.values()) or any(ref.truncations.values())
        assert all(term) == over and not any(trunc)
        if over:
            games += 1
            for i, a in enumerate(names):  # the game's result, for PBT's ranking
                assert infos[i]["true_objective"] == float(ref._cumulative_rewards[a])
            assert sorted(rewards) in ([-1.0, 1.0], [0.0, 0.0])
            ref.reset(seed=games)
            obs, infos = ours.reset(seed=games)
            following = [infos[i]["acts_next"] for i in range(2)]
        assert following == [a == ref.agent_selection for a in names]
    assert moves > 7 * 1000


def test_the_observation_space_is_a_masked_vector():
    env = PettingZooAECAdapter(connect_four_v3.env())
    spec = obs_spec(env.observation_space)
    assert spec.mask_key == "action_mask" and spec.feature_keys == ("observation",)
    assert spec.shape("observation") == (84,)
    with pytest.raises(ValueError, match="illegal action 0"):
        env.reset(seed=0)
        for _ in range(6):  # fill column 0, then play it again
            env.step([0, 0])
        env.step([0, 0])


def test_board_planes_are_pettingzoos_board_planes_first():
    """`board=True` (connect_four_planes): the same board as (planes, rows, columns) float32,
    which the board encoder reads as it is (not scaled as pixels)."""
    import torch

    from rl_pbt.config.parse import parse_cfg as cfg_of
    from rl_pbt.models.actor_critic import make_actor_critic

    env = PettingZooAECAdapter(connect_four_v3.env(), board=True)
    ref = connect_four_v3.env()
    assert env.observation_space["observation"].shape == (2, 6, 7)
    obs, _ = env.reset(seed=1)
    ref.reset(seed=1)
    rng = np.random.default_rng(1)
    for _ in range(12):
        mover = ref.agent_selection
        m = env.agent_names.index(mover)
        raw = ref.observe(mover)["observation"]
        np.testing.assert_array_equal(obs[m]["observation"], np.moveaxis(raw, -1, 0))
        assert obs[m]["observation"].dtype == np.float32
        action = int(rng.choice(np.flatnonzero(ref.observe(mover)["action_mask"])))
        obs, *_ = env.step([action, action])
        ref.step(action)
    cfg = cfg_of(["--env=connect_four_planes", "--normalize_input=False"])
    assert cfg.encoder_conv_architecture == "convnet_board"  # the env's default
    model = make_actor_critic(env.observation_space, env.action_space, cfg)
    planes = torch.as_tensor(obs[0]["observation"])[None]
    first = model.encoders["observation"][0]
    seen = {}
    hook = first.register_forward_hook(lambda mod, inp, out: seen.update(x=inp[0]))
    model.encode({"observation": planes})
    hook.remove()
    torch.testing.assert_close(seen["x"], planes)  # not divided by 255


def test_a_random_opening_starts_training_games_later_and_evaluation_games_empty():
    from types import SimpleNamespace

    from rl_pbt.config.parse import parse_cfg as cfg_of
    from rl_pbt.envs.registry import make_env

    cfg = cfg_of(["--env=connect_four", "--random_opening_moves=4", "--seed=2"])
    env = make_env("connect_four", cfg, {"env_id": 0})
    pieces = []
    for _ in range(200):
        obs, infos = env.reset()
        pieces.append(int(obs[0]["observation"].sum()))
        mover = env.agent_names.index(env.env.agent_selection)
        assert obs[mover]["action_mask"].sum() >= 1
    assert set(pieces) == {0, 1, 2, 3, 4}  # 0..4 random moves played, each count seen
    plain = make_env("connect_four", SimpleNamespace(seed=2), {"env_id": 0})  # as match makes it
    assert all(int(plain.reset()[0][0]["observation"].sum()) == 0 for _ in range(20))


def test_connect_four_self_play_trains_without_an_illegal_move(tmp_path):
    cfg = parse_cfg(
        ["--env=connect_four", "--serial_mode", "--num_workers=1", "--num_envs_per_worker=4",
         "--rollout=16", "--batch_size=128", "--encoder_mlp_layers", "64",
         "--train_for_env_steps=6000", "--seed=1", f"--train_dir={tmp_path}",
         "--experiment=c4"]
    )  # fmt: skip
    # an illegal move raises in the adapter, which stops the run with status 1
    assert train(cfg) == 0
    with open(os.path.join(tmp_path, "c4", "summary.json")) as f:
        summary = json.load(f)
    assert summary["policies"]["0"]["episodes"] > 50


class KnockOut:
    """AEC API, three players moving in turn. "p2" is knocked out by the third move (reward -1,
    terminated) and the others play on; at the ninth move "p0" wins (+1) and "p1" loses (-1).
    The game state is under the key "board" (beside "action_mask")."""

    metadata = {"render_modes": []}
    possible_agents = ["p0", "p1", "p2"]
    _obs = spaces.Dict(
        {
            "board": spaces.Box(0, 20, (3,), np.float32),
            "action_mask": spaces.Box(0, 1, (2,), np.int8),
        }
    )

    def observation_space(self, agent):
        return self._obs

    def action_space(self, agent):
        return spaces.Discrete(2)

    def agent_iter(self):  # the AEC API's marker
        return iter(())

    def observe(self, agent):
        assert agent in self.agents, f"{agent} observed after it left"
        return {"board": self.moves_of.copy(), "action_mask": np.array([1, 0], np.int8)}

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        self.rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.moves_of = np.zeros(3, np.float32)
        self.moves = 0
        self.agent_selection = "p0"
        self.dead_steps = 0

    def step(self, action):
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:  # PettingZoo's dead step
            assert action is None
            self.dead_steps += 1
            for d in (self.rewards, self.terminations, self.truncations):
                del d[agent]
            self.agents.remove(agent)
            self.rewards = {a: 0.0 for a in self.agents}
            self.agent_selection = self._next_after
            return
        self.rewards = {a: 0.0 for a in self.agents}
        self.moves_of[self.possible_agents.index(agent)] += 1
        self.moves += 1
        live = [a for a in self.agents if not self.terminations[a]]
        nxt = live[(live.index(agent) + 1) % len(live)]
        if self.moves == 3:  # p2 is out: PettingZoo selects it for its dead step first
            self.rewards["p2"], self.terminations["p2"] = -1.0, True
            self._next_after, nxt = "p0", "p2"
        if self.moves == 9:
            self.rewards["p0"], self.rewards["p1"] = 1.0, -1.0
            self.terminations["p0"] = self.terminations["p1"] = True
        self.agent_selection = nxt


def test_a_player_knocked_out_waits_while_the_others_play_on():
    """An agent's termination ended the whole game (everyone scored on the returns so far,
    the env reset mid-game): now the game ends when every agent is out of it."""
    pz = KnockOut()
    env = PettingZooAECAdapter(pz, seed=0)
    obs, infos = env.reset()
    assert set(obs[0]) == {"board", "action_mask"}
    steps, ended = 0, None
    while ended is None:
        obs, rewards, term, trunc, infos = env.step([0, 0, 0])
        steps += 1
        if steps == 3:  # p2 knocked out: its reward now, its end held for the game's end
            assert rewards == [0.0, 0.0, -1.0] and term == [False] * 3 and pz.dead_steps == 1
        if steps > 3:  # p2 waits: zeros, any action legal, never to move
            assert not infos[2]["is_active"] and not infos[2]["acts_next"]
            assert obs[2]["action_mask"].tolist() == [1, 1] and not obs[2]["board"].any()
        if all(term):
            ended = steps, rewards, infos
        assert steps < 20
    steps, rewards, infos = ended
    assert steps == 9 and rewards == [1.0, -1.0, 0.0]
    assert [i["true_objective"] for i in infos] == [1.0, -1.0, -1.0]


def test_a_game_state_under_two_keys_is_named():
    class TwoKeys(KnockOut):
        _obs = spaces.Dict({**KnockOut._obs.spaces, "extra": spaces.Box(0, 1, (1,), np.float32)})

    with pytest.raises(ValueError, match="one key of game state"):
        PettingZooAECAdapter(TwoKeys())
