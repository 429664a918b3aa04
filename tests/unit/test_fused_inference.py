"""FusedPopulationPolicy against ActorCritic.act: same actions, log-probs and values per row."""

from __future__ import annotations

import copy
import functools

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_pbt import parse_cfg
from rl_pbt.models.actor_critic import ActorCritic, make_actor_critic
from rl_pbt.sampling.fused_inference import FusedPopulationPolicy

ACTION_SPACES = {
    "discrete": gym.spaces.Discrete(3),
    "multidiscrete": gym.spaces.MultiDiscrete([3, 4]),
    "box": gym.spaces.Box(-1, 1, (3,), np.float32),
}
OBS_SPACES = {
    "vector": gym.spaces.Box(-10, 10, (5,), np.float32),
    "dict": gym.spaces.Dict(
        {
            "a": gym.spaces.Box(-10, 10, (4,), np.float32),
            "b": gym.spaces.Box(-10, 10, (3,), np.float32),
        }
    ),
}


@pytest.fixture(autouse=True)
def single_thread():
    """Rollout workers run single-threaded; thread start-up would dominate these tiny ops."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@functools.cache
def make_cfg(layers: tuple[int, ...], norm_in: bool, norm_ret: bool, extra: tuple[str, ...] = ()):
    argv = ["--env=CartPole-v1", "--encoder_mlp_layers", *map(str, layers)]
    argv += [f"--normalize_input={norm_in}", f"--normalize_returns={norm_ret}", *extra]
    return parse_cfg(argv)


@torch.no_grad()
def randomize(model: ActorCritic, gen: torch.Generator) -> None:
    """Distinct weights with clearly non-uniform action probabilities, and normaliser
    statistics far from the identity so that centring, scaling and clipping all matter."""
    for name, p in model.named_parameters():
        if name == "log_std":
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
        elif p.dim() == 2:
            p.copy_(torch.randn(p.shape, generator=gen) * 1.5 / p.shape[1] ** 0.5)
        else:
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    for norm in model.obs_norms.values():
        norm.mean.copy_(torch.randn(norm.mean.shape, generator=gen, dtype=torch.float64) * 2)
        norm.var.copy_(torch.rand(norm.var.shape, generator=gen, dtype=torch.float64) * 4 + 0.2)
    model.ret_norm.mean.fill_(float(torch.randn((), generator=gen)) * 3)
    model.ret_norm.var.fill_(float(torch.rand((), generator=gen)) * 8 + 0.5)


def make_population(obs_space, action_space, cfg, num_rows: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    models = []
    for _ in range(num_rows):
        model = make_actor_critic(obs_space, action_space, cfg)
        randomize(model, gen)
        models.append(model)
    fused = FusedPopulationPolicy(models[0], num_rows)
    for row, model in enumerate(models):
        fused.load(row, model)
    return models, fused


def make_obs(obs_space, n: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    spaces = obs_space.spaces if isinstance(obs_space, gym.spaces.Dict) else {"obs": obs_space}
    # wide enough that some inputs hit the normaliser's clip
    return {k: torch.randn(n, s.shape[0], generator=gen) * 4 for k, s in spaces.items()}


def subset(obs: dict[str, torch.Tensor], idx: np.ndarray) -> dict[str, torch.Tensor]:
    t = torch.from_numpy(idx)
    return {k: v[t] for k, v in obs.items()}


def row_layouts(num_rows: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Grouped and equal (no reordering), shuffled and uneven, and some rows absent."""
    grouped = np.repeat(np.arange(num_rows), 2)
    uneven = rng.permutation(np.concatenate([np.arange(num_rows), rng.integers(0, num_rows, 9)]))
    layouts = [grouped, uneven]
    if num_rows > 1:
        present = rng.choice(num_rows, size=max(1, num_rows // 2), replace=False)
        layouts.append(rng.choice(present, size=7))
    return layouts


def check_against_models(models, fused, obs_space, rows, gen, deterministic: bool) -> None:
    obs = make_obs(obs_space, rows.shape[0], gen)
    actions, log_probs, values = fused.act(obs, rows, deterministic=deterministic)
    assert actions.shape == (rows.shape[0], models[0].act_spec.dim)
    assert actions.dtype == models[0].act_spec.dtype
    assert log_probs.shape == values.shape == (rows.shape[0],)
    for row in np.unique(rows):
        idx = np.flatnonzero(rows == row)
        model, sub, t = models[row], subset(obs, idx), torch.from_numpy(idx)
        if deterministic:
            ref_a, ref_lp, ref_v, _ = model.act(sub, None, deterministic=True)
            torch.testing.assert_close(actions[t], ref_a, rtol=1e-5, atol=1e-5)
        else:
            with torch.no_grad():
                x = model.encode(sub)
                ref_lp = model.dist(model.policy_head(x)).log_prob(actions[t])
                xv = model.encode(sub, critic=True) if not model.share_weights else x
                ref_v = model.denormalize_value(model.value_head(xv).squeeze(-1))
        torch.testing.assert_close(log_probs[t], ref_lp, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(values[t], ref_v, rtol=1e-5, atol=1e-5)


# every action space with every observation layout, each normalisation setting and both
# encoder depths; the mixed normalisation settings once per action space
CASES = [
    (action, obs, layers, norm_in, norm_ret)
    for action in ACTION_SPACES
    for obs in OBS_SPACES
    for layers, norm_in, norm_ret in [
        ((64, 64), True, True),
        ((32,), False, False),
        ((32,), obs == "vector", obs != "vector"),
    ]
]


@pytest.mark.parametrize("action,obs,layers,norm_in,norm_ret", CASES)
def test_matches_row_models(action, obs, layers, norm_in, norm_ret):
    obs_space, action_space = OBS_SPACES[obs], ACTION_SPACES[action]
    cfg = make_cfg(layers, norm_in, norm_ret)
    rng = np.random.default_rng(1)
    gen = torch.Generator().manual_seed(2)
    for num_rows in (1, 3, 8):
        models, fused = make_population(obs_space, action_space, cfg, num_rows, seed=num_rows)
        for rows in row_layouts(num_rows, rng):
            for deterministic in (True, False):
                check_against_models(models, fused, obs_space, rows, gen, deterministic)


@pytest.mark.parametrize("obs", list(OBS_SPACES))
def test_keys_in_separate_layers_match(obs, monkeypatch):
    """Wide layers with several observation keys run per key instead of block-diagonal."""
    monkeypatch.setattr(FusedPopulationPolicy, "block_diag_max_width", 0)
    obs_space = OBS_SPACES[obs]
    cfg = make_cfg((32, 16, 8), True, True)
    models, fused = make_population(obs_space, ACTION_SPACES["multidiscrete"], cfg, 3)
    assert len(fused._weights.layers[1]) == len(fused.keys)
    gen = torch.Generator().manual_seed(3)
    for rows in row_layouts(3, np.random.default_rng(4)):
        check_against_models(models, fused, obs_space, rows, gen, deterministic=True)


@pytest.mark.parametrize("action", list(ACTION_SPACES))
def test_critic_of_its_own_matches(action):
    """--actor_critic_share_weights=False: the critic's layers run as a second branch; the
    logits come from the policy's, the value from the critic's (each differs from the other)."""
    obs_space = OBS_SPACES["vector"]
    cfg = make_cfg((16, 8), True, True, ("--actor_critic_share_weights=False",))
    models, fused = make_population(obs_space, ACTION_SPACES[action], cfg, 3)
    assert fused.critic and len(fused._weights.layers[1]) == 2
    gen = torch.Generator().manual_seed(6)
    for rows in row_layouts(3, np.random.default_rng(7)):
        for deterministic in (True, False):
            check_against_models(models, fused, obs_space, rows, gen, deterministic)
    # the value does not read the policy's layers
    with torch.no_grad():
        for p in models[0].encoders.parameters():
            p.mul_(2.0)
    obs = make_obs(obs_space, 4, gen)
    before = fused.act(obs, np.zeros(4, np.int64), deterministic=True)[2]
    fused.load(0, models[0])
    after = fused.act(obs, np.zeros(4, np.int64), deterministic=True)[2]
    torch.testing.assert_close(before, after)
    check_against_models(models, fused, obs_space, np.array([0, 0, 1]), gen, True)


def test_encoder_without_layers():
    cfg = copy.copy(make_cfg((8,), True, True))
    cfg.encoder_mlp_layers = []  # the command line insists on at least one layer
    obs_space = OBS_SPACES["dict"]
    models, fused = make_population(obs_space, ACTION_SPACES["box"], cfg, 2)
    assert len(models[0].encoders["a"]) == 0
    gen = torch.Generator().manual_seed(5)
    rows = np.array([1, 0, 1, 1, 0])
    for deterministic in (True, False):
        check_against_models(models, fused, obs_space, rows, gen, deterministic)


@pytest.mark.parametrize("action", list(ACTION_SPACES))
def test_sampling_follows_model_distribution(action):
    obs_space, action_space = OBS_SPACES["vector"], ACTION_SPACES[action]
    models, fused = make_population(obs_space, action_space, make_cfg((32,), True, True), 3)
    gen = torch.Generator().manual_seed(6)
    per_row = 4000
    one = make_obs(obs_space, 3, gen)
    rows = np.repeat(np.arange(3), per_row)
    obs = {k: v.repeat_interleave(per_row, 0) for k, v in one.items()}
    # interleave the rows so that sampling goes through the regrouping path
    perm = np.random.default_rng(7).permutation(rows.shape[0])
    rows, obs = rows[perm], subset(obs, perm)
    torch.manual_seed(8)
    actions, _, _ = fused.act(obs, rows)
    for row, model in enumerate(models):
        sampled = actions[torch.from_numpy(rows == row)]
        with torch.no_grad():
            d = model.dist(model.policy_head(model.encode(subset(one, np.array([row])))))
        if model.act_spec.kind == "discrete":
            assert (sampled >= 0).all() and (sampled < torch.tensor(model.act_spec.nvec)).all()
            for head, log_softmax in enumerate(d.log_softmax):
                probs = log_softmax.exp()[0]
                freq = torch.bincount(sampled[:, head], minlength=probs.shape[0]) / per_row
                torch.testing.assert_close(freq, probs, rtol=0, atol=0.03)
        else:
            torch.testing.assert_close(sampled.mean(0), d.mean[0], rtol=0, atol=0.1)
            torch.testing.assert_close(sampled.std(0), d.log_std[0].exp(), rtol=0.08, atol=0)


def test_load_updates_row():
    obs_space, action_space = OBS_SPACES["vector"], ACTION_SPACES["multidiscrete"]
    models, fused = make_population(obs_space, action_space, make_cfg((32,), True, True), 4)
    gen = torch.Generator().manual_seed(9)
    rows = np.array([3, 1, 1, 0, 2, 1, 3])
    partial = np.array([1, 3, 1])  # goes through the cached subset of stacked weights
    obs = make_obs(obs_space, rows.shape[0], gen)
    _, _, before = fused.act(obs, rows, deterministic=True)
    fused.act(subset(obs, np.arange(3)), partial, deterministic=True)

    randomize(models[1], torch.Generator().manual_seed(10))
    _, _, stale = fused.act(obs, rows, deterministic=True)
    torch.testing.assert_close(stale, before)  # rows hold copies, not references
    fused.load(1, models[1])
    _, _, after = fused.act(obs, rows, deterministic=True)
    changed = torch.from_numpy(rows == 1)
    assert not torch.allclose(after[changed], before[changed])
    torch.testing.assert_close(after[~changed], before[~changed])
    check_against_models(models, fused, obs_space, rows, gen, deterministic=True)
    check_against_models(models, fused, obs_space, partial, gen, deterministic=True)


def test_supported():
    cfg = make_cfg((16,), True, True)
    discrete = ACTION_SPACES["discrete"]
    for obs_space in OBS_SPACES.values():
        for action_space in ACTION_SPACES.values():
            assert FusedPopulationPolicy.supported(make_actor_critic(obs_space, action_space, cfg))
    image = gym.spaces.Dict(
        {
            "obs": gym.spaces.Box(0, 255, (3, 36, 36), np.uint8),
            "measurements": gym.spaces.Box(-1, 1, (5,), np.float32),
        }
    )
    assert not FusedPopulationPolicy.supported(make_actor_critic(image, discrete, cfg))
    own = make_cfg((16,), True, True, ("--actor_critic_share_weights=False",))
    assert FusedPopulationPolicy.supported(make_actor_critic(OBS_SPACES["vector"], discrete, own))
    assert not FusedPopulationPolicy.supported(make_actor_critic(OBS_SPACES["dict"], discrete, own))
    rnn_cfg = make_cfg((16,), True, True, ("--use_rnn", "--rnn_size=8"))
    rnn = make_actor_critic(OBS_SPACES["vector"], discrete, rnn_cfg)
    assert not FusedPopulationPolicy.supported(rnn)
    with pytest.raises(ValueError):
        FusedPopulationPolicy(rnn, 2)


def test_rejects_other_layout_and_bad_rows():
    obs_space, discrete = OBS_SPACES["vector"], ACTION_SPACES["discrete"]
    fused = FusedPopulationPolicy(
        make_actor_critic(obs_space, discrete, make_cfg((16,), True, True)), 2
    )
    with pytest.raises(ValueError):
        fused.load(0, make_actor_critic(obs_space, discrete, make_cfg((8,), True, True)))
    obs = make_obs(obs_space, 2, torch.Generator().manual_seed(0))
    with pytest.raises(IndexError):
        fused.act(obs, np.array([0, 2]))
    actions, log_probs, values = fused.act(make_obs(obs_space, 0, torch.Generator()), [])
    assert actions.shape == (0, 1) and log_probs.shape == values.shape == (0,)
