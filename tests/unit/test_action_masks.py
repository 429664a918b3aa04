"""Action masks (PettingZoo's Dict observation with "action_mask"): illegal actions are never
sampled nor picked deterministically, in the model and in the fused population pass, and the
log-probs, entropy and PPO loss are those of the distribution over the legal actions alone
(checked against NumPy)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_pbt import parse_cfg
from rl_pbt.learning.losses import entropy_loss, ppo_policy_loss
from rl_pbt.models.action_dist import ActionDistribution, action_spec
from rl_pbt.models.actor_critic import make_actor_critic
from rl_pbt.models.obs import obs_spec
from rl_pbt.sampling.fused_inference import FusedPopulationPolicy


def random_masks(rng: np.random.Generator, n: int, nvec: tuple[int, ...]) -> np.ndarray:
    """0/1 masks [n, sum(nvec)] with at least one legal action per head."""
    parts = []
    for k in nvec:
        m = (rng.random((n, k)) < 0.5).astype(np.float32)
        m[np.arange(n), rng.integers(0, k, n)] = 1.0
        parts.append(m)
    return np.concatenate(parts, axis=1)


def legal_log_softmax(logits: np.ndarray, legal: np.ndarray) -> np.ndarray:
    """log-softmax over the legal entries of each row; -inf elsewhere (float64)."""
    z = np.where(legal, logits.astype(np.float64), -np.inf)
    top = z.max(axis=1, keepdims=True)
    return z - top - np.log(np.exp(z - top).sum(axis=1, keepdims=True))


def reference(logits: np.ndarray, mask: np.ndarray, actions: np.ndarray, nvec) -> tuple:
    """NumPy log-prob of `actions` and entropy, each head over its legal actions alone."""
    logp = np.zeros(len(logits))
    ent = np.zeros(len(logits))
    lo = 0
    for i, k in enumerate(nvec):
        ls = legal_log_softmax(logits[:, lo : lo + k], mask[:, lo : lo + k] > 0)
        logp += ls[np.arange(len(logits)), actions[:, i]]
        p = np.exp(ls)
        ent -= np.where(p > 0, p * np.where(np.isfinite(ls), ls, 0.0), 0.0).sum(axis=1)
        lo += k
    return logp, ent


@pytest.mark.parametrize("nvec", [(5,), (3, 4, 2)], ids=["discrete", "multi_discrete"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_log_prob_entropy_and_ppo_loss_are_those_over_legal_actions(nvec, seed):
    rng = np.random.default_rng(seed)
    n = 64
    space = gym.spaces.Discrete(nvec[0]) if len(nvec) == 1 else gym.spaces.MultiDiscrete(nvec)
    spec = action_spec(space)
    logits = rng.normal(0, 3, (n, sum(nvec))).astype(np.float32)
    mask = random_masks(rng, n, nvec)
    d = ActionDistribution(spec, torch.from_numpy(logits), mask=torch.from_numpy(mask))
    actions = d.sample()
    a = actions.numpy()
    lo = 0
    for i, k in enumerate(nvec):  # every sampled action is legal
        assert (mask[np.arange(n), lo + a[:, i]] == 1).all()
        lo += k
    ref_logp, ref_ent = reference(logits, mask, a, nvec)
    np.testing.assert_allclose(d.log_prob(actions).numpy(), ref_logp, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d.entropy().numpy(), ref_ent, rtol=1e-5, atol=1e-5)

    # the PPO surrogate and the entropy bonus, against NumPy over the legal actions only
    old = ref_logp + rng.normal(0, 0.1, n)
    adv = rng.normal(0, 1, n)
    ratio = np.exp(ref_logp - old)
    ref_loss = -np.minimum(ratio * adv, np.clip(ratio, 0.8, 1.2) * adv).mean()
    live = torch.from_numpy(logits).requires_grad_()
    d = ActionDistribution(spec, live, mask=torch.from_numpy(mask))
    valid = torch.ones(n)
    old_t, adv_t = torch.from_numpy(old).float(), torch.from_numpy(adv).float()
    loss, _ = ppo_policy_loss(d.log_prob(actions), old_t, adv_t, 0.2, valid)
    ent_loss = entropy_loss(d.entropy(), valid)
    np.testing.assert_allclose(loss.item(), ref_loss, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ent_loss.item(), -ref_ent.mean(), rtol=1e-4, atol=1e-5)
    # the loss does not reach the logits of illegal actions
    (loss + 0.01 * ent_loss).backward()
    assert (live.grad.numpy()[mask == 0] == 0).all()
    assert (live.grad.numpy()[mask == 1] != 0).any()


def test_the_best_looking_action_is_never_taken_when_illegal():
    spec = action_spec(gym.spaces.Discrete(4))
    logits = torch.tensor([[50.0, 0.0, 0.0, 1.0]]).repeat(5000, 1)
    mask = torch.tensor([[0.0, 1.0, 1.0, 1.0]]).repeat(5000, 1)
    d = ActionDistribution(spec, logits, mask=mask)
    assert (d.sample() != 0).all()
    assert (d.argmax() == 3).all()  # the best legal one
    assert torch.isfinite(d.entropy()).all() and torch.isfinite(d.log_prob(d.sample())).all()
    # without the mask it would be taken almost always
    assert (ActionDistribution(spec, logits).sample() == 0).float().mean() > 0.99


def masked_space(n_obs: int = 6, n_act: int = 4, mask_space=None) -> gym.spaces.Dict:
    return gym.spaces.Dict(
        {
            "observation": gym.spaces.Box(-1, 1, (n_obs,), np.float32),
            "action_mask": mask_space or gym.spaces.Box(0, 1, (n_act,), np.int8),
        }
    )


def cfg(*extra):
    return parse_cfg(["--env=CartPole-v1", "--encoder_mlp_layers", "16", "16", *extra])


def biased_model(space, n_act=4):
    """A model whose policy strongly prefers action 0, whatever it sees."""
    model = make_actor_critic(space, gym.spaces.Discrete(n_act), cfg())
    with torch.no_grad():
        model.policy_head.bias.copy_(torch.tensor([30.0] + [0.0] * (n_act - 1)))
    return model


def masked_obs(rng, n, n_obs=6, n_act=4):
    mask = random_masks(rng, n, (n_act,))
    mask[:, 0] = 0.0  # the preferred action is always illegal
    mask[np.arange(n), rng.integers(1, n_act, n)] = 1.0
    return {
        "observation": torch.from_numpy(rng.uniform(-1, 1, (n, n_obs)).astype(np.float32)),
        "action_mask": torch.from_numpy(mask),
    }


def test_model_acts_and_evaluates_under_the_mask():
    space = masked_space()
    model = biased_model(space)
    assert model.feature_keys == ("observation",)  # the mask is not encoded
    obs = masked_obs(np.random.default_rng(0), 256)
    for deterministic in (False, True):
        actions, logp, _, _ = model.act(obs, None, deterministic=deterministic)
        legal = obs["action_mask"].gather(1, actions).squeeze(1)
        assert (legal == 1).all() and (actions != 0).all()
    # the learner's evaluate on [N, T] sees the same mask and gives the acting log-probs
    actions, logp, _, _ = model.act(obs, None)
    seq = {k: v.view(16, 16, *v.shape[1:]) for k, v in obs.items()}
    lp, ent, _ = model.evaluate(seq, actions.view(16, 16, 1), None, torch.zeros(16, 16), 1)
    assert torch.allclose(lp.reshape(-1), logp, atol=1e-5)
    assert torch.isfinite(ent).all()


def test_temperature_sharpens_or_flattens_the_legal_moves_only():
    """Play at temperature T samples from softmax(logits / T) over the legal actions: T near 0
    is the argmax, a large T nearly uniform over the legal ones, T = 1 the policy itself."""
    space = masked_space()
    model = biased_model(space)
    with torch.no_grad():  # some preference among the legal actions 1..3
        model.policy_head.bias.copy_(torch.tensor([30.0, 1.0, 0.5, 0.0]))
    obs = masked_obs(np.random.default_rng(2), 2000)
    legal = obs["action_mask"].float()
    torch.manual_seed(0)
    a1, lp1, v1, _ = model.act(obs, None)
    torch.manual_seed(0)
    a2, lp2, v2, _ = model.act(obs, None, temperature=1.0)
    assert torch.equal(a1, a2) and torch.equal(lp1, lp2) and torch.equal(v1, v2)
    greedy, _, _, _ = model.act(obs, None, deterministic=True)
    cold, lp_cold, _, _ = model.act(obs, None, temperature=1e-3)
    assert torch.equal(cold, greedy)
    hot, lp_hot, _, _ = model.act(obs, None, temperature=1e3)
    assert (legal.gather(1, hot) == 1).all()  # never the illegal favourite
    # nearly uniform over the legal actions, and the log-probs say so
    torch.testing.assert_close(lp_hot, -legal.sum(1).log(), atol=0.01, rtol=0)
    warm, lp_warm, _, _ = model.act(obs, None, temperature=0.5)
    with torch.no_grad():
        logits = model.policy_head(model.encode(obs)).masked_fill(legal == 0, -1e9)
    want = torch.log_softmax(logits / 0.5, -1).gather(1, warm).squeeze(1)
    torch.testing.assert_close(lp_warm, want, atol=1e-5, rtol=0)
    # where two or more actions are legal, T = 0.5 picks the favourite more often than T = 1
    several = legal.sum(1) > 1
    agree = lambda a: (a == greedy)[several].float().mean()  # noqa: E731
    assert agree(warm) > agree(a1) + 0.05, (agree(warm), agree(a1))


def test_temperature_scales_the_std_of_continuous_actions():
    model = make_actor_critic(
        gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(-1, 1, (2,), np.float32), cfg()
    )
    obs = {"obs": torch.zeros(4000, 3)}
    torch.manual_seed(0)
    spread = [model.act(obs, None, temperature=t)[0].std(0) for t in (0.5, 2.0)]
    torch.testing.assert_close(spread[1] / spread[0], torch.full((2,), 4.0), rtol=0.1, atol=0)


def test_fused_population_pass_respects_the_mask_and_matches_the_model():
    space = masked_space()
    models = [biased_model(space) for _ in range(3)]
    fused = FusedPopulationPolicy(models[0], 3)
    for row, m in enumerate(models):
        fused.load(row, m)
    rng = np.random.default_rng(1)
    obs = masked_obs(rng, 300)
    rows = rng.integers(0, 3, 300)
    a, lp, _ = fused.act(obs, rows)
    assert (obs["action_mask"].gather(1, a).squeeze(1) == 1).all()
    ad, lpd, _ = fused.act(obs, rows, deterministic=True)
    assert (ad != 0).all()
    for row, m in enumerate(models):  # same log-probs as each member's own model
        idx = np.flatnonzero(rows == row)
        part = {k: v[idx] for k, v in obs.items()}
        d = m.dist(m.policy_head(m.encode(part)), part["action_mask"])
        assert torch.allclose(d.log_prob(a[idx]), lp[idx], atol=1e-4)
        assert torch.equal(d.argmax(), ad[idx])


def test_a_uniform_draw_of_zero_never_picks_an_illegal_action(monkeypatch):
    """The fused pass samples by an exponential race on uniform draws; torch.rand can return
    exactly 0 (one draw in 2^24). On a position with one legal action, that draw gave every
    entry -inf and argmax picked action 0, illegal: a long connect four run stopped on it."""
    space = masked_space()
    models = [biased_model(space) for _ in range(2)]
    fused = FusedPopulationPolicy(models[0], 2)
    for row, m in enumerate(models):
        fused.load(row, m)
    n = 40
    mask = torch.zeros(n, 4, dtype=torch.int8)
    mask[torch.arange(n), 1 + torch.arange(n) % 3] = 1  # one legal action, never 0
    obs = {"observation": torch.zeros(n, 6), "action_mask": mask}
    monkeypatch.setattr(torch, "rand_like", torch.zeros_like)  # every draw is 0
    a, lp, _ = fused.act(obs, np.arange(n) % 2)
    assert torch.equal(a[:, 0], 1 + torch.arange(n) % 3)
    torch.testing.assert_close(lp, torch.zeros(n))


def test_multi_binary_mask_and_multi_discrete_heads():
    space = masked_space(n_act=7, mask_space=gym.spaces.MultiBinary(7))
    spec = obs_spec(space)
    assert spec.mask_key == "action_mask" and spec.shape("action_mask") == (7,)
    model = make_actor_critic(space, gym.spaces.MultiDiscrete([3, 4]), cfg())
    rng = np.random.default_rng(2)
    mask = torch.from_numpy(random_masks(rng, 128, (3, 4)))
    obs = {"observation": torch.zeros(128, 6), "action_mask": mask}
    actions, _, _, _ = model.act(obs, None)
    assert (mask[torch.arange(128), actions[:, 0]] == 1).all()
    assert (mask[torch.arange(128), 3 + actions[:, 1]] == 1).all()
    # one row per head (2 x 3): the env's arrays would not fit the flat mask, refused at once
    with pytest.raises(ValueError, match=r"head after head\); got MultiBinary\(2, 3\)"):
        obs_spec(masked_space(n_act=6, mask_space=gym.spaces.MultiBinary((2, 3))))


@pytest.mark.parametrize(
    "action_space,match",
    [
        (gym.spaces.Discrete(5), "one entry per action"),
        (gym.spaces.Box(-1, 1, (4,)), "Discrete"),
    ],
)
def test_a_mask_that_cannot_fit_the_actions_is_refused(action_space, match):
    with pytest.raises(ValueError, match=match):
        make_actor_critic(masked_space(n_act=4), action_space, cfg())


def test_a_mask_alone_is_no_observation():
    space = gym.spaces.Dict({"action_mask": gym.spaces.Box(0, 1, (3,), np.int8)})
    with pytest.raises(ValueError, match="observation"):
        make_actor_critic(space, gym.spaces.Discrete(3), cfg())


def test_fused_pass_masks_every_head_of_a_multi_discrete_action():
    space = masked_space(n_act=7)
    action_space = gym.spaces.MultiDiscrete([3, 4])
    models = [make_actor_critic(space, action_space, cfg()) for _ in range(2)]
    for m in models:  # each head prefers its first action, which the masks forbid
        with torch.no_grad():
            m.policy_head.bias.copy_(torch.tensor([30.0, 0, 0, 30.0, 0, 0, 0]))
    fused = FusedPopulationPolicy(models[0], 2)
    for row, m in enumerate(models):
        fused.load(row, m)
    rng = np.random.default_rng(4)
    mask = random_masks(rng, 200, (3, 4))
    mask[:, 0] = mask[:, 3] = 0.0
    mask[np.arange(200), 1 + rng.integers(0, 2, 200)] = 1.0
    mask[np.arange(200), 4 + rng.integers(0, 3, 200)] = 1.0
    obs = {"observation": torch.zeros(200, 6), "action_mask": torch.from_numpy(mask)}
    rows = rng.integers(0, 2, 200)
    for deterministic in (False, True):
        a, lp, _ = fused.act(obs, rows, deterministic=deterministic)
        assert (obs["action_mask"][torch.arange(200), a[:, 0]] == 1).all()
        assert (obs["action_mask"][torch.arange(200), 3 + a[:, 1]] == 1).all()
    for row, m in enumerate(models):  # the fused log-probs equal each model's masked ones
        idx = np.flatnonzero(rows == row)
        d = m.dist(m.policy_head(m.encode({"observation": obs["observation"][idx]})),
                   obs["action_mask"][idx])  # fmt: skip
        assert torch.allclose(d.log_prob(a[idx]), lp[idx], atol=1e-4)
