"""An env's mirror symmetry (`register_env(symmetry=...)`, `--mirror_symmetry`): the canonical
orientation, a policy that is symmetric by construction, the same log-probs in acting, in
learning and in the fused rollout-worker pass, masks that stay legal, and runs saved before
the flag existed."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
import torch

import envs  # noqa: F401  (registers connect_four)
from envs.connect_four import connect_four_mirror
from envs.connect_four_batch import COLS, ROWS, ConnectFourBatch
from rl_pbt import parse_cfg
from rl_pbt.config.parse import ConfigError, resume_mismatches
from rl_pbt.envs import registry
from rl_pbt.envs.registry import register_env, registry_snapshot
from rl_pbt.models.actor_critic import make_actor_critic
from rl_pbt.models.loading import experiment_cfg
from rl_pbt.models.symmetry import Mirror
from rl_pbt.runtime.processes import check_picklable_registry
from rl_pbt.sampling.fused_inference import FusedPopulationPolicy


def mirrored_board(obs: np.ndarray) -> np.ndarray:
    """NumPy reference: the observation (rows x columns x 2, flat) with its columns reversed."""
    return obs.reshape(-1, ROWS, COLS, 2)[:, :, ::-1].reshape(obs.shape)


def random_positions(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Observations and legal-column masks of the mover, `n` positions of random games."""
    env = ConnectFourBatch([seed])
    obs, _ = env.reset_copy(0)
    rng = np.random.default_rng(seed)
    boards, masks = [], []
    while len(boards) < n:
        mover = int(env.mover[0])
        boards.append(obs[mover]["observation"])
        masks.append(obs[mover]["action_mask"])
        actions = np.zeros((1, 2), dtype=np.int64)
        actions[0, mover] = rng.choice(np.flatnonzero(env.heights[0] < ROWS))
        obs = env.step(actions)[0][0]
    return np.stack(boards), np.stack(masks)


