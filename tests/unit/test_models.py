import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_pbt import parse_cfg
from rl_pbt.config.parse import ConfigError
from rl_pbt.models.action_dist import ActionDistribution, action_spec
from rl_pbt.models.actor_critic import make_actor_critic
from rl_pbt.models.normalizer import RunningMeanStd


def test_running_mean_std_matches_numpy():
    rng = np.random.default_rng(0)
    data = rng.normal(3.0, 2.0, size=(1000, 4))
    norm = RunningMeanStd((4,), eps=0.0)
    norm.count.fill_(0.0)
    for chunk in np.array_split(data, 7):
        norm.update(torch.as_tensor(chunk))
    np.testing.assert_allclose(norm.mean.numpy(), data.mean(0), rtol=1e-10)
    np.testing.assert_allclose(norm.var.numpy(), data.var(0), rtol=1e-10)


def test_discrete_and_multidiscrete_match_torch_distributions():
    torch.manual_seed(0)
    spec = action_spec(gym.spaces.MultiDiscrete([3, 4]))
    logits = torch.randn(5, 7)
    d = ActionDistribution(spec, logits)
    actions = d.sample()
    ref = torch.distributions.Categorical(logits=logits[:, :3])
    ref2 = torch.distributions.Categorical(logits=logits[:, 3:])
    expected = ref.log_prob(actions[:, 0]) + ref2.log_prob(actions[:, 1])
    torch.testing.assert_close(d.log_prob(actions), expected)
    torch.testing.assert_close(d.entropy(), ref.entropy() + ref2.entropy())


def test_gaussian_matches_torch_normal():
    spec = action_spec(gym.spaces.Box(-1, 1, (3,), np.float32))
    mean, log_std = torch.randn(6, 3), torch.randn(3) * 0.3
    d = ActionDistribution(spec, mean, log_std)
    a = d.sample()
    ref = torch.distributions.Normal(mean, log_std.exp())
    torch.testing.assert_close(d.log_prob(a), ref.log_prob(a).sum(-1))
    torch.testing.assert_close(d.entropy(), ref.entropy().sum(-1))


def test_rnn_evaluate_matches_step_by_step_acting():
    """The learner's chunked GRU unroll gives the same log-probs as acting step by step,
    including state resets after an episode end."""
    cfg = parse_cfg(
        [
            "--env=CartPole-v1",
            "--use_rnn",
            "--rnn_size=16",
            "--encoder_mlp_layers",
            "8",
            "--rollout=8",
            "--recurrence=4",
            "--batch_size=8",
            "--normalize_input=False",
        ]
    )
    obs_space = gym.spaces.Box(-1, 1, (3,), np.float32)
    model = make_actor_critic(obs_space, gym.spaces.Discrete(2), cfg)
    torch.manual_seed(1)
    t_len = 8
    obs = torch.randn(1, t_len, 3)
    dones = torch.zeros(1, t_len)
    dones[0, 2] = 1.0
    h = torch.zeros(1, 16)
    logps, states, actions = [], [], []
    for t in range(t_len):
        if t % 4 == 0:
            states.append(h.clone())
        a, lp, _, h = model.act({"obs": obs[:, t]}, h)
        actions.append(a)
        logps.append(lp)
        h = h * (1 - dones[:, t]).unsqueeze(-1)
    acts = torch.stack(actions, 1)
    rnn_states = torch.stack(states, 1)
    lp_eval, _, _ = model.evaluate({"obs": obs}, acts, rnn_states, dones, 4)
    torch.testing.assert_close(lp_eval, torch.stack(logps, 1), rtol=1e-5, atol=1e-5)


def test_image_and_vector_inputs_use_conv_and_mlp():
    cfg = parse_cfg(["--env=CartPole-v1"])
    space = gym.spaces.Dict(
        {
            "obs": gym.spaces.Box(0, 255, (3, 72, 128), np.uint8),
            "measurements": gym.spaces.Box(-1, 1, (5,), np.float32),
        }
    )
    model = make_actor_critic(space, gym.spaces.Discrete(4), cfg)
    assert isinstance(model.encoders["obs"][0], torch.nn.Conv2d)
    assert isinstance(model.encoders["measurements"][0], torch.nn.Linear)
    obs = {"obs": torch.zeros(2, 3, 72, 128, dtype=torch.uint8), "measurements": torch.zeros(2, 5)}
    a, lp, v, _ = model.act(obs, None)
    assert a.shape == (2, 1) and lp.shape == (2,) and v.shape == (2,)


