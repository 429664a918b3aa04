"""Population statistics in the runner: recent episodes per policy, frame rates, the console
status line and TensorBoard summaries (tensorboardX, one writer per policy).
"""

from __future__ import annotations

import collections
import time
from typing import Any, Optional

import numpy as np

from rl_pbt.logging.files import summary_dir


def _fmt(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"


class PopulationStats:
    def __init__(self, cfg, exp_dir: str, num_policies: int):
        self.cfg = cfg
        self.exp_dir = exp_dir
        self.n = num_policies
        window = cfg.stats_avg
        self.returns = [collections.deque(maxlen=window) for _ in range(num_policies)]
        self.lengths = [collections.deque(maxlen=window) for _ in range(num_policies)]
        self.objectives = [collections.deque(maxlen=window) for _ in range(num_policies)]
        self.extra: list[dict[str, collections.deque]] = [{} for _ in range(num_policies)]
        self.train: list[dict[str, float]] = [{} for _ in range(num_policies)]
        self.episodes_total = [0] * num_policies
        self.frames_total = 0
        self.fps_window: collections.deque = collections.deque(maxlen=64)  # (time, frames)
        self.fps_window.append((time.time(), 0))
        self.last_status = 0.0
        self.last_summary = 0.0
        self.warned_no_objective: set[int] = set()
        self.writers: dict[int, Any] = {}
        self.fps_history: list[float] = []

    # --- input ------------------------------------------------------------------------------
    def add_sampling(self, frames: int) -> None:
        self.frames_total += frames

    def add_episode(self, ep) -> None:
        if not isinstance(ep.policy_id, (int, np.integer)):
            return  # a frozen snapshot's episode: not part of the population's statistics
        p = int(ep.policy_id)
        self.returns[p].append(ep.episode_return)
        self.lengths[p].append(ep.length)
        if ep.objective is not None:
            self.objectives[p].append(ep.objective)
        for k, v in ep.extra.items():
            self.extra[p].setdefault(k, collections.deque(maxlen=self.cfg.stats_avg)).append(v)
        self.episodes_total[p] += 1

    def add_train(self, report) -> None:
        self.train[report.policy_id] = dict(report.stats)

    def warn_no_objective(self, policy_id: int) -> None:
        if policy_id not in self.warned_no_objective:
            self.warned_no_objective.add(policy_id)
            print(
                f"policy {policy_id}: the env gives no info['{self.cfg.pbt_target_objective}']"
                f"; PBT ranks this policy on the episode return",
                flush=True,
            )

    def pbt_event(self, decision) -> None:
        w = self._writer(decision.policy_id)
        if w is not None:
            w.add_text("pbt", decision.log_line, self.episodes_total[decision.policy_id])

    # --- output -----------------------------------------------------------------------------
    def fps(self) -> float:
        """Frames per second over roughly the last 10 s (or since the previous sample)."""
        now = time.time()
        t0, f0 = self.fps_window[0]
        for t, f in reversed(self.fps_window):
            t0, f0 = t, f
            if now - t >= 10.0:
                break
        self.fps_window.append((now, self.frames_total))
        return (self.frames_total - f0) / max(now - t0, 1e-6)

    def mean(self, values) -> Optional[float]:
        return float(np.mean(values)) if len(values) else None

    def status_line(
        self, env_steps: list[int], versions: list[int], elapsed: float, force: bool = False
    ) -> None:
        now = time.time()
        if not force and now - self.last_status < self.cfg.status_interval:
            return
        self.last_status = now
        fps = self.fps()
        self.fps_history.append(fps)
        parts = [f"{elapsed:6.0f}s  {fps:7.0f} fps  frames {self.frames_total:,}"]
        for p in range(self.n):
            ret = self.mean(self.returns[p])
            obj = self.mean(self.objectives[p])
            lag = self.train[p].get("policy_lag")
            s = f"p{p}: ret {_fmt(ret) if ret is not None else '-'}"
            if obj is not None:
                s += f" obj {_fmt(obj)}"
            if lag is not None:
                s += f" lag {lag:.1f}"
            s += f" steps {env_steps[p]:,}"
            parts.append(s)
        print(" | ".join(parts), flush=True)

    def _writer(self, p: int):
        if p not in self.writers:
            from tensorboardX import SummaryWriter

            self.writers[p] = SummaryWriter(summary_dir(self.exp_dir, p), flush_secs=20)
        return self.writers[p]

    def maybe_write_summaries(self, env_steps: list[int], pbt=None, force: bool = False) -> None:
        now = time.time()
        if not force and now - self.last_summary < self.cfg.experiment_summaries_interval:
            return
        self.last_summary = now
        fps = self.fps()
        for p in range(self.n):
            w = self._writer(p)
            step = env_steps[p]
            w.add_scalar("perf/fps", fps, step)
            for name, values in (
                ("reward", self.returns[p]),
                ("len", self.lengths[p]),
                ("true_objective", self.objectives[p]),
            ):
                m = self.mean(values)
                if m is not None:
                    w.add_scalar(f"episode/{name}", m, step)
            for k, values in self.extra[p].items():
                w.add_scalar(f"episode/{k}", float(np.mean(values)), step)
            for k, v in self.train[p].items():
                w.add_scalar(f"train/{k}", v, step)
            if pbt is not None:
                for k, v in pbt.hparams[p].items():
                    w.add_scalar(f"pbt/{k}", v, step)
                obj = pbt.objectives().get(p)
                if obj is not None:
                    w.add_scalar("pbt/objective", obj, step)
                shaping = pbt.shaping[p]
                if shaping:
                    for k, v in _flat(shaping).items():
                        w.add_scalar(f"pbt/rew.{k}", v, step)

    def summary(self, env_steps: list[int]) -> dict:
        """Final figures of the run (written to summary.json by the runner)."""
        policies = {}
        for p in range(self.n):
            policies[str(p)] = {
                "env_steps": env_steps[p],
                "episodes": self.episodes_total[p],
                "mean_return": self.mean(self.returns[p]),
                "mean_length": self.mean(self.lengths[p]),
                "mean_objective": self.mean(self.objectives[p]),
                "recent_returns": list(self.returns[p]),
            }
        steady = self.fps_history[len(self.fps_history) // 2 :]
        return {
            "frames": self.frames_total,
            "fps_median_second_half": float(np.median(steady)) if steady else None,
            "policies": policies,
        }

    def close(self) -> None:
        for w in self.writers.values():
            w.close()


def _flat(d: dict, prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, key + "."))
        elif isinstance(v, (tuple, list)):
            for i, x in enumerate(v):
                out[f"{key}[{i}]"] = float(x)
        else:
            out[key] = float(v)
    return out