def c4_model(*extra: str, seed: int = 0):
    env = ConnectFourBatch([0])
    cfg = parse_cfg(["--env=connect_four", "--encoder_mlp_layers", "32", "16", *extra])
    model = make_actor_critic(env.observation_space, env.action_space, cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # weights far from symmetric, statistics far from the identity
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
        model.obs_norms["observation"].mean.uniform_(0.0, 0.5, generator=gen)
    return model


def test_the_canonical_orientation_is_the_same_for_a_board_and_its_mirror_image():
    mirror = connect_four_mirror()
    boards, masks = random_positions(400, seed=1)
    x = torch.as_tensor(boards)
    flip = mirror.flips(x)
    seen = mirror.obs(x, flip)
    x_m = torch.as_tensor(mirrored_board(boards))
    flip_m = mirror.flips(x_m)
    torch.testing.assert_close(mirror.obs(x_m, flip_m), seen)
    symmetric = (x == x_m).all(-1)
    assert not flip[symmetric].any()  # a symmetric board is its own canonical image
    assert torch.equal(flip ^ flip_m, ~symmetric)  # otherwise exactly one of the two flips
    assert 0.2 < flip.float().mean() < 0.8
    # the mirror image of the mask and of the columns, against NumPy
    m = torch.as_tensor(masks)
    flipped = np.where(flip.numpy()[:, None], masks[:, ::-1], masks)
    np.testing.assert_array_equal(mirror.mask(m, flip).numpy(), flipped)
    cols = torch.as_tensor(np.arange(400) % COLS)[:, None]
    expected = np.where(flip.numpy(), COLS - 1 - cols.numpy()[:, 0], cols.numpy()[:, 0])
    np.testing.assert_array_equal(mirror.actions(cols, flip).numpy()[:, 0], expected)
    # compared from the bottom row up: one piece on the left of the bottom row flips, one on
    # the right does not, whatever stands above them
    left, right = np.zeros(84, np.float32), np.zeros(84, np.float32)
    left[((ROWS - 1) * COLS + 1) * 2] = 1.0
    right[((ROWS - 1) * COLS + 5) * 2] = 1.0
    left[(0 * COLS + 6) * 2 + 1] = right[(0 * COLS + 0) * 2 + 1] = 1.0  # top corners
    assert mirror.flips(torch.as_tensor(np.stack([left, right]))).tolist() == [True, False]


def test_a_mirror_must_be_its_own_inverse():
    Mirror([1, 0, 2], [2, 1, 0])
    with pytest.raises(ValueError, match="obs_perm must be a permutation that is its own"):
        Mirror([1, 2, 0], [1, 0])
    with pytest.raises(ValueError, match="action_perm must be a permutation"):
        Mirror([1, 0], [0, 0])
    with pytest.raises(ValueError, match="order must list each of the 2 observation"):
        Mirror([1, 0], [1, 0], order=[0, 0])


def test_the_policy_is_symmetric_and_the_learner_sees_what_the_actor_did():
    model = c4_model()
    plain = c4_model("--mirror_symmetry=False")
    assert model.mirror is not None and plain.mirror is None
    boards, masks = random_positions(200, seed=2)
    obs = {"observation": torch.as_tensor(boards), "action_mask": torch.as_tensor(masks)}
    obs_m = {
        "observation": torch.as_tensor(mirrored_board(boards)),
        "action_mask": torch.as_tensor(masks[:, ::-1].copy()),
    }
    actions, logp, values, _ = model.act(obs, None)
    assert (obs["action_mask"].gather(1, actions.long()) == 1).all()  # legal, in the env's frame
    # every action's log-prob on a board and of its mirror image on the mirrored board
    all_cols = torch.arange(COLS).repeat(200, 1)
    n = len(boards)

    def log_probs(m, o):
        out = []
        for c in range(COLS):
            a = all_cols[:, c : c + 1]
            lp, _, v = m.evaluate(
                {k: t[:, None] for k, t in o.items()}, a[:, None], None, torch.zeros(n, 1), 1
            )
            out.append(lp[:, 0])
        return torch.stack(out, 1), v[:, 0]

    lp, v = log_probs(model, obs)
    lp_m, v_m = log_probs(model, obs_m)
    legal = obs["action_mask"].bool()
    # a board that is its own mirror image is seen as it is (the empty board, a centre stack)
    odd = ~(obs["observation"] == obs_m["observation"]).all(-1)
    assert 0 < int((~odd).sum()) < n // 4
    both = legal & odd[:, None]
    torch.testing.assert_close(lp[both], lp_m.flip(1)[both])
    torch.testing.assert_close(v, v_m)
    # the learner's log-prob of the action the actor took is the actor's
    torch.testing.assert_close(lp.gather(1, actions.long())[:, 0], logp)
    assert (lp[~legal] < -1e6).all()  # illegal columns keep no probability
    # without the mirror the same weights give no symmetric policy (the test can fail)
    plain.load_state_dict(model.state_dict())
    lp_p, _ = log_probs(plain, obs)
    lp_pm, _ = log_probs(plain, obs_m)
    assert (lp_p[both] - lp_pm.flip(1)[both]).abs().max() > 0.1


def test_illegal_columns_stay_illegal_on_a_mirrored_board():
    model = c4_model(seed=3)
    boards, _ = random_positions(300, seed=4)
    flip = model.mirror.flips(torch.as_tensor(boards))
    assert flip.any() and (~flip).any()
    for legal_col in (0, 2, 6):  # one legal column only
        mask = torch.zeros(len(boards), COLS, dtype=torch.int8)
        mask[:, legal_col] = 1
        obs = {"observation": torch.as_tensor(boards), "action_mask": mask}
        for deterministic in (False, True):
            actions, logp, _, _ = model.act(obs, None, deterministic=deterministic)
            assert (actions[:, 0] == legal_col).all()
            torch.testing.assert_close(logp, torch.zeros_like(logp))


def test_the_fused_worker_pass_mirrors_as_the_model_does():
    models = [c4_model(seed=s) for s in range(3)]
    fused = FusedPopulationPolicy(models[0], 3)
    for row, model in enumerate(models):
        fused.load(row, model)
    boards, masks = random_positions(60, seed=5)
    obs = {"observation": torch.as_tensor(boards), "action_mask": torch.as_tensor(masks)}
    assert models[0].mirror.flips(obs["observation"]).any()
    rows = np.arange(60) % 3
    for deterministic in (True, False):
        actions, log_probs, values = fused.act(obs, rows, deterministic=deterministic)
        assert (obs["action_mask"].gather(1, actions.long()) == 1).all()
        for row in range(3):
            idx = torch.as_tensor(np.flatnonzero(rows == row))
            sub = {k: v[idx] for k, v in obs.items()}
            if deterministic:
                ref_a, ref_lp, ref_v, _ = models[row].act(sub, None, deterministic=True)
                torch.testing.assert_close(actions[idx], ref_a)
            else:  # the learner's log-prob of the sampled actions
                ref_lp, _, _ = models[row].evaluate(
                    {k: v[:, None] for k, v in sub.items()},
                    actions[idx][:, None],
                    None,
                    torch.zeros(len(idx), 1),
                    1,
                )
                ref_lp = ref_lp[:, 0]
                ref_v = models[row].act(sub, None)[2]
            torch.testing.assert_close(log_probs[idx], ref_lp, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(values[idx], ref_v, rtol=1e-5, atol=1e-5)


def test_a_batch_turned_once_gives_what_each_pass_turning_it_gives():
    """The learner turns a batch to the network's orientation once (`to_canonical`) and every
    pass takes it as it is (`canonical=True`): the same log-probs, entropies, values and
    features as turning it in each pass; turning twice changes nothing."""
    model = c4_model()
    boards, masks = random_positions(120, seed=4)
    n = len(boards)
    obs = {
        "observation": torch.as_tensor(boards).view(n // 4, 4, -1),
        "action_mask": torch.as_tensor(masks).view(n // 4, 4, -1),
    }
    actions, _, _, _ = model.act({k: v.reshape(n, -1) for k, v in obs.items()}, None)
    actions = actions.view(n // 4, 4, 1)
    dones = torch.zeros(n // 4, 4)
    turned, turned_actions = model.to_canonical(obs, actions)
    assert not torch.equal(turned["observation"], obs["observation"])
    assert not torch.equal(turned_actions, actions)
    again, again_actions = model.to_canonical(turned, turned_actions)
    assert torch.equal(again["observation"], turned["observation"])
    assert torch.equal(again_actions, turned_actions)
    ref = model.evaluate(obs, actions, None, dones, 1)
    got = model.evaluate(turned, turned_actions, None, dones, 1, canonical=True)
    for r, g in zip(ref, got):
        torch.testing.assert_close(g, r)
    rows = torch.rand(n // 4, 4) < 0.5
    torch.testing.assert_close(
        model.obs_features_of(turned, rows, canonical=True), model.obs_features_of(obs, rows)
    )


def test_normalisers_learn_the_canonical_orientation():
    model, plain = c4_model(), c4_model("--mirror_symmetry=False")
    plain.load_state_dict(model.state_dict())
    boards, masks = random_positions(100, seed=6)
    obs = {"observation": torch.as_tensor(boards), "action_mask": torch.as_tensor(masks)}
    seen, flip = model.canonical(obs)
    assert flip.any()
    valid = torch.ones(100, 1, dtype=torch.bool)
    model.update_normalizers({k: v[:, None] for k, v in obs.items()}, valid)
    plain.update_normalizers({k: v[:, None] for k, v in seen.items()}, valid)
    for name in ("mean", "var", "count"):
        torch.testing.assert_close(
            getattr(model.obs_norms["observation"], name),
            getattr(plain.obs_norms["observation"], name),
        )
    raw = c4_model("--mirror_symmetry=False")  # the raw boards give other statistics
    raw.load_state_dict(model.state_dict())
    raw.update_normalizers({k: v[:, None] for k, v in obs.items()}, valid)
    gap = raw.obs_norms["observation"].mean - plain.obs_norms["observation"].mean
    assert gap.abs().max() > 0.05


def _make_cartpole(full_env_name, cfg, env_config, render_mode=None):
    import gymnasium as gym

    return gym.make("CartPole-v1")


def _cartpole_mirror():
    return Mirror([1, 0, 2, 3], [1, 0])


def test_a_wrong_mirror_and_a_saved_run_without_the_flag(tmp_path, monkeypatch):
    import gymnasium as gym

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    register_env("mirror_test", _make_cartpole, symmetry=lambda: Mirror([1, 0], [1, 0]))
    # a factory that cannot travel to a spawned child is named before any child starts
    with pytest.raises(ConfigError, match="its symmetry .*lambda.* cannot be sent"):
        check_picklable_registry(registry_snapshot(), "mirror_test", "spawn")
    snapshot = pickle.loads(pickle.dumps(registry_snapshot(["connect_four"])))
    assert snapshot["connect_four"].symmetry is connect_four_mirror
    cfg = parse_cfg(["--env=mirror_test"])
    env = gym.make("CartPole-v1")
    with pytest.raises(ValueError, match="its Mirror has 2 observation entries and 2 actions, "):
        make_actor_critic(env.observation_space, env.action_space, cfg)
    register_env("mirror_test", _make_cartpole, symmetry=lambda: "no")
    with pytest.raises(ValueError, match="symmetry\\(\\) must return a rl_pbt.models.symmetry"):
        make_actor_critic(env.observation_space, env.action_space, cfg)
    register_env("mirror_test", _make_cartpole, symmetry=_cartpole_mirror)
    model = make_actor_critic(env.observation_space, env.action_space, cfg)
    assert model.mirror is not None
    with pytest.raises(TypeError, match="symmetry must be callable"):
        register_env("mirror_test", _make_cartpole, symmetry=3)
    # a run saved before the flag existed rebuilds the model it trained: no mirror
    saved = parse_cfg(["--env=connect_four", "--mirror_symmetry=False"]).to_dict()
    del saved["mirror_symmetry"]
    (tmp_path / "config.json").write_text(json.dumps(saved))
    assert experiment_cfg(str(tmp_path)).mirror_symmetry is False
    assert resume_mismatches(parse_cfg(["--env=connect_four"]), saved) == [
        "--mirror_symmetry=True (the run has False)"
    ]
    off = parse_cfg(["--env=connect_four", "--mirror_symmetry=False"])
    assert resume_mismatches(off, saved) == []
    # an env without a mirror: the flag changes no model
    cartpole = parse_cfg(["--env=CartPole-v1"]).to_dict()
    del cartpole["mirror_symmetry"]
    assert resume_mismatches(parse_cfg(["--env=CartPole-v1"]), cartpole) == []
