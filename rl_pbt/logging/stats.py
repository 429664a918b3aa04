"""Population statistics in the runner: recent episodes per policy, frame rates, the console
status block (text from progress.py) and the scalar summaries. One dict of scalars per policy
and summary period (`scalars`) goes to TensorBoard (tensorboardX, one writer per policy),
stats/scalars.jsonl and, with --with_wandb, to Weights & Biases (wandb_log.py).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import os
import sys
import time
from typing import Any, Callable, Optional

import numpy as np

from rl_pbt.logging import progress
from rl_pbt.logging.files import scalars_path, summary_dir

PROGRESS_SAMPLE_S = 1.0  # spacing of the (time, steps) samples behind the ETA
ETA_WINDOW_S = 60.0  # the ETA follows the rate of the last minute
NO_TIME_LIMIT = 10**9  # --train_for_seconds at or above this (its default is 1e10): no limit


def time_limit(cfg) -> Optional[float]:
    """--train_for_seconds, None where it is no limit."""
    limit = getattr(cfg, "train_for_seconds", None)
    return None if limit is None or limit >= NO_TIME_LIMIT else float(limit)


class ScalarsFile:
    """stats/scalars.jsonl: one JSON object per policy and summary period, appended (a resumed
    run continues the file) and flushed line by line; non-finite values are written as null."""

    def __init__(self, path: str):
        self.path = path
        self.file = None

    def write(self, policy: int, env_steps: int, t: float, scalars: dict[str, float]) -> None:
        if self.file is None:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            self.file = open(self.path, "a")
        values = {k: (float(v) if math.isfinite(v) else None) for k, v in scalars.items()}
        row = {"policy": policy, "env_steps": int(env_steps), "time": t, "scalars": values}
        self.file.write(json.dumps(row, allow_nan=False) + "\n")
        self.file.flush()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


def _use_bold() -> bool:
    """Bold headline on a terminal that takes escape codes; plain text in logs and pipes."""
    try:
        tty = sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False
    return tty and "NO_COLOR" not in os.environ and os.environ.get("TERM", "") != "dumb"


# the recent episodes summary.json keeps per policy (returns, lengths, objectives)
RECENT_KEYS = ("recent_returns", "recent_lengths", "recent_objectives")


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
        # each policy's env steps at its last row of scalars: a row is written for a policy
        # whose count moved since (two rows at one step draw a curve that doubles back)
        self.row_step: dict[int, int] = {}
        # a resumed run: each policy's count when its learner first reported (its checkpoint's)
        self.resume_step: dict[int, int] = {}
        self.resumed = False  # set by the runner: see maybe_write_summaries
        self.warned_no_objective: set[int] = set()
        self.writers: dict[int, Any] = {}
        self.fps_history: list[float] = []
        self.env_steps = [0] * num_policies  # as of the last status_line call
        # the ids the status block shows for members 0..n-1 (a node group over Ray shows the
        # population's ids of its members); None: their own
        self.display_ids: Optional[list[int]] = None
        # a resumed run: each member's env steps in the run before, shown until its learner
        # has loaded its checkpoint and reported (not 0 while the checkpoints load)
        self.steps_before = [0] * num_policies
        # (time, slowest policy's env steps), from when every policy has reported: the first
        # report of a resumed run jumps to the restored count, which is no rate
        self.progress_samples: collections.deque = collections.deque(maxlen=600)
        self.pbt_pending: list[tuple[int, Optional[int]]] = []  # since the last status block
        self.pbt_last: Optional[tuple[str, float]] = None  # (description, time)
        # what PBT ranks on where not the episodes' objective (see rank_by)
        self.rank_name = "rank"
        self.rank_values: Optional[Callable[[], dict[int, Optional[float]]]] = None
        self.scalars_file = ScalarsFile(scalars_path(exp_dir))
        self.wandb = None
        if getattr(cfg, "with_wandb", False):
            from rl_pbt.logging.wandb_log import WandbSink

            self.wandb = WandbSink(cfg, exp_dir, num_policies)

    # --- input ------------------------------------------------------------------------------
    def add_sampling(self, frames: int) -> None:
        self.frames_total += frames

    def add_episode(self, ep, current: bool = True) -> None:
        """One finished episode; `current=False`: begun on weights a PBT copy has replaced
        (or while the copy is on its way), counted but kept out of the member's windows."""
        if not isinstance(ep.policy_id, (int, np.integer)):
            return  # a frozen snapshot's episode: not part of the population's statistics
        p = int(ep.policy_id)
        self.episodes_total[p] += 1
        if not current:
            return
        self.returns[p].append(ep.episode_return)
        self.lengths[p].append(ep.length)
        if ep.objective is not None:
            self.objectives[p].append(ep.objective)
        for k, v in ep.extra.items():
            self.extra[p].setdefault(k, collections.deque(maxlen=self.cfg.stats_avg)).append(v)

    def forget(self, policy: int) -> None:
        """A PBT copy has landed on `policy`: its windows held the replaced weights' episodes
        (the status line, the scalars and summary.json show the copy's own from here)."""
        for window in (self.returns, self.lengths, self.objectives):
            window[policy].clear()
        self.extra[policy] = {}

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

    def resumed_from(self, p: int, env_steps: int) -> None:
        """Policy p's learner loaded a checkpoint of `env_steps`: p's next row comes once it has
        trained past them, and its curves go on from there (see `_writer`). Steps the checkpoint
        holds beyond those summary.json recorded (its learner saved after the summary was
        written: a run killed whole) were sampled too: their frames join the count, which
        would else end below the steps trained."""
        self.resume_step[p] = env_steps
        self.row_step[p] = max(self.row_step.get(p, 0), env_steps)
        unrecorded = env_steps - self.steps_before[p]  # env steps count frames (x frameskip)
        if unrecorded > 0:
            self.frames_total += unrecorded
            self.steps_before[p] = env_steps
            self.fps_window = collections.deque([(time.time(), self.frames_total)], maxlen=64)

    def restore_pbt_last(self, events: list[dict]) -> None:
        """A resumed run: the PBT line names the last decision in the lineage of the runs
        before (else it said "no events yet" until this run's first)."""
        for event in reversed(events):
            if event.get("action") in ("replace", "mutate"):
                try:
                    source = event.get("source")
                    text = progress.pbt_event_text(
                        int(event["policy"]), None if source is None else int(source)
                    )
                    self.pbt_last = (text, float(event["time"]))
                except (KeyError, TypeError, ValueError):  # an event of another shape: none
                    pass
                return

    def pbt_event(self, decision) -> None:
        """A PBT decision: counted in the next status block's PBT line; its full text goes to
        TensorBoard and W&B (every detail is in pbt/lineage.jsonl, written by the manager)."""
        p, src = decision.policy_id, decision.source_id
        self.pbt_pending.append((p, src))
        self.pbt_last = (progress.pbt_event_text(p, src), time.time())
        w = self._writer(p)
        if w is not None:
            w.add_text("pbt", decision.log_line, self.env_steps[p])  # the scalars' x axis
        if self.wandb is not None:
            self.wandb.log_pbt_event(p, src, self.env_steps[p], decision.log_line)

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

    def rank_by(self, name: str, values: Callable[[], dict[int, Optional[float]]]) -> None:
        """PBT ranks on `values()` (per policy), named `name` ('elo', 'vs_scripted', ...), and
        not on the episodes' objective: the status line and the summary's best member follow
        it."""
        self.rank_name, self.rank_values = name, values

    def policy_status(self) -> list[progress.PolicyStatus]:
        ranks = self.rank_values() if self.rank_values is not None else {}
        return [
            progress.PolicyStatus(
                p,
                self.env_steps[p],
                ret=self.mean(self.returns[p]),
                obj=self.mean(self.objectives[p]),
                lag=self.train[p].get("policy_lag"),
                rank=ranks.get(p),
            )
            for p in range(self.n)
        ]

    def _displayed(self, policies: list[progress.PolicyStatus]) -> list[progress.PolicyStatus]:
        if self.display_ids is None:
            return policies
        return [dataclasses.replace(s, policy=self.display_ids[s.policy]) for s in policies]

    def best_policy(self) -> Optional[int]:
        """The member with the best value of what PBT ranks on; without PBT, or where PBT ranks
        on the objective, the best recent objective (return where the env gives none)."""
        return progress.best_policy(self.policy_status())

    def _record_progress(self, env_steps: list[int], now: float) -> None:
        if not env_steps or min(env_steps) <= 0:
            return
        slowest = min(env_steps)
        samples = self.progress_samples
        if samples and slowest < samples[-1][1]:
            samples.clear()  # counters went back (should not happen): start a fresh rate
        if not samples or now - samples[-1][0] >= PROGRESS_SAMPLE_S:
            samples.append((now, slowest))

    def _time_limit(self) -> Optional[float]:
        return time_limit(self.cfg)

    def eta(self, elapsed: float) -> progress.Eta:
        time_limit = self._time_limit()
        samples = list(self.progress_samples)
        if samples and self.env_steps and min(self.env_steps) > samples[-1][1]:
            samples.append((time.time(), min(self.env_steps)))  # the newest count, not 1 s old
        return progress.estimate_eta(
            samples,
            self.cfg.train_for_env_steps,
            elapsed=elapsed,
            time_limit=time_limit,
            window_s=ETA_WINDOW_S,
        )

    def _pbt_text(self, now: float) -> Optional[str]:
        cfg = self.cfg
        with_pbt = bool(getattr(cfg, "with_pbt", False))
        if not (with_pbt or getattr(cfg, "pbt_replay_lineage", None) or self.pbt_last):
            return None
        last, age = None, None
        if self.pbt_last is not None:
            last, age = self.pbt_last[0], now - self.pbt_last[1]
        start = getattr(cfg, "pbt_start_mutation", None) if with_pbt else None
        past = with_pbt and bool(self.env_steps) and min(self.env_steps) >= (start or 0)
        return progress.pbt_line(
            self.pbt_pending, last, age, start, width=progress.LINE_WIDTH - 2, past_start=past
        )

    def status_line(
        self, env_steps: list[int], versions: list[int], elapsed: float, force: bool = False
    ) -> Optional[str]:
        """Called every tick; prints the status block every --status_interval seconds (and when
        forced) and returns its text. The PBT line sums up the decisions since the last block."""
        now = time.time()
        self.env_steps = [s if s > 0 else b for s, b in zip(env_steps, self.steps_before)]
        self._record_progress(self.env_steps, now)
        if not force and now - self.last_status < self.cfg.status_interval:
            return None
        self.last_status = now
        fps = self.fps()
        self.fps_history.append(fps)
        lines = progress.status_block(
            elapsed,
            self.frames_total,
            fps,
            min(self.env_steps) if self.env_steps else 0,
            self.cfg.train_for_env_steps,
            self.eta(elapsed),
            self._displayed(self.policy_status()),
            self._pbt_text(now),
            rank_name=self.rank_name,
            time_limit=self._time_limit(),
        )
        self.pbt_pending = []
        text = "\n".join(lines)
        if _use_bold():
            lines[0] = f"\033[1m{lines[0]}\033[0m"
        print("\n".join(lines), flush=True)
        return text

    def _writer(self, p: int):
        if p not in self.writers:
            from tensorboardX import SummaryWriter

            # a resumed run: the rows a killed run wrote past the checkpoint it resumes from are
            # purged (TensorBoard drops them on reading), so that each curve goes on from there
            purge = self.resume_step.get(p)
            self.writers[p] = SummaryWriter(
                summary_dir(self.exp_dir, p),
                flush_secs=20,
                purge_step=None if purge is None else purge + 1,
            )
        return self.writers[p]

    def scalars(self, p: int, fps: float, pbt=None) -> dict[str, float]:
        """Every scalar of policy p this summary period: the one dict that TensorBoard,
        stats/scalars.jsonl and W&B receive."""
        out: dict[str, float] = {"perf/fps": float(fps)}
        for name, values in (
            ("reward", self.returns[p]),
            ("len", self.lengths[p]),
            ("true_objective", self.objectives[p]),
        ):
            m = self.mean(values)
            if m is not None:
                out[f"episode/{name}"] = m
        for k, values in self.extra[p].items():
            out[f"episode/{k}"] = float(np.mean(values))
        values = [(f"train/{k}", v) for k, v in self.train[p].items()]
        if pbt is not None:
            values += [(f"pbt/{k}", v) for k, v in pbt.hparams[p].items()]
        for tag, v in values:
            try:
                out[tag] = float(v)
            except (TypeError, ValueError):  # a categorical choice such as "relu" is no curve
                pass
        elo = getattr(self, "elo", None)
        if elo is not None and p in elo:  # self-play: the member's rating, as curves
            out["selfplay/elo"] = float(elo.rating(p))
        if pbt is not None:
            obj = pbt.objectives().get(p)
            if obj is not None:
                out["pbt/objective"] = float(obj)
            shaping = pbt.shaping[p]
            if shaping:
                for k, v in _flat(shaping).items():
                    out[f"pbt/rew.{k}"] = v
        return out

    def maybe_write_summaries(self, env_steps: list[int], pbt=None, force: bool = False) -> None:
        """A row of scalars every --experiment_summaries_interval seconds for each policy that
        trained since its last row; `force` (the end of a run): now. A resumed run writes no
        row for a policy before it has trained past its restored count (a row at 0 env steps
        would put the resumed values at the start of the curves, one at the restored count
        repeats the last row of the run before, at 0 frames/s)."""
        now = time.time()
        steps = [int(s) for s in env_steps]
        policies = [
            p
            for p in range(self.n)
            if (steps[p] > 0 or not self.resumed) and steps[p] != self.row_step.get(p)
        ]
        if not policies:  # nothing trained since the last rows
            return
        if not force and now - self.last_summary < self.cfg.experiment_summaries_interval:
            return
        self.last_summary = now
        self.row_step.update((p, steps[p]) for p in policies)
        fps = self.fps()
        rows = {p: (steps[p], self.scalars(p, fps, pbt)) for p in policies}
        for p, (step, scalars) in rows.items():
            w = self._writer(p)
            for tag, value in scalars.items():
                w.add_scalar(tag, value, step)
            self.scalars_file.write(p, step, now, scalars)
        if self.wandb is not None:
            self.wandb.log_scalars(rows)

    def restore(self, summary: dict) -> None:
        """A resumed run goes on from the summary.json of the runs before it: frames and
        episodes add up, and the recent episodes stay recent until new ones push them out
        (else a re-run with nothing left to train wrote a summary of no episodes). A summary
        of another shape is named in one line and left out: the figures are this run's own."""
        self.resumed = True
        try:
            frames = int(summary.get("frames") or 0)
            entries = {int(p): e for p, e in (summary.get("policies") or {}).items()}
            kept = {
                p: (
                    int(e.get("episodes") or 0),
                    [[float(v) for v in e.get(key) or []] for key in RECENT_KEYS],
                    e.get("env_steps"),
                )
                for p, e in entries.items()
                if 0 <= p < self.n
            }
        except (TypeError, ValueError, AttributeError) as e:
            print(f"summary.json of the run before not carried on ({e})", flush=True)
            return
        self.frames_total += frames
        self.fps_window = collections.deque([(time.time(), self.frames_total)], maxlen=64)
        for p, (episodes, recent, _) in kept.items():
            self.episodes_total[p] += episodes
            for target, values in zip((self.returns, self.lengths, self.objectives), recent):
                target[p].extend(values)
        # the last row of the run before: a re-run with nothing to train adds none
        steps = [kept.get(p, (0, [], None))[2] for p in range(self.n)]
        self.steps_before = [s if isinstance(s, int) and s > 0 else 0 for s in steps]
        self.row_step.update((p, s) for p, s in enumerate(steps) if isinstance(s, int))

    def summary(self, env_steps: list[int], final: bool = True) -> dict:
        """Figures of the run (written to summary.json by the runner, during the run too), the
        runs it resumed included (see `restore`); `final`: the status block shows these env
        steps from here."""
        policies = {}
        for p in range(self.n):
            policies[str(p)] = {
                "env_steps": env_steps[p],
                "episodes": self.episodes_total[p],
                "mean_return": self.mean(self.returns[p]),
                "mean_length": self.mean(self.lengths[p]),
                "mean_objective": self.mean(self.objectives[p]),
                "recent_returns": list(self.returns[p]),
                "recent_lengths": list(self.lengths[p]),
                "recent_objectives": list(self.objectives[p]),
            }
        steady = self.fps_history[len(self.fps_history) // 2 :]
        if final:
            self.env_steps = list(env_steps)
        return {
            "frames": self.frames_total,
            "fps_median_second_half": float(np.median(steady)) if steady else None,
            "best_policy": self.best_policy(),
            "policies": policies,
        }

    def close(self) -> None:
        for w in self.writers.values():
            w.close()
        self.writers = {}
        self.scalars_file.close()
        if self.wandb is not None:
            sink, self.wandb = self.wandb, None
            try:
                sink.close()
            except Exception as e:  # the run's own outcome matters more than the upload
                print(f"W&B: closing the run failed: {e!r}", flush=True)


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
