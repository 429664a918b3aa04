"""Inference server (`--inference=device`): one per device, serving every policy placed on it.

Rollout workers write each actor's observation, policy row and RNN state into `InferenceIO`
(shared memory) and send an `InferenceRequest` naming a range of their actors; the server
takes every request waiting, runs one forward pass per policy over the actors of all of them
(one fused pass over the population on the CPU), writes actions, log-probs, values, next RNN
states and the weights' version back, and answers each worker on its reply queue.

Weights never pass through the host: each learner hands the server its device buffer once
(`device_weights`), and the server copies a policy's newest state device to device when that
policy's publish count changes.

Collaborators: rollout workers (requests, replies), learners (weights buffers, WeightBoard),
the runner (starts it; reads its batch statistics).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np
import torch

from rl_pbt.memory.device_weights import WeightBoard, WeightsReader, drain_buffers
from rl_pbt.models.action_dist import ActionSpec
from rl_pbt.models.obs import ObsSpec, torch_dtype
from rl_pbt.runtime import heartbeat as hb
from rl_pbt.runtime.messages import InferenceReply, InferenceRequest, drain
from rl_pbt.sampling.fused_inference import FusedPopulationPolicy

NO_ROW = -1  # an actor the server does not act for (a frozen snapshot's seat, acted locally)


@dataclass
class InferenceIO:
    """Per rollout worker and actor: what to act on, and the answer. Shared memory."""

    obs: dict[str, torch.Tensor]  # [W, A, *shape]
    rows: torch.Tensor  # [W, A] int64: the policy of each actor, NO_ROW for none
    h: torch.Tensor  # [W, A, H]: RNN state before the step, replaced by the one after
    actions: torch.Tensor  # [W, A, dim]
    log_probs: torch.Tensor  # [W, A]
    values: torch.Tensor  # [W, A]
    versions: torch.Tensor  # [W, A] int64: learner version of the weights that acted
    stats: torch.Tensor  # [servers, 2] float64: forward passes, actors served

    @classmethod
    def allocate(
        cls,
        num_workers: int,
        actors: int,
        obs_spec: ObsSpec,
        act: ActionSpec,
        rnn_size: int,
        num_servers: int,
    ) -> InferenceIO:
        def shared(shape, dtype):
            return torch.zeros(shape, dtype=dtype).share_memory_()

        w, a = num_workers, actors
        return cls(
            obs={k: shared((w, a, *s), torch_dtype(d)) for k, s, d in obs_spec.items()},
            rows=torch.full((w, a), NO_ROW, dtype=torch.int64).share_memory_(),
            h=shared((w, a, max(rnn_size, 1)), torch.float32),
            actions=shared((w, a, act.dim), act.dtype),
            log_probs=shared((w, a), torch.float32),
            values=shared((w, a), torch.float32),
            versions=shared((w, a), torch.int64),
            stats=shared((num_servers, 2), torch.float64),
        )


@dataclass
class InferencePlan:
    """Who serves whom: picklable, part of the RunSpec."""

    io: InferenceIO
    devices: list[str]  # server i runs on devices[i]
    policies: list[list[int]]  # server i serves policies[i]
    server_of: list[int]  # policy p -> its server
    request_queues: list  # per server
    reply_queues: list  # per rollout worker
    fused: bool = True  # --fused_inference: one pass over all of a CPU server's policies
    board: Optional[WeightBoard] = None  # publish counts of the weights shared on the device
    # per server: learners' WeightsBuffer messages. Set by the runner once it knows how
    # children start (a multiprocessing queue, which moves CUDA tensors as IPC handles)
    weight_queues: Optional[list] = None

    @classmethod
    def for_devices(
        cls, io: InferenceIO, device_of: dict[int, str], make_queue: Callable, fused: bool = True
    ):
        devices = sorted(set(device_of.values()))
        policies = [[p for p in sorted(device_of) if device_of[p] == d] for d in devices]
        server_of = [devices.index(device_of[p]) for p in sorted(device_of)]
        return cls(
            io,
            devices,
            policies,
            server_of,
            [make_queue() for _ in devices],
            [make_queue() for _ in range(io.rows.shape[0])],
            fused,
            WeightBoard.allocate(len(device_of)),
        )

    def weights_queue_of(self, policy_id: int):
        return self.weight_queues[self.server_of[policy_id]]


class InferenceServer:
    def __init__(
        self,
        plan: InferencePlan,
        server_idx: int,
        make_model: Callable[[], Any],
        heartbeats: Optional[hb.Heartbeats] = None,
        hb_idx: int = 0,
    ):
        self.plan = plan
        self.idx = server_idx
        self.io = plan.io
        self.device = torch.device(plan.devices[server_idx])
        self.policies = list(plan.policies[server_idx])
        self.heartbeats = heartbeats
        self.hb_idx = hb_idx
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self.models = {}
        for p in self.policies:
            model = make_model().to(self.device)
            model.eval()
            self.models[p] = model
        template = next(iter(self.models.values()))
        self.obs_keys = template.obs_spec.keys
        self.rnn_size = template.rnn_size
        # the CPU gains from one fused pass over many small policies; a GPU batches per policy
        fused_ok = (
            plan.fused and self.device.type == "cpu" and FusedPopulationPolicy.supported(template)
        )
        self.fused = FusedPopulationPolicy(template, max(self.policies) + 1) if fused_ok else None
        self.readers = {p: WeightsReader(plan.board, p) for p in self.policies}
        self.weights_queue = plan.weight_queues[server_idx]
        self.version = np.zeros(max(self.policies) + 1, dtype=np.int64)

    def _beat(self, activity: int, detail: int = 0) -> None:
        if self.heartbeats is not None:
            self.heartbeats.beat(self.hb_idx, activity, detail)

    def _attach_buffers(self) -> None:
        """Take the buffers learners sent (at their start, or a restarted learner's new one);
        the queue is looked at only while the board says one is on its way."""
        if not any(reader.buffer_pending() for reader in self.readers.values()):
            return
        for msg in drain_buffers(self.weights_queue):
            if msg.policy_id in self.readers:
                self.readers[msg.policy_id].attach(msg.slots, msg.generation)

    def refresh(self) -> None:
        """Reload the weights of the policies whose learner published since the last look."""
        self._attach_buffers()
        for p, reader in self.readers.items():
            if reader.changed():
                self.version[p] = reader.read_into(self.models[p])
                if self.fused is not None:
                    self.fused.load(p, self.models[p])

    def wait_published(self, should_stop: Callable[[], bool], timeout: float = 1e9) -> bool:
        """Serve nothing from unpublished weights: wait for every policy's first publish."""
        deadline = time.monotonic() + timeout
        self._attach_buffers()
        for p in self.policies:
            while not self.readers[p].ready():
                self._beat(hb.WAIT_WEIGHTS, p)
                if should_stop() or time.monotonic() > deadline:
                    return False
                time.sleep(0.01)
                self._attach_buffers()
        self.refresh()
        return True

    def serve(self, requests: list[InferenceRequest]) -> None:
        """Act for the actors of every request in as few forward passes as possible."""
        if not requests:
            return
        self._beat(hb.INFERENCE, hb.ALL_POLICIES)
        self.refresh()
        io = self.io
        wi, ai = _actor_index(requests)
        rows = io.rows.numpy()[wi, ai]
        mine = np.isin(rows, self.policies)
        wi, ai, rows = wi[mine], ai[mine], rows[mine]
        if rows.size:
            self._forward(wi, ai, rows)
        stats = io.stats[self.idx]
        stats[0] += 1
        stats[1] += float(rows.size)
        for req in requests:
            reply = InferenceReply(self.idx, req.split, req.incarnation)
            self.plan.reply_queues[req.worker_idx].put(reply)

    @torch.no_grad()
    def _forward(self, wi: np.ndarray, ai: np.ndarray, rows: np.ndarray) -> None:
        io = self.io
        twi, tai = torch.from_numpy(wi), torch.from_numpy(ai)
        obs = {k: io.obs[k][twi, tai].to(self.device, non_blocking=True) for k in self.obs_keys}
        n = rows.size
        actions = torch.empty((n, io.actions.shape[-1]), dtype=io.actions.dtype)
        logp = torch.empty(n)
        values = torch.empty(n)
        if self.fused is not None:
            a, lp, v = self.fused.act(obs, rows)
            actions.copy_(a.reshape(n, -1))
            logp.copy_(lp)
            values.copy_(v)
        else:
            # actors grouped by policy: one forward pass each into device buffers, then one
            # device->host copy per output for the whole batch
            order = np.argsort(rows, kind="stable")
            sorted_rows = rows[order]
            dorder = torch.from_numpy(order).to(self.device, non_blocking=True)
            obs = {k: v.index_select(0, dorder) for k, v in obs.items()}
            h_in = None
            if self.rnn_size:
                h_in = io.h[twi, tai].to(self.device, non_blocking=True).index_select(0, dorder)
            out_a, out_lp, out_v, out_h = [], [], [], []
            bounds = np.flatnonzero(np.diff(sorted_rows)) + 1
            for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, n]):
                p = int(sorted_rows[lo])
                part = {k: v[lo:hi] for k, v in obs.items()}
                a, lp, v, h_next = self.models[p].act(part, h_in[lo:hi] if self.rnn_size else None)
                out_a.append(a.reshape(hi - lo, -1))
                out_lp.append(lp.float())
                out_v.append(v.float())
                if self.rnn_size:
                    out_h.append(h_next.float())
            torder = torch.from_numpy(order)
            actions[torder] = torch.cat(out_a).to("cpu", actions.dtype)
            logp[torder] = torch.cat(out_lp).cpu()
            values[torder] = torch.cat(out_v).cpu()
            if self.rnn_size:
                h_out = torch.empty((n, io.h.shape[-1]))
                h_out[torder] = torch.cat(out_h).cpu()
                io.h[twi, tai] = h_out
        io.actions[twi, tai] = actions
        io.log_probs[twi, tai] = logp
        io.values[twi, tai] = values
        io.versions[twi, tai] = torch.from_numpy(self.version[rows])


