"""The learner's GRU over packed sequences (cut at episode ends) equals stepping the GRU one
time step at a time with the state zeroed after every episode end."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_pbt import parse_cfg
from rl_pbt.models.actor_critic import ActorCritic, make_actor_critic, sequence_plan


def stepwise_unroll(model: ActorCritic, x, rnn_states, dones, recurrence: int):
    """The reference: one GRU step at a time over chunks of `recurrence` steps, the state
    multiplied by (1 - done) after each step. x [N, T, F] -> [N, T, H]."""
    n, t, _ = x.shape
    chunks = t // recurrence
    x = x.reshape(n * chunks, recurrence, -1).transpose(0, 1)
    h = rnn_states.reshape(n * chunks, -1)
    keep = 1.0 - dones.reshape(n * chunks, recurrence).transpose(0, 1).float()
    outs = []
    for step in range(recurrence):
        out, hn = model.core(x[step : step + 1], h.unsqueeze(0))
        outs.append(out.squeeze(0))
        h = hn.squeeze(0) * keep[step].unsqueeze(-1)
    return torch.stack(outs, 0).transpose(0, 1).reshape(n, t, -1)


def stepwise_evaluate(model: ActorCritic, obs, actions, rnn_states, dones, recurrence: int):
    n, t = actions.shape[:2]
    x = model.encode({k: v.reshape(n * t, *v.shape[2:]) for k, v in obs.items()})
    x = stepwise_unroll(model, x.view(n, t, -1), rnn_states, dones, recurrence)
    x = x.reshape(n * t, -1)
    d = model.dist(model.policy_head(x))
    logp = d.log_prob(actions.reshape(n * t, -1)).view(n, t)
    return logp, d.entropy().view(n, t), model.value_head(x).view(n, t)


def make_model(rollout: int, recurrence: int, actions: gym.Space):
    cfg = parse_cfg(
        [
            "--env=CartPole-v1",
            "--use_rnn",
            "--rnn_size=12",
            "--encoder_mlp_layers",
            "10",
            f"--rollout={rollout}",
            f"--recurrence={recurrence}",
            f"--batch_size={rollout}",
            "--normalize_input=False",
        ]
    )
    return make_actor_critic(gym.spaces.Box(-1, 1, (5,), np.float32), actions, cfg)


def random_dones(gen: torch.Generator, n: int, t: int, rate: float) -> torch.Tensor:
    dones = (torch.rand(n, t, generator=gen) < rate).float()
    dones[0, 0] = 1.0  # an episode ends after the very first step
    dones[1, t - 1] = 1.0  # and at the last step of a trajectory
    dones[2, :] = 1.0  # every sequence one step long
    dones[3, :] = 0.0  # no reset at all
    return dones


@pytest.mark.parametrize("recurrence", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("space", [gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2,))])
def test_packed_gru_equals_stepwise_unroll(recurrence, space):
    t = 16
    torch.manual_seed(recurrence)
    model = make_model(t, recurrence, space)
    gen = torch.Generator().manual_seed(100 + recurrence)
    n = 7
    obs = {"obs": torch.randn(n, t, 5, generator=gen)}
    if isinstance(space, gym.spaces.Discrete):
        actions = torch.randint(0, 3, (n, t, 1), generator=gen)
    else:
        actions = torch.randn(n, t, 2, generator=gen)
    states = torch.randn(n, t // recurrence, 12, generator=gen)
    dones = random_dones(gen, n, t, 0.2)
    with torch.no_grad():
        got = model.evaluate(obs, actions, states, dones, recurrence)
        want = stepwise_evaluate(model, obs, actions, states, dones, recurrence)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_gradients_equal_stepwise_unroll():
    t, recurrence = 12, 4
    torch.manual_seed(0)
    model = make_model(t, recurrence, gym.spaces.Discrete(3))
    gen = torch.Generator().manual_seed(1)
    obs = {"obs": torch.randn(5, t, 5, generator=gen)}
    actions = torch.randint(0, 3, (5, t, 1), generator=gen)
    states = torch.randn(5, t // recurrence, 12, generator=gen)
    dones = random_dones(gen, 5, t, 0.3)
    grads = []
    for evaluate in (model.evaluate, lambda *a: stepwise_evaluate(model, *a)):
        model.zero_grad()
        logp, ent, values = evaluate(obs, actions, states, dones, recurrence)
        (logp.sum() + ent.sum() + values.square().sum()).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for g, w in zip(*grads):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_plan_made_ahead_equals_plan_made_inside():
    t, recurrence = 8, 4
    torch.manual_seed(0)
    model = make_model(t, recurrence, gym.spaces.Discrete(3))
    gen = torch.Generator().manual_seed(2)
    obs = {"obs": torch.randn(4, t, 5, generator=gen)}
    actions = torch.randint(0, 3, (4, t, 1), generator=gen)
    states = torch.randn(4, 2, 12, generator=gen)
    dones = random_dones(gen, 4, t, 0.25)
    plan = sequence_plan(dones.numpy(), recurrence)
    with torch.no_grad():
        a = model.evaluate(obs, actions, states, dones, recurrence, plan=plan)
        b = model.evaluate(obs, actions, states, dones, recurrence)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


def test_sequence_plan_by_hand():
    # one trajectory of 6 steps in chunks of 3; episode ends after steps 0 and 4
    dones = np.array([[1, 0, 0, 0, 1, 0]], dtype=np.float32)
    plan = sequence_plan(dones, 3)
    # sequences: [0], [1, 2] (chunk 0, after a reset), [3, 4] (chunk 1's state), [5] (reset)
    # longest first, stable: [1, 2], [3, 4], [0], [5]
    assert plan.batch_sizes.tolist() == [4, 2]
    assert plan.packed_from.tolist() == [1, 3, 0, 5, 2, 4]
    assert plan.packed_at[plan.packed_from].tolist() == list(range(6))
    assert plan.h0_from.tolist() == [2, 1, 0, 2]  # 2 = the zero row after the two chunks
    with pytest.raises(ValueError, match="multiple of the recurrence"):
        sequence_plan(np.zeros((1, 5)), 2)


def reference_replayed_from_stale(stale: np.ndarray, dones: np.ndarray, rec: int) -> np.ndarray:
    """Step by step: a step is stale when a stale step precedes it (or is it) in its sequence,
    the steps from a chunk's start (every `rec`) or from after an episode's end."""
    out = np.zeros_like(stale)
    for row in range(stale.shape[0]):
        carried = False
        for s in range(stale.shape[1]):
            if s % rec == 0 or (s > 0 and dones[row, s - 1]):
                carried = False
            carried = carried or bool(stale[row, s])
            out[row, s] = carried
    return out


def test_steps_replayed_through_a_stale_step_are_stale():
    """An RNN learner rebuilds each sequence's states from its first stored state with its own
    weights: after a PBT copy, a step later in a chunk that began before the copy sees another
    state than its actor did, and must not train as if on-policy."""
    from rl_pbt.learning.learner import replayed_from_stale

    stale = torch.tensor([[0, 1, 0, 0, 0, 0, 1, 0]], dtype=torch.bool)
    dones = torch.tensor([[0, 0, 1, 0, 0, 0, 0, 0]])
    out = replayed_from_stale(stale, dones, 4)
    # chunk 1: steps 1-2 (the episode ends at 2); chunk 2: from step 6 to its end
    assert out.int().tolist() == [[0, 1, 1, 0, 0, 0, 1, 1]]
    rng = np.random.default_rng(0)
    for rec in (1, 2, 4, 8):
        stale = rng.random((6, 16)) < 0.1
        dones = rng.random((6, 16)) < 0.15
        got = replayed_from_stale(torch.from_numpy(stale), torch.from_numpy(dones), rec)
        assert np.array_equal(got.numpy(), reference_replayed_from_stale(stale, dones, rec))
