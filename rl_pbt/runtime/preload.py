"""Imported once by the forkserver process (`--mp_start_method=forkserver`, the default with
CUDA): every module a child needs, plus one small CPU training step and forward pass so that
what torch sets up lazily on first use is set up here. Children forked from the server then
share those pages instead of each building its own copy. Never touches CUDA."""

from __future__ import annotations

import faster_fifo  # noqa: F401
import gymnasium  # noqa: F401
import numpy  # noqa: F401
import torch

import rl_pbt.learning.learner_process  # noqa: F401
import rl_pbt.runtime.processes  # noqa: F401
import rl_pbt.sampling.inference_server  # noqa: F401
import rl_pbt.sampling.worker_process  # noqa: F401


def _warm_up() -> None:
    torch.set_num_threads(1)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ELU(), torch.nn.Linear(16, 4))
    gru = torch.nn.GRU(4, 4)
    opt = torch.optim.Adam(list(net.parameters()) + list(gru.parameters()))
    x = torch.randn(32, 8)
    out, _ = gru(net(x).unsqueeze(0))
    dist = torch.distributions.Categorical(logits=out.squeeze(0))
    loss = -dist.log_prob(dist.sample()).mean() + dist.entropy().mean()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
    opt.step()
    with torch.no_grad():
        torch.nn.functional.conv2d(torch.zeros(1, 3, 16, 16), torch.zeros(4, 3, 3, 3))


_warm_up()
