"""Acting through an inference server (`--inference=device`), the rollout worker's side.

The worker's observations, RNN states and the server's answers live in this worker's rows of
the shared `InferenceIO`. Its envs step in `worker_num_splits` groups: while group s steps,
the server computes the next actions of the other groups (double buffering). Frozen
snapshots' seats still act with the worker's own copy of their weights.

Collaborators: RolloutWorker (mixes this in; slots, episodes and env stepping stay there),
InferenceServer (answers requests).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rl_pbt.runtime import heartbeat as hb
from rl_pbt.runtime.messages import InferenceRequest, drain
from rl_pbt.sampling.inference_server import NO_ROW


class StopRequested(Exception):
    pass


class ServerActing:
    def _use_inference_server(self, plan) -> None:
        """--inference=device: observations, RNN states and answers live in the shared
        InferenceIO rows of this worker; the envs step in `worker_num_splits` groups, one
        group stepping while the server computes the other's actions (a batched env steps all
        its copies in one call, so it keeps one group)."""
        io, w = plan.io, self.idx
        self.cur_obs = {k: io.obs[k][w].numpy() for k in self.obs_keys}
        self.h = io.h[w]  # the server replaces each served actor's state with the next one
        self.h.zero_()  # a restarted worker's row holds its predecessor's states
        self.h_before = torch.zeros_like(self.h)
        self.io_rows = io.rows[w].numpy()
        self.io_out = (
            io.actions[w].numpy(),
            io.log_probs[w].numpy(),
            io.values[w].numpy(),
            io.versions[w].numpy(),
        )
        if self.batch is None:
            self.splits = self.cfg.worker_num_splits
        self.outstanding = [0] * self.splits  # replies still due, per group
        self.requested = [False] * self.splits
        self.copies_noticed_from = False

    def _split_actors(self, s: int) -> tuple[int, int]:
        per = len(self.envs) // self.splits * self.num_agents
        return s * per, (s + 1) * per

    def _request(self, s: int) -> None:
        """Ask the servers of the policies seated in group s for their next actions."""
        lo, hi = self._split_actors(s)
        rows = np.where(self._skip(lo, hi), NO_ROW, self.seat_row[lo:hi])
        self.io_rows[lo:hi] = rows
        if self.rnn_size:
            self.h_before[lo:hi] = self.h[lo:hi]
        plan = self.remote
        servers = {plan.server_of[r] for r in rows[rows >= 0].tolist()}
        self.outstanding[s] = len(servers)
        self.requested[s] = True
        for server in servers:
            plan.request_queues[server].put(InferenceRequest(self.idx, s, lo, hi, self.incarnation))

    def _wait_actions(self, s: int) -> None:
        while self.outstanding[s] > 0:
            for reply in drain(self.remote.reply_queues[self.idx], timeout=0.1):
                if reply.incarnation == self.incarnation:
                    self.outstanding[reply.split] -= 1
            if self.outstanding[s] > 0:
                if not self.blocking:
                    raise RuntimeError("serial mode: the inference server did not answer")
                self._beat(hb.WAIT_ACTIONS, s)
                if self.should_stop():
                    raise StopRequested

    def _step_remote(self) -> None:
        if not self.copies_noticed_from:
            # versions seen so far are no PBT copies (a resumed run starts at its checkpoint)
            for p in range(self.num_policies):
                self._wait_published(p)
            self._noticed_version[:] = self._version_now[: self.num_policies]
            self.model_seq[:] = 0
            self.copies_noticed_from = True
        finished: dict[int, list[int]] = {}
        per_env = len(self.envs) // self.splits
        for s in range(self.splits):
            if not self.requested[s]:
                self._request(s)
            self._wait_actions(s)
            actions = self._act_remote(s)
            self._beat(hb.STEPPING)
            if self.batch is not None:
                self._step_batch(actions, finished)
            else:
                self._step_envs(s * per_env, (s + 1) * per_env, actions, finished)
            self._request(s)
        self._after_step(finished)

    def _act_remote(self, s: int) -> np.ndarray:
        """The server's answers for group s (frozen snapshots' seats act here), written into
        the trajectory slots; returns every actor's action (group s's are fresh)."""
        lo, hi = self._split_actors(s)
        actions, logp, values, versions = self.io_out
        policy_rows = self.seat_row
        skip = self.skipped[lo:hi]  # as `_request` asked: the server left these out
        groups: dict[Any, list[int]] = {}
        for i in lo + np.flatnonzero((policy_rows[lo:hi] < 0) & ~skip):
            groups.setdefault(self.seat[i], []).append(i)
        if groups:
            self._act_locally(groups, actions, logp, values, self.h_before)
        trains = policy_rows[lo:hi] >= 0
        idx = lo + np.flatnonzero(trains)
        served = lo + np.flatnonzero(trains & ~skip)
        self._notice_served_copies(policy_rows[served], versions[served])
        self._notice_unseated_copies(policy_rows[idx])
        self._fill_skipped(skip, actions, logp, values, lo)
        first = served[self.ep_version[served] < 0]  # the episode's first action: its weights
        self.ep_version[first] = versions[first]
        if idx.size:
            acts = np.zeros(self.num_actors, dtype=bool)
            acts[served] = True
            self._write_step(
                idx, policy_rows, actions, logp, values, self.h_before, versions[idx], acts
            )
        return actions

    def _notice_served_copies(self, rows: np.ndarray, versions: np.ndarray) -> None:
        """A served policy whose weights jumped more than max_policy_lag versions since this
        worker last saw it was replaced by a PBT copy: its learner needs experience soon."""
        if not rows.size:
            return
        jumped = versions - self._noticed_version[rows] > self.max_lag
        if jumped.any() and self.prefer is not None:
            for p in np.unique(rows[jumped]).tolist():
                self.prefer(p, self._prefer_steps)
        np.maximum.at(self._noticed_version, rows, versions)
