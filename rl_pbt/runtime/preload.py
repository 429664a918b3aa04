"""Imported once by the forkserver process (`--mp_start_method=forkserver`, the default with
CUDA): every module a child needs, so children forked from the server share those pages
instead of each importing its own copy.

Imports only, no torch operation: on a CUDA build of torch, a CPU operation or an optimiser
step here can initialise the CUDA driver in the server (an optimiser step asks whether a CUDA
graph capture is under way), and every child forked from it then fails on its first CUDA call
with "initialization error"."""

from __future__ import annotations

import faster_fifo  # noqa: F401
import gymnasium  # noqa: F401
import numpy  # noqa: F401
import torch  # noqa: F401

import rl_pbt.learning.learner_process  # noqa: F401
import rl_pbt.runtime.processes  # noqa: F401
import rl_pbt.sampling.inference_server  # noqa: F401
import rl_pbt.sampling.worker_process  # noqa: F401