def _actor_index(requests: list[InferenceRequest]) -> tuple[np.ndarray, np.ndarray]:
    """(worker, actor) pairs of every actor the requests name, in request order."""
    wi = [np.full(r.hi - r.lo, r.worker_idx, dtype=np.int64) for r in requests]
    ai = [np.arange(r.lo, r.hi, dtype=np.int64) for r in requests]
    return np.concatenate(wi), np.concatenate(ai)


class DirectServer:
    """Serial mode: a request 'queue' that serves the request on the spot."""

    def __init__(self, server: InferenceServer):
        self.server = server

    def put(self, msg: InferenceRequest, block: bool = True, timeout: float = 0.0) -> None:
        self.server.serve([msg])


def inference_process_main(spec, server_idx: int) -> None:
    """Entry point of inference server `server_idx` (module-level: any start method runs it)."""
    import traceback

    from rl_pbt.runtime.messages import LearnerEvent
    from rl_pbt.runtime.processes import child_done, child_setup

    plan: InferencePlan = spec.inference
    child_setup(spec, "inference", server_idx)
    hb_idx = spec.inference_hb(server_idx)
    parent = hb.ParentWatch()

    def should_stop() -> bool:
        return bool(spec.stop_flag[0]) or parent.gone()

    try:
        spec.heartbeats.beat(hb_idx, hb.STARTING, server_idx)
        server = InferenceServer(plan, server_idx, spec.make_model, spec.heartbeats)
        server.hb_idx = hb_idx
        if server.wait_published(should_stop):
            queue = plan.request_queues[server_idx]
            while not should_stop():
                server._beat(hb.WAIT_REQUESTS)
                server.serve(drain(queue, timeout=0.05))
    except KeyboardInterrupt:
        pass
    except Exception:
        spec.report_queue.put(
            LearnerEvent(-1, "error", f"inference server {server_idx}: {traceback.format_exc()}")
        )
        raise
    finally:
        spec.heartbeats.beat(hb_idx, hb.STOPPED)
        child_done()