def test_critic_of_its_own_keeps_the_losses_apart():
    """--actor_critic_share_weights=False: the value loss moves only the critic's layers and
    the policy's loss only the policy's; acting and evaluate agree on values and log-probs."""
    argv = ["--env=CartPole-v1", "--encoder_mlp_layers", "32", "16"]
    cfg = parse_cfg([*argv, "--actor_critic_share_weights=False"])
    env_space = gym.spaces.Dict(
        {
            "observation": gym.spaces.Box(0, 1, (84,), np.float32),
            "action_mask": gym.spaces.Box(0, 1, (7,), np.int8),
        }
    )
    torch.manual_seed(0)
    model = make_actor_critic(env_space, gym.spaces.Discrete(7), cfg)
    shared = make_actor_critic(env_space, gym.spaces.Discrete(7), parse_cfg(argv))
    # one more encoder, the size of the policy's
    critic = sum(p.numel() for p in model.critic_encoders.parameters())
    assert critic == sum(p.numel() for p in model.encoders.parameters())
    assert sum(p.numel() for p in model.parameters()) == critic + sum(
        p.numel() for p in shared.parameters()
    )
    gen = torch.Generator().manual_seed(1)
    cells = torch.randint(0, 3, (3, 5, 42), generator=gen)
    obs = {
        "observation": torch.cat([(cells == 1).float(), (cells == 2).float()], dim=-1),
        "action_mask": (torch.rand(3, 5, 7, generator=gen) > 0.3).to(torch.int8),
    }
    obs["action_mask"][..., 3] = 1
    flat = {k: v.reshape(15, *v.shape[2:]) for k, v in obs.items()}
    actions, logp_act, values_act, _ = model.act(flat, None)
    logp, entropy, values = model.evaluate(obs, actions.view(3, 5, 1), None, torch.zeros(3, 5), 1)
    torch.testing.assert_close(logp.reshape(-1), logp_act)
    torch.testing.assert_close(model.denormalize_value(values).reshape(-1), values_act)

    def grads(loss):
        model.zero_grad()
        loss.backward(retain_graph=True)
        return {n for n, p in model.named_parameters() if p.grad is not None and p.grad.any()}

    value_moves = grads(values.square().mean())
    policy_moves = grads(-(logp + 0.01 * entropy).mean())
    assert value_moves and all(n.startswith(("critic_", "value_head")) for n in value_moves)
    assert policy_moves and all(n.startswith(("encoders.", "policy_head")) for n in policy_moves)


def test_critic_of_its_own_needs_no_rnn():
    with pytest.raises(ConfigError, match="--actor_critic_share_weights=False needs --use_rnn"):
        parse_cfg(["--env=CartPole-v1", "--actor_critic_share_weights=False", "--use_rnn"])


def test_critic_of_its_own_is_part_of_the_model(tmp_path):
    """A run saved before the flag existed shared the weights; resuming it with a critic of
    its own is refused by name, as for any flag that changes the network."""
    import json

    from rl_pbt.config.parse import resume_mismatches
    from rl_pbt.models.loading import experiment_cfg

    saved = parse_cfg(["--env=CartPole-v1"]).to_dict()
    del saved["actor_critic_share_weights"]
    (tmp_path / "config.json").write_text(json.dumps(saved))
    assert experiment_cfg(str(tmp_path)).actor_critic_share_weights is True
    own = parse_cfg(["--env=CartPole-v1", "--actor_critic_share_weights=False"])
    assert resume_mismatches(own, saved) == [
        "--actor_critic_share_weights=False (the run has True)"
    ]
    assert resume_mismatches(parse_cfg(["--env=CartPole-v1"]), saved) == []
