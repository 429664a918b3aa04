"""The inference server answers like each policy's own model: the values of its policy, the
log-prob of the action it chose under that policy, the next RNN state, and the version of the
weights that acted; actors of other servers and snapshot seats are left alone."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_pbt import parse_cfg
from rl_pbt.memory.device_weights import WeightsWriter
from rl_pbt.models.actor_critic import make_actor_critic
from rl_pbt.runtime.messages import InferenceRequest, LocalQueue, drain
from rl_pbt.sampling.inference_server import NO_ROW, InferenceIO, InferencePlan, InferenceServer


def build(use_rnn, num_policies=3, fused=True):
    cfg = parse_cfg(
        ["--env=CartPole-v1", "--encoder_mlp_layers", "16", f"--use_rnn={use_rnn}"]
        + ["--rnn_size=8"]
    )
    obs_space = gym.spaces.Box(-1, 1, (4,), np.float32)
    act_space = gym.spaces.Discrete(3)

    def make_model():
        return make_actor_critic(obs_space, act_space, cfg)

    torch.manual_seed(0)
    models = [make_model() for _ in range(num_policies)]
    io = InferenceIO.allocate(2, 6, models[0].obs_spec, models[0].act_spec, models[0].rnn_size, 2)
    # policies 0 and 2 on one server, 1 on the other
    plan = InferencePlan.for_devices(io, {0: "cpu", 1: "cpu:1", 2: "cpu"}, LocalQueue, fused=fused)
    plan.weight_queues = [LocalQueue(), LocalQueue()]
    # each "learner" hands its buffer to its server and publishes, as Learner.share_weights does
    writers = []
    for p, m in enumerate(models):
        w = WeightsWriter(plan.board, p, m, "cpu")
        plan.weights_queue_of(p).put(w.message())
        w.publish(m, version=10 * p + 1)
        writers.append(w)
    return cfg, models, writers, io, plan, make_model


@pytest.mark.parametrize("use_rnn,fused", [(False, True), (False, False), (True, False)])
def test_answers_match_each_policy_model(use_rnn, fused):
    cfg, models, writers, io, plan, make_model = build(use_rnn, fused=fused)
    assert plan.policies == [[0, 2], [1]] and plan.server_of == [0, 1, 0]
    server = InferenceServer(plan, 0, make_model)
    assert server.wait_published(lambda: False, timeout=5)
    assert (server.fused is not None) == (fused and not use_rnn)
    g = torch.Generator().manual_seed(1)
    io.obs["obs"][:] = torch.rand(io.obs["obs"].shape, generator=g) * 2 - 1
    io.h[:] = torch.rand(io.h.shape, generator=g)
    rows = torch.tensor([[0, 1, 2, NO_ROW, 0, 2], [2, 2, 1, 0, NO_ROW, 0]])
    io.rows[:] = rows
    h_before = io.h.clone()
    io.actions.fill_(-7)
    server.serve([InferenceRequest(0, 0, 0, 6), InferenceRequest(1, 1, 2, 6)])
    replies = drain(plan.reply_queues[0]) + drain(plan.reply_queues[1])
    assert sorted((r.server, r.split) for r in replies) == [(0, 0), (0, 1)]
    served = 0
    for w in range(2):
        for a in range(6):
            row = int(rows[w, a])
            asked = w == 0 or a >= 2
            if not asked or row not in (0, 2):
                assert int(io.actions[w, a, 0]) == -7  # not this server's actor: untouched
                continue
            served += 1
            model = models[row]
            obs = {"obs": io.obs["obs"][w, a][None]}
            x = model.encode(obs)
            if use_rnn:
                out, h = model.core(x[None], h_before[w, a][None, None])
                x = out[0]
                assert torch.allclose(io.h[w, a], h[0, 0], atol=1e-6)
            d = model.dist(model.policy_head(x))
            value = model.denormalize_value(model.value_head(x).squeeze(-1))
            assert torch.allclose(io.values[w, a], value[0], atol=1e-5)
            logp = d.log_prob(io.actions[w, a][None])
            assert torch.allclose(io.log_probs[w, a], logp[0], atol=1e-5)
            assert int(io.versions[w, a]) == 10 * row + 1
    assert served == 6
    forwards, actors = io.stats[0].tolist()
    assert forwards == 1 and actors == served


def test_reloads_weights_when_the_learner_publishes():
    cfg, models, writers, io, plan, make_model = build(False)
    server = InferenceServer(plan, 1, make_model)
    assert server.wait_published(lambda: False, timeout=5)
    io.rows[0] = 1
    server.serve([InferenceRequest(0, 0, 0, 6)])
    assert (io.versions[0] == 11).all()
    with torch.no_grad():
        for t in models[1].parameters():
            t.add_(0.5)
    writers[1].publish(models[1], version=99)
    server.serve([InferenceRequest(0, 0, 0, 6)])
    assert (io.versions[0] == 99).all()
    x = models[1].encode({"obs": io.obs["obs"][0]})
    value = models[1].denormalize_value(models[1].value_head(x).squeeze(-1))
    assert torch.allclose(io.values[0], value, atol=1e-5)
