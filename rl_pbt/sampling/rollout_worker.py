"""Rollout worker: steps its env copies, acts with local copies of the policies, and fills
shared-memory trajectory slots that it hands to each policy's learner.

Collaborators: TrajectoryBuffers/SlotPool (memory), ParamStore (weights, read here),
a matchmaker (which policy plays each agent seat), the runner (stats, reward shaping).
One call of `step()` advances every env by one step; the process loop and serial mode
both drive it.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

import gymnasium as gym
import numpy as np
import torch

from rl_pbt.config.parse import recurrence
from rl_pbt.envs.contract import (
    EnvContractError,
    call_failed,
    check_counts,
    check_objective,
    check_reward,
    empty_action_mask,
    observation_misfit,
    observation_problem,
    where,
)
from rl_pbt.envs.scripted import make_scripted
from rl_pbt.envs.wrappers import BatchCopy, as_multiagent, reward_shaping_target
from rl_pbt.memory.buffers import QUEUED, WORKER, TrajectoryBuffers
from rl_pbt.memory.param_store import ParamStore
from rl_pbt.memory.slots import SlotPool
from rl_pbt.models.action_dist import to_env_action
from rl_pbt.models.actor_critic import ActorCritic
from rl_pbt.models.obs import MASK_KEY, obs_to_dict
from rl_pbt.runtime import heartbeat as hb
from rl_pbt.runtime.messages import (
    EpisodeStats,
    MatchResult,
    SetRatings,
    SetRewardShaping,
    SetSnapshots,
    Trajectories,
    WorkerReport,
)
from rl_pbt.sampling.fused_inference import FusedPopulationPolicy
from rl_pbt.sampling.matchmaking import SCRIPTED_PREFIX, is_scripted_seat, is_snapshot
from rl_pbt.sampling.server_acting import ServerActing, StopRequested


class RolloutWorker(ServerActing):
    def __init__(
        self,
        cfg,
        worker_idx: int,
        make_env: Callable[[dict], Any],
        make_model: Callable[[], ActorCritic],
        buffers: TrajectoryBuffers,
        slot_pool: SlotPool,
        params: ParamStore,
        learner_queues: list,
        report_queue,
        matchmaker,
        heartbeats: Optional[hb.Heartbeats] = None,
        heartbeat_idx: int = 0,
        should_stop: Callable[[], bool] = lambda: False,
        blocking: bool = True,
        make_env_batch: Optional[Callable[[list[dict]], Any]] = None,
        initial_shaping: Optional[dict[int, dict]] = None,
        seed: Optional[int] = None,
        inference=None,
        incarnation: int = 0,
    ):
        self.cfg = cfg
        self.incarnation = incarnation  # how many times this worker was restarted
        self.idx = worker_idx
        self.buffers = buffers
        self.np = buffers.numpy_views()
        self.pool = slot_pool
        self.params = params
        self.learner_queues = learner_queues
        self.report_queue = report_queue
        self.matchmaker = matchmaker
        self.heartbeats = heartbeats
        self.hb_idx = heartbeat_idx
        self.should_stop = should_stop
        self.blocking = blocking
        # this worker's own stream (matchmaking, decorrelation, env seeds): from its derived
        # seed, so workers differ and a seeded run repeats
        self.rng = np.random.default_rng(seed)
        self.num_policies = cfg.num_policies
        self.T = cfg.rollout
        self.rec = recurrence(cfg)
        self.target_key = (
            "true_objective"
            if cfg.pbt_target_objective in ("elo", "vs_snapshots")
            or cfg.pbt_target_objective.startswith("vs_scripted:")
            else cfg.pbt_target_objective
        )
        self.scripted_actors: dict[int, Any] = {}  # actor -> its scripted player, made once

        self._beat(hb.STARTING)
        per_worker = cfg.num_envs_per_worker
        env_configs = [
            {"worker_index": worker_idx, "vector_index": e, "env_id": worker_idx * per_worker + e}
            for e in range(per_worker)
        ]
        # a batched env steps all copies in one call; each copy is still one entry of self.envs
        self.batch = make_env_batch(env_configs) if make_env_batch is not None else None
        self.envs = []
        for e, env_config in enumerate(env_configs):
            self._beat(hb.RESETTING, e)
            if self.batch is not None:
                self.envs.append(BatchCopy(self.batch, e))
            else:
                self.envs.append(as_multiagent(make_env(env_config)))
        env0 = self.envs[0]
        self.obs_space, self.action_space = env0.observation_space, env0.action_space
        self.num_agents = int(env0.num_agents)
        self.shaping_targets = [reward_shaping_target(env) for env in self.envs]
        target0 = self.shaping_targets[0]
        self.default_shaping = target0.get_default_reward_shaping() if target0 else None

        self.models: dict[int, ActorCritic] = {}
        # per policy row: the learner version of the weights in use, and the param-store
        # write counter when they were read (-1: not read yet)
        self.model_version = np.zeros(cfg.num_policies, dtype=np.int64)
        self.model_seq = np.full(cfg.num_policies, -1, dtype=np.int64)
        self.make_model = make_model
        self._seq_now = params.seq.numpy()  # shared write counters, read without a copy
        self._version_now = params.version.numpy()  # shared learner versions, likewise
        # per policy row: the newest learner version this worker has seen, seated or not; a
        # jump of more than max_policy_lag past it is a PBT weight copy
        self._noticed_version = np.zeros(cfg.num_policies, dtype=np.int64)
        self.snapshot_store: dict[str, int] = {}  # snapshot id -> row of the param store
        self.ratings = None  # EloRatings for Elo matchmaking (set by the runner)
        self.snapshot_models: dict[str, ActorCritic] = {}
        # a matchmaker that balances experience is told of every step played
        self.count_steps = getattr(matchmaker, "record_steps", None)
        # ... and one that schedules policies is told when a policy's weights were replaced
        self.prefer = getattr(matchmaker, "prefer", None)
        self.max_lag = cfg.max_policy_lag

        n_act = len(self.envs) * self.num_agents
        self.num_actors = n_act
        model = make_model()
        self.act_spec = model.act_spec
        self.action_dtype = np.int64 if self.act_spec.kind == "discrete" else np.float32
        # with an inference server, only frozen snapshots act here (never fused)
        use_fused = (
            cfg.fused_inference and inference is None and FusedPopulationPolicy.supported(model)
        )
        self.fused = FusedPopulationPolicy(model, cfg.num_policies) if use_fused else None
        self.obs_keys = model.obs_spec.keys
        # with an action mask: the [lo, hi) columns of each action head, checked per step
        self.mask_heads = None
        if model.mask_key is not None:
            ends = np.cumsum(model.act_spec.nvec)
            self.mask_heads = list(zip((ends - model.act_spec.nvec).tolist(), ends.tolist()))
        self.rnn_size = model.rnn_size
        self.h = torch.zeros(n_act, max(self.rnn_size, 1))
        # actors whose next action the env said it ignores (`info["acts_next"] = False`, a
        # turn-based game's waiting agents): no forward pass computes that action. Never with
        # an RNN, whose state steps through every observation the learner replays
        self.waits = np.zeros(n_act, dtype=bool)
        self.obs_checked = np.zeros(n_act, dtype=bool)  # a step's observation checked in full
        self.all_obs_checked = False  # every actor's: no more checks
        self.skipped = np.zeros(n_act, dtype=bool)  # the actors the last forward pass skipped
        self.cur_obs = {k: np.zeros((n_act, *s), dtype=d) for k, s, d in model.obs_spec.items()}
        # keys whose stored values must be finite (a NaN would reach the learner's loss)
        self.float_keys = [
            k for k, v in self.cur_obs.items() if k != MASK_KEY and v.dtype.kind == "f"
        ]
        self.seat: list[Any] = [0] * n_act  # policy id (int) or snapshot id (str) per actor
        self.seat_row = np.zeros(n_act, dtype=np.int64)  # the seat's policy, -1 for a snapshot
        self.slot = np.full(n_act, -1, dtype=np.int64)
        self.t = np.zeros(n_act, dtype=np.int64)
        # full trajectories waiting for their bootstrap value: actor -> [old slot, steps waited].
        # With several agents, a trajectory that ended on the agent's own decision waits for
        # its next decision (turn-taking: the agent's waiting steps in between credit their
        # rewards to the old trajectory's last decision and are not bootstrapped from)
        self.pending_bootstrap: dict[int, list[int]] = {}
        self.defer_bootstrap = self.num_agents > 1
        # a waiting step's reward after a trajectory's last decision is kept apart from that
        # decision's own reward, scaled and clipped alone (`_settle_bootstrap`)
        self.reward_scale, self.clip = float(cfg.reward_scale), float(cfg.reward_clip)
        self.parked: dict[int, list[tuple[int, int]]] = {}  # policy -> [(slot, steps used)]
        self.ep_return = np.zeros(n_act)
        # each actor's return of its last finished episode: a game's result where the env
        # gives no objective (agents may finish before the game does)
        self.last_return = np.zeros(n_act)
        self.ep_len = np.zeros(n_act, dtype=np.int64)
        self.ep_version = np.full(n_act, -1, dtype=np.int64)  # weights of an episode's 1st step
        # each policy's reward shaping (PBT values, --policy_values), known before the first
        # reset so that the first episodes already play with it; None or absent: the defaults
        self.shaping: dict[int, dict] = {
            p: s for p, s in (initial_shaping or {}).items() if s is not None
        }
        self.installed_shaping: dict[int, dict] = {}  # actor -> the dict installed on its env
        self.episodes: list[EpisodeStats] = []
        self.matches: list[MatchResult] = []
        self.steps_since_report = 0
        self.last_report = time.monotonic()
        self.remote = inference
        self.splits = 1
        if inference is not None:
            self._use_inference_server(inference)
        self._start_envs()

    # --- setup ----------------------------------------------------------------------------
    def _beat(self, activity: int, detail: int = 0) -> None:
        if self.heartbeats is not None:
            self.heartbeats.beat(self.hb_idx, activity, detail)

    def _where(self, e: int, agent: Optional[int] = None) -> str:
        return where(self.cfg.env, self.idx, e, agent)

    def _env_call(self, e: int, call: str, fn, *args, **kwargs):
        """An env's reset()/step(): an exception in it stops the run with one line naming it."""
        try:
            return fn(*args, **kwargs)
        except EnvContractError:
            raise
        except Exception as ex:
            raise call_failed(self._where(e), call, ex) from ex

    def _start_envs(self) -> None:
        self.action_space.seed(int(self.rng.integers(2**31)))
        self.unscored = np.zeros(self.num_actors, dtype=bool)  # episode not to be reported
        for e, env in enumerate(self.envs):
            self._beat(hb.RESETTING, e)
            if self.cfg.serial_mode and hasattr(env, "seed_episodes"):
                # every episode from a seeded reset, its actions kept: a stop can then save the
                # env as a replay (serial_state.py). Only here: reseeding may cost (Atari
                # reloads its ROM), and parallel runs do not save it
                env.seed_episodes(int(self.rng.integers(2**31)))
            obs_list, infos = self._env_call(
                e, "reset()", env.reset, seed=int(self.rng.integers(2**31))
            )
            for a, info in enumerate(infos or ()):
                self.waits[e * self.num_agents + a] = not (info or {}).get("acts_next", True)
            if self.cfg.decorrelate_envs_on_one_worker and self.num_agents == 1:
                warm_up = int(self.rng.integers(0, 2 * self.T))
                for _ in range(warm_up):
                    action = self._warm_up_action(e, obs_list[0])
                    obs_list = self._env_call(e, "step()", env.step, [action])[0]
                # that episode was partly played at random: kept out of the statistics and
                # PBT's objective windows
                self.unscored[e] = warm_up > 0
            self._assign_seats(e)
            self._check_first_obs(e * self.num_agents, obs_list)
            for a, obs in enumerate(obs_list):
                self._store_obs(e * self.num_agents + a, obs)
        for i in range(self.num_actors):
            if self._trains(i):
                self.slot[i] = self._acquire(1)[0]

    def _warm_up_action(self, e: int, obs):
        """A uniformly random action of the start-up warm-up; with an action mask, a random
        legal one (the env is never handed an action its mask forbids)."""
        if self.mask_heads is None:
            return self.action_space.sample()
        try:
            mask = np.asarray(obs_to_dict(self.obs_space, obs)[MASK_KEY]).reshape(-1) > 0
        except (ValueError, TypeError, KeyError, IndexError) as ex:
            raise observation_misfit(self._where(e, 0), obs, self.obs_space, ex) from ex
        row = np.zeros(len(self.mask_heads), dtype=self.action_dtype)
        for head, (lo, hi) in enumerate(self.mask_heads):
            legal = np.flatnonzero(mask[lo:hi])
            if legal.size == 0:
                raise empty_action_mask(self._where(e, 0), head, len(self.mask_heads))
            row[head] = self.rng.choice(legal)
        return to_env_action(self.act_spec, self.action_space, row)

    def _store_obs(self, actor: int, obs) -> None:
        try:
            for k, v in obs_to_dict(self.obs_space, obs).items():
                self.cur_obs[k][actor] = v
        except (ValueError, TypeError, KeyError, IndexError) as ex:
            e, a = divmod(actor, self.num_agents)
            raise observation_misfit(self._where(e, a), obs, self.obs_space, ex) from ex
        if self.mask_heads is not None:
            row = self.cur_obs[MASK_KEY][actor]
            for head, (lo, hi) in enumerate(self.mask_heads):
                if not (row[lo:hi] > 0).any():
                    e, a = divmod(actor, self.num_agents)
                    raise empty_action_mask(self._where(e, a), head, len(self.mask_heads))
        self._check_finite(actor, actor + 1)

    def _check_finite(self, lo: int, hi: int) -> None:
        """The stored observations of actors lo..hi-1 hold no NaN or infinity (nor values a
        float32 cannot hold): the first that does stops the run, named."""
        for key in self.float_keys:
            rows = self.cur_obs[key][lo:hi]
            if np.isfinite(rows).all():
                continue
            j = int(np.flatnonzero(~np.isfinite(rows.reshape(hi - lo, -1)).all(axis=1))[0])
            e, a = divmod(lo + j, self.num_agents)
            part = "" if key == "obs" else f" (key '{key}')"
            raise EnvContractError(
                f"{self._where(e, a)}: the observation{part} holds NaN or infinite values "
                f"(or values beyond float32's range); observations must be finite numbers"
            )

    def _rewards(self, e: int, rewards) -> np.ndarray:
        """One step's rewards of env copy e as float32; a reward that is no finite number
        stops the run naming its agent."""
        try:
            out = np.asarray(rewards, dtype=np.float32)
            if np.isfinite(out).all():
                return out
        except (TypeError, ValueError):
            pass
        for a, r in enumerate(rewards):
            value = check_reward(self._where(e, a), r)  # raises for the first bad one
            if not np.isfinite(np.float32(value)):
                raise EnvContractError(f"{self._where(e, a)}: the reward {value} overflows float32")
        raise EnvContractError(f"{self._where(e)}: step() returned rewards {rewards!r}")

    def _trains(self, actor: int) -> bool:
        return isinstance(self.seat[actor], (int, np.integer))

    def _assign_seats(self, e: int) -> None:
        seats = self.matchmaker.assign(self.num_agents, self.rng)
        for a, seat in enumerate(seats):
            i = e * self.num_agents + a
            if is_snapshot(seat) and seat not in self.snapshot_store:
                seat = int(self.rng.integers(self.num_policies))  # snapshot gone: a live policy
            self.seat[i] = seat
            self.seat_row[i] = seat if self._is_policy(seat) else -1
            if is_snapshot(seat):
                self._snapshot_model(seat)  # load now, while the snapshot is surely known
            elif is_scripted_seat(seat):
                self._scripted_actor(i, seat).reset()
        self._install_shaping(e)
        if self.snapshot_models:
            self._drop_unused_snapshots()

    def _install_shaping(self, e: int) -> None:
        target = self.shaping_targets[e]
        if target is None:
            return
        for a in range(self.num_agents):
            i = e * self.num_agents + a
            p = self.seat[i]
            # a policy without PBT values (or a frozen snapshot) plays with the env's defaults
            shaping = (self.shaping.get(p) if self._trains(i) else None) or self.default_shaping
            if shaping is not None and self.installed_shaping.get(i) is not shaping:
                target.set_reward_shaping(shaping, a)
                self.installed_shaping[i] = shaping

    def _acquire(self, n: int) -> list[int]:
        slots: list[int] = []
        while len(slots) < n:
            self._beat(hb.WAIT_SLOT)
            timeout = 0.1 if self.blocking else 0.0
            got = self.pool.acquire(n - len(slots), timeout, holder=self.idx)
            if got:
                self.np["late_rewards"][got] = 0.0
            slots += got
            if not got:
                if not self.blocking:
                    raise RuntimeError("serial mode ran out of trajectory slots")
                if self.should_stop():
                    raise StopRequested
        return slots

    # --- control --------------------------------------------------------------------------
    def handle(self, msg) -> None:
        if isinstance(msg, SetRewardShaping):
            # installed on each env at the start of its next episode (see _install_shaping)
            self.shaping[msg.policy_id] = msg.shaping
        elif isinstance(msg, SetSnapshots):
            # in place: the matchmaker reads this same dict
            self.snapshot_store.clear()
            self.snapshot_store.update(msg.snapshot_ids)
        elif isinstance(msg, SetRatings) and self.ratings is not None:
            for key, rating in msg.ratings.items():
                self.ratings.set_rating(key, rating)

    def _model_for(self, seat) -> ActorCritic:
        if not self._is_policy(seat):
            return self._snapshot_model(seat)
        row = seat
        model = self.models.get(row)
        if model is None:
            model = self.make_model()
            model.eval()
            self.models[row] = model
        # the write counter, not the version, tells that weights changed: a snapshot row that
        # is reused may hold a new snapshot with the same version number as the old one
        seq = int(self.params.seq[row])
        if seq == 0:  # never published: wait for version 0 (or the resumed checkpoint)
            seq = self._wait_published(row)
        if seq != self.model_seq[row]:
            read_before = self.model_seq[row] >= 0
            version = self.params.read_into(row, model)
            copied = read_before and version - self._noticed_version[row] > self.max_lag
            if copied and self.prefer is not None:
                # a PBT copy: its learner needs a batch from the new weights, soon
                self.prefer(row, self._prefer_steps)
            self.model_version[row] = version
            self._noticed_version[row] = max(int(self._noticed_version[row]), version)
            self.model_seq[row] = seq
            if self.fused is not None:
                self.fused.load(row, model)
        return model

    def _wait_published(self, row: int) -> int:
        """No action comes from unpublished (all-zero) weights: wait for the learner's first
        publish, which after a resume holds the checkpoint."""
        while int(self._seq_now[row]) == 0:
            if not self.blocking:
                raise RuntimeError(f"policy {row} has no published weights yet")
            self._beat(hb.WAIT_WEIGHTS, row)
            if self.should_stop():
                raise StopRequested
            time.sleep(0.01)
        return int(self._seq_now[row])

    @property
    def _prefer_steps(self) -> int:
        return 2 * self.cfg.batch_size * self.cfg.num_batches_per_epoch

    def _notice_unseated_copies(self, seated_rows: np.ndarray) -> None:
        """Tell the matchmaker of a PBT copy into a policy that no env of this worker plays
        now. Its weights are read when it is next seated, but its learner is waiting for
        experience from them: without this, policy focus could keep it unseated for many
        seconds (measured: a first update 27 s after the decision)."""
        if self.prefer is None:
            return
        now = self._version_now[: self.num_policies]
        jumped = now - self._noticed_version > self.max_lag
        if not jumped.any():  # the usual case: one comparison per step
            return
        jumped &= self.model_seq >= 0  # read before: a version to compare with
        jumped[seated_rows] = False  # seated ones are noticed as their weights are read
        for p in np.flatnonzero(jumped).tolist():
            self.prefer(p, self._prefer_steps)
        self._noticed_version[jumped] = now[jumped]

    def _refresh_seated(self, rows: np.ndarray) -> None:
        """Reload (into the fused stacks too) the seated policies whose weights changed: one
        vectorised look at the write counters, then `_model_for` for the changed ones only."""
        seated = np.zeros(self.num_policies, dtype=bool)
        seated[rows] = True
        changed = seated & (self._seq_now[: self.num_policies] != self.model_seq)
        for p in np.flatnonzero(changed).tolist():
            self._model_for(p)

    def _snapshot_model(self, sid: str) -> ActorCritic:
        """Frozen weights, read once when first seated and kept until no seat uses them, so
        an episode against a snapshot that is evicted meanwhile plays on unchanged."""
        model = self.snapshot_models.get(sid)
        if model is None:
            model = self.make_model()
            model.eval()
            self.params.read_into(self.snapshot_store[sid], model)
            self.snapshot_models[sid] = model
        return model

    def _drop_unused_snapshots(self) -> None:
        seated = {s for s in self.seat if not self._is_policy(s)}
        for sid in list(self.snapshot_models):
            if sid not in seated and sid not in self.snapshot_store:
                del self.snapshot_models[sid]

    @staticmethod
    def _is_policy(seat) -> bool:
        return isinstance(seat, (int, np.integer))

    # --- the step -------------------------------------------------------------------------
    def step(self) -> None:
        if self.remote is not None:
            return self._step_remote()
        actions = self._act()
        self._beat(hb.STEPPING)
        finished: dict[int, list[int]] = {}
        if self.batch is not None:
            self._step_batch(actions, finished)
        else:
            self._step_envs(0, len(self.envs), actions, finished)
        self._after_step(finished)

    def _step_envs(self, e0: int, e1: int, actions: np.ndarray, finished: dict) -> None:
        """Step env copies e0..e1-1 one by one, then record them together."""
        steps = [self._step_env(e, actions) for e in range(e0, e1)]
        obs, rew, term, trunc, infos = zip(*steps)
        self._record(e0, obs, rew, term, trunc, infos, finished)

    def _step_env(self, e: int, actions: np.ndarray) -> tuple:
        self._beat(hb.STEPPING, e)
        base = e * self.num_agents
        env_actions = [
            to_env_action(self.act_spec, self.action_space, actions[base + a])
            for a in range(self.num_agents)
        ]
        obs, rew, term, trunc, infos = self._env_call(e, "step()", self.envs[e].step, env_actions)
        check_counts(self._where(e), obs, rew, self.num_agents, (term, trunc), infos)
        return obs, rew, term, trunc, infos

    def _step_batch(self, actions: np.ndarray, finished: dict) -> None:
        n, k = self.num_agents, len(self.envs)
        if self.act_spec.kind == "discrete":
            env_actions = actions.reshape(k, n)
        else:
            spec, space = self.act_spec, self.action_space
            env_actions = [
                [to_env_action(spec, space, actions[e * n + a]) for a in range(n)] for e in range(k)
            ]
        self._beat(hb.STEPPING, -1)
        obs, rew, term, trunc, infos = self._env_call(-1, "step()", self.batch.step, env_actions)
        self._record(0, obs, rew, term, trunc, infos, finished)

    def _after_step(self, finished: dict) -> None:
        self._send(finished)
        self.steps_since_report += self.num_actors
        self._maybe_report()

    def _act(self) -> np.ndarray:
        """One forward pass per group of seats (all policy seats together when the fused
        population forward applies), then one vectorised write into the trajectory slots."""
        n = self.num_actors
        actions = np.zeros((n, self.act_spec.dim), dtype=self.action_dtype)
        logp = np.zeros(n, dtype=np.float32)
        values = np.zeros(n, dtype=np.float32)
        policy_rows = self.seat_row
        trains = policy_rows >= 0
        skip = self._skip(0, n)
        acts = trains & ~skip
        h_before = self.h.clone() if self.rnn_size else None
        groups: dict[Any, list[int]] = {}
        for i, seat in enumerate(self.seat):
            if (self.fused is None or not trains[i]) and not skip[i]:
                groups.setdefault(seat, []).append(i)
        self._notice_unseated_copies(policy_rows[trains])
        if self.fused is not None and acts.any():
            idx = np.flatnonzero(acts)
            self._beat(hb.INFERENCE, hb.ALL_POLICIES)
            self._refresh_seated(policy_rows[idx])
            obs = {k: torch.from_numpy(self.cur_obs[k][idx]) for k in self.obs_keys}
            a, lp, v = self.fused.act(obs, policy_rows[idx])
            actions[idx] = a.numpy().reshape(len(idx), -1)
            logp[idx], values[idx] = lp.numpy(), v.numpy()
        self._act_locally(groups, actions, logp, values, h_before)
        self._fill_skipped(skip, actions, logp, values)
        if trains.any():
            versions = self.model_version[policy_rows[trains]]
            idx = np.flatnonzero(trains)
            # an episode's weights: those of the agent's first action in it (a waiting seat's
            # row is not read again, so its version may be older than the weights that act)
            first = (self.ep_version[idx] < 0) & acts[idx]
            self.ep_version[idx[first]] = versions[first]
            self._write_step(idx, policy_rows, actions, logp, values, h_before, versions, acts)
        return actions

    def _skip(self, lo: int, hi: int) -> np.ndarray:
        """Which actors of [lo, hi) the next forward pass leaves out: those the env said wait
        (`info["acts_next"]` False); with an RNN none, as its state moves on every step.
        Remembered in `self.skipped` for `_record`'s check."""
        skip = np.zeros(hi - lo, dtype=bool) if self.rnn_size else self.waits[lo:hi].copy()
        self.skipped[lo:hi] = skip
        return skip

    def _fill_skipped(self, skip, actions, logp, values, lo: int = 0) -> None:
        """What a skipped actor of [lo, lo + len(skip)) records: the action handed to the env,
        which ignores it, is the first legal one of each head (0 without a mask); log-prob and
        value are 0, on a step the learner never trains on."""
        if not skip.any():
            return
        ids = lo + np.flatnonzero(skip)
        logp[ids] = values[ids] = 0.0
        if self.mask_heads is None:
            actions[ids] = 0
            return
        legal = self.cur_obs[MASK_KEY][ids] > 0
        for head, (a, b) in enumerate(self.mask_heads):
            actions[ids, head] = legal[:, a:b].argmax(axis=1)

    def _scripted_actor(self, i: int, seat: str):
        actor = self.scripted_actors.get(i)
        if actor is None:
            spec = seat[len(SCRIPTED_PREFIX) :]
            seed = int(self.rng.integers(2**31))
            actor = make_scripted(self.cfg.env, spec, self.envs[i // self.num_agents], seed)
            if not hasattr(actor, "reset"):
                actor.reset = lambda: None
            self.scripted_actors[i] = actor
        return actor

    def _act_scripted(self, seat: str, actors: list[int], actions) -> None:
        """The scripted player's moves, one actor at a time, from the env's own observation."""
        for i in actors:
            if isinstance(self.obs_space, gym.spaces.Dict):
                obs = {k: self.cur_obs[k][i] for k in self.obs_keys}
            else:
                obs = self.cur_obs["obs"][i]
            action = self._scripted_actor(i, seat).act(obs)
            actions[i] = np.asarray(action, dtype=self.action_dtype).reshape(-1)

    def _act_locally(self, groups: dict, actions, logp, values, h_before) -> None:
        """One forward pass of this worker's own copy of each seat's weights."""
        for seat, actors in groups.items():
            if is_scripted_seat(seat):
                self._act_scripted(seat, actors, actions)
                continue
            self._beat(hb.INFERENCE, seat if self._is_policy(seat) else hb.SNAPSHOT_PASS)
            model = self._model_for(seat)
            idx = np.asarray(actors)
            obs = {k: torch.from_numpy(self.cur_obs[k][idx]) for k in self.obs_keys}
            h = h_before[idx] if self.rnn_size else None
            # a snapshot's seat trains nothing: its log-probs and values are not read
            t = self.cfg.selfplay_snapshot_temperature if is_snapshot(seat) else 1.0
            a, lp, v, h_after = model.act(obs, h, temperature=t)
            actions[idx] = a.numpy().reshape(len(idx), -1)
            logp[idx], values[idx] = lp.numpy(), v.numpy()
            if self.rnn_size:
                self.h[idx] = h_after

    def _write_step(self, idx, policy_rows, actions, logp, values, h_before, versions, acts):
        """Actors `idx` (the training seats) record this step; `acts` (bool per actor) are
        those a forward pass computed, whose values may bootstrap."""
        slots, ts = self.slot[idx], self.t[idx]
        for k in self.obs_keys:
            self.np[f"obs.{k}"][slots, ts] = self.cur_obs[k][idx]
        self.np["actions"][slots, ts] = actions[idx]
        self.np["log_probs"][slots, ts] = logp[idx]
        self.np["values"][slots, ts] = values[idx]
        self.np["policy_id"][slots, ts] = policy_rows[idx]
        self.np["policy_version"][slots, ts] = versions
        if self.rnn_size:
            chunk_start = ts % self.rec == 0
            if chunk_start.any():
                self.np["rnn_states"][slots[chunk_start], ts[chunk_start] // self.rec] = h_before[
                    torch.from_numpy(idx[chunk_start])
                ].numpy()
        if self.pending_bootstrap:
            finished: dict[int, list[int]] = {}
            waiting = {}
            for actor, entry in self.pending_bootstrap.items():
                old = entry[0]
                if not acts[actor]:  # not forwarded (waits, or another group): later
                    waiting[actor] = entry
                    continue
                # the value of this state bootstraps the old trajectory; with turn-taking it
                # is final once the step turns out to be the agent's decision (`_record`)
                self.np["values"][old, self.T] = values[actor]
                if entry[1]:  # after waiting steps: a later state than `_finish_full` stored
                    for k in self.obs_keys:
                        self.np[f"obs.{k}"][old, self.T] = self.cur_obs[k][actor]
                if self.defer_bootstrap and not self.np["dones"][old, self.T - 1]:
                    waiting[actor] = entry
                else:
                    finished.setdefault(int(policy_rows[actor]), []).append(old)
            self.pending_bootstrap = waiting
            self._send(finished)

    def _record(self, e0: int, obs, rew, term, trunc, infos, finished) -> None:
        """One step of env copies e0, e0 + 1, ... (`obs`, `rew`, `term`, `trunc`, `infos`: one
        entry per copy, each one per agent; a flag may be one for the whole copy). What every
        step does is done for all their actors at once; the copies with an event
        (an episode end, a trajectory filled or waiting for its bootstrap value) then go one by
        one, in order, as the slots they take and the trajectories they send depend on that
        order."""
        n, k = self.num_agents, len(obs)
        lo, hi = e0 * n, (e0 + k) * n
        rew = self._step_rewards(e0, rew)
        term = np.broadcast_to(np.asarray(term, bool).reshape(k, -1), (k, n)).reshape(-1)
        trunc = np.broadcast_to(np.asarray(trunc, bool).reshape(k, -1), (k, n)).reshape(-1)
        dones, cuts = term | trunc, trunc & ~term  # cuts: ended by a time limit alone
        flat = [info for per_copy in infos for info in (per_copy or [{}] * n)] if infos else None
        active = np.ones(k * n, dtype=bool)
        acts_next = np.ones(k * n, dtype=bool)
        if flat:
            try:
                active[:] = [info.get("is_active", True) for info in flat]
                acts_next[:] = [info.get("acts_next", True) for info in flat]
            except AttributeError:
                raise self._info_misfit(e0, flat) from None
        contract = active & self.skipped[lo:hi]
        if contract.any():
            e, a = divmod(lo + int(np.flatnonzero(contract)[0]), n)
            raise EnvContractError(
                f"{self._where(e, a)}: its info said acts_next=False, so its action was not "
                "computed, yet the next step counted it (is_active=True)"
            )
        self.waits[lo:hi] = ~acts_next
        trains = self.seat_row[lo:hi] >= 0
        idx = np.flatnonzero(trains)
        s, t = self.slot[lo + idx], self.t[lo + idx]
        self.np["rewards"][s, t] = rew[idx]
        self.np["dones"][s, t] = dones[idx]
        self.np["timeouts"][s, t] = cuts[idx]
        self.np["valid"][s, t] = active[idx]
        self.ep_return[lo:hi] += rew
        self.ep_len[lo:hi] += 1
        self._store_obs_of(lo, obs)
        event = dones.copy()
        event[idx] |= t + 1 == self.T
        for i in self.pending_bootstrap:
            if lo <= i < hi:
                event[i - lo] = True
        if n > 1:
            event = np.repeat(event.reshape(k, n).any(axis=1), n)
        counted = 0  # copies whose steps the matchmaker was told of: seats are drawn from them
        for j in np.flatnonzero(event[::n]).tolist():
            self._count_steps(trains, counted, j + 1, lo)
            counted = j + 1
            info = infos[j] if infos else None
            self._copy_event(e0 + j, j * n, rew, dones, cuts, active, info, finished)
        self._count_steps(trains, counted, k, lo)
        # the other copies' trainers move one step on; their other actors hold no slot
        self.t[lo:hi][~event & trains] += 1
        self.slot[lo:hi][~event & ~trains] = -1

    def _info_misfit(self, e0: int, flat: list) -> EnvContractError:
        """The first info of copies e0, e0 + 1, ... that is no dict, named."""
        j = next(j for j, info in enumerate(flat) if not isinstance(info, dict))
        e, a = divmod(e0 * self.num_agents + j, self.num_agents)
        return EnvContractError(
            f"{self._where(e, a)}: step() returned an info holding a "
            f"{type(flat[j]).__name__}; each agent's info is a dict"
        )

    def _step_rewards(self, e0: int, rewards) -> np.ndarray:
        """The rewards of copies e0, e0 + 1, ... as one float32 array; a reward that is no
        finite number stops the run naming its agent (`_rewards`)."""
        try:
            out = np.asarray(rewards, dtype=np.float32).reshape(-1)
            if np.isfinite(out).all():
                return out
        except (TypeError, ValueError):
            pass
        return np.concatenate([self._rewards(e0 + j, r) for j, r in enumerate(rewards)])

    def _check_first_obs(self, lo: int, flat) -> None:
        """Observations of actors lo, lo + 1, ... checked against the space in full
        (`observation_problem`): at reset and on the first step, where storing them would
        silently cast or spread what does not fit; later steps are only stored."""
        for j, o in enumerate(flat):
            problem = observation_problem(o, self.obs_space)
            if problem:
                e, a = divmod(lo + j, self.num_agents)
                raise EnvContractError(
                    f"{self._where(e, a)}: the observation does not fit the observation space "
                    f"{self.obs_space!r}: {problem}"
                )

    def _store_obs_of(self, lo: int, obs) -> None:
        """The observations of actors lo, lo + 1, ... (one list per copy), written per key.
        Any that do not fit, or leave an action head no legal action, go actor by actor
        through `_store_obs`, which names the first bad one."""
        flat = [o for per_copy in obs for o in per_copy]
        hi = lo + len(flat)
        if not self.all_obs_checked and not self.obs_checked[lo:hi].all():  # first steps
            self._check_first_obs(lo, flat)
            self.obs_checked[lo:hi] = True
            self.all_obs_checked = bool(self.obs_checked.all())
        fits = self._write_obs_rows(lo, hi, flat)
        if fits and self.mask_heads is not None:
            rows = self.cur_obs[MASK_KEY][lo:hi] > 0
            fits = all(rows[:, a:b].any(axis=1).all() for a, b in self.mask_heads)
        if not fits:
            for j, o in enumerate(flat):
                self._store_obs(lo + j, o)
        else:
            self._check_finite(lo, hi)

    def _write_obs_rows(self, lo: int, hi: int, flat: list) -> bool:
        """Write observations `flat` to rows lo..hi-1 of each key at once; False where they do
        not fit that way (a Discrete space's are one-hot encoded by `_store_obs`)."""
        space, keys = self.obs_space, self.obs_keys
        if isinstance(space, gym.spaces.Discrete):
            return False
        try:
            if not isinstance(space, gym.spaces.Dict):
                self.cur_obs["obs"][lo:hi] = flat
                return True
            if any(len(o) != len(keys) for o in flat):
                return False
            for key in keys:
                self.cur_obs[key][lo:hi] = [o[key] for o in flat]
            return True
        except (ValueError, TypeError, KeyError, IndexError):
            return False

    def _count_steps(self, trains: np.ndarray, j0: int, j1: int, lo: int) -> None:
        """Tell the matchmaker of one step of each policy seat of copies j0..j1-1 (relative
        to the actors' `lo`)."""
        if self.count_steps is None or j1 <= j0:
            return
        n = self.num_agents
        rows = self.seat_row[lo + j0 * n : lo + j1 * n][trains[j0 * n : j1 * n]]
        for policy, steps in enumerate(np.bincount(rows).tolist()):
            if steps:
                self.count_steps(policy, steps)

    def _copy_event(self, e: int, off: int, rew, dones, cuts, active, infos, finished) -> None:
        """Copy e's step after `_record`'s common part: bootstrap values settled, episodes
        closed, seats drawn again when the whole copy's episode ended, and each trajectory
        moved one step on (sent on when full). Its agents are at `off` in `rew`, `dones`, `cuts`
        and `active` (`_record`'s arrays); `infos` is copy e's."""
        n = self.num_agents
        base = e * n
        # an episode the env could not finish (a crashed game): trained on as a cut, but it has
        # no result, so neither its statistics nor its match are kept
        aborted = (
            bool(infos)
            and dones[off : off + n].any()
            and any(infos[a].get("episode_aborted") for a in range(n))
        )
        for a in range(n):
            i = base + a
            done = bool(dones[off + a])
            if i in self.pending_bootstrap and self._trains(i):  # only while deferred
                cut = bool(cuts[off + a])
                self._settle_bootstrap(i, bool(active[off + a]), rew[off + a], done, cut, finished)
            if done:
                if self.rnn_size:
                    self.h[i] = 0.0
                if self.unscored[i] or aborted:
                    self.unscored[i] = False
                else:
                    self.episodes.append(self._episode_stats(i, infos[a] if infos else {}, e, a))
                self.last_return[i] = self.ep_return[i]
                self.ep_return[i] = 0.0
                self.ep_len[i] = 0
        if dones[off : off + n].all():
            if n > 1 and not aborted:
                key = self.target_key
                self.matches.append(
                    MatchResult(
                        seats=[self.seat[base + a] for a in range(n)],
                        versions=[int(self.ep_version[base + a]) for a in range(n)],
                        teams=[int(infos[a].get("team", a)) for a in range(n)],
                        # the episode's return where the env gives no objective (as for
                        # PBT's ranking on episodes): a draw for every game otherwise
                        objectives=[
                            float(
                                infos[a].get(
                                    key, infos[a].get("true_objective", self.last_return[base + a])
                                )
                            )
                            for a in range(n)
                        ],
                    )
                )
            old_seats = self.seat[base : base + n]
            self._assign_seats(e)
            for a in range(n):
                i = base + a
                if self.seat[i] != old_seats[a]:
                    if self.rnn_size:
                        self.h[i] = 0.0
                    if self._is_policy(old_seats[a]):
                        self._switch_policy(i, old_seats[a], finished)
                    else:  # a frozen snapshot's seat: nothing to close
                        self._take_slot(i)
        # the next episode's weights: set at the agent's first action in it
        self.ep_version[base + np.flatnonzero(dones[off : off + n])] = -1
        for a in range(n):
            i = base + a
            if self._trains(i):
                self.t[i] += 1
                if self.t[i] == self.T and not self.np["valid"][self.slot[i]].any():
                    # no decision in it (the agent waited throughout: its rewards went to the
                    # trajectory waiting for its next decision, or precede the first one of an
                    # episode): nothing to train on, the slot is written again from its start
                    self.t[i] = 0
                elif self.t[i] == self.T and dones[off + a]:
                    # ended on its last step: nothing to bootstrap, sent now (waiting for a
                    # value, it would take in the waiting steps of the agent's next episode)
                    s, policy = int(self.slot[i]), int(self.seat_row[i])
                    self._pad(s, self.T, policy)
                    finished.setdefault(policy, []).append(s)
                    self.slot[i], self.t[i] = self._acquire(1)[0], 0
                elif self.t[i] == self.T:
                    self._finish_full(i)
            elif self.slot[i] >= 0:
                self.slot[i] = -1

    def _episode_stats(self, i: int, info: dict, e: int, agent: int) -> EpisodeStats:
        objective = info.get(self.target_key)
        if objective is not None:
            objective = check_objective(self._where(e, agent), self.target_key, objective)
        extra = {k: float(v) for k, v in info.get("episode_extra_stats", {}).items()}
        if "true_objective" in info and self.target_key != "true_objective":
            extra["true_objective"] = float(info["true_objective"])
        return EpisodeStats(
            self.seat[i],
            float(self.ep_return[i]),
            int(self.ep_len[i]),
            None if objective is None else float(objective),
            extra,
            int(self.ep_version[i]),
        )

    def _finish_full(self, i: int) -> None:
        """A full trajectory: its bootstrap value comes from the next forward pass."""
        old = int(self.slot[i])
        for k in self.obs_keys:
            self.np[f"obs.{k}"][old, self.T] = self.cur_obs[k][i]
        self.pending_bootstrap[i] = [old, 0]
        self.slot[i] = self._acquire(1)[0]
        self.t[i] = 0

    def _settle_bootstrap(
        self, i: int, active: bool, r: float, done: bool, cut: bool, finished
    ) -> None:
        """Actor i's step was just recorded while its previous trajectory waits for a
        bootstrap value (`_write_step` wrote this step's value there; a trajectory whose
        episode had ended was sent there). A decision or an episode end sends that trajectory,
        however long the agent waits; a waiting step's reward (scaled and clipped alone, as the
        learner does each step's) goes to its `late_rewards`, its episode end (and whether a
        time limit cut it) to its last step, where the learner credits them to the last
        decision (the new trajectory's copy of that reward precedes its first decision: not
        counted)."""
        entry = self.pending_bootstrap[i]
        old = entry[0]
        if not active:
            r *= self.reward_scale  # finite: `_step_rewards` stops the run on any other
            self.np["late_rewards"][old] += min(max(r, -self.clip), self.clip)
            if done:  # no bootstrap: any finite value (no forward pass may have given one)
                self.np["dones"][old, self.T - 1] = 1.0
                self.np["timeouts"][old, self.T - 1] = cut
                self.np["values"][old, self.T] = 0.0
            entry[1] += 1
            if not done:
                return
        del self.pending_bootstrap[i]
        finished.setdefault(int(self.seat_row[i]), []).append(old)

    def _switch_policy(self, i: int, policy: int, finished: dict) -> None:
        """The seat changed policy at an episode end. The old policy's partial trajectory is
        parked, to be continued by the next seat that starts an episode with that policy (the
        episode end between the two parts stops GAE and resets the RNN, so no padding is
        wasted); with too many parked, it is padded and sent."""
        s, t = int(self.slot[i]), int(self.t[i]) + 1  # the step just recorded counts
        if t >= self.T:  # ended exactly on the last step: complete, nothing to bootstrap
            self._pad(s, t, policy)
            finished.setdefault(policy, []).append(s)
        elif sum(len(v) for v in self.parked.values()) < self.num_actors:
            self.parked.setdefault(policy, []).append((s, t))
        else:
            self._pad(s, t, policy)
            finished.setdefault(policy, []).append(s)
        self._take_slot(i)

    def _take_slot(self, i: int) -> None:
        """Give seat i a slot for its (new) policy: a parked partial one, else a fresh one."""
        if not self._trains(i):
            self.slot[i], self.t[i] = -1, -1
            return
        parked = self.parked.get(self.seat[i])
        if parked:
            s, t = parked.pop()
            self.slot[i], self.t[i] = s, t - 1  # incremented to t right after
        else:
            self.slot[i] = self._acquire(1)[0]
            self.t[i] = -1  # incremented to 0 right after

    def _pad(self, s: int, t: int, policy: int) -> None:
        """Close slot s after its first t steps: the rest is marked invalid."""
        if t < self.T:
            for k in self.obs_keys:
                self.np[f"obs.{k}"][s, t:] = self.np[f"obs.{k}"][s, t - 1]
            self.np["actions"][s, t:] = 0
            self.np["log_probs"][s, t:] = 0.0
            self.np["values"][s, t:] = 0.0
            self.np["rewards"][s, t:] = 0.0
            self.np["dones"][s, t:] = 1.0
            self.np["timeouts"][s, t:] = False
            self.np["valid"][s, t:] = False
            self.np["policy_id"][s, t:] = policy
            self.np["policy_version"][s, t:] = self.np["policy_version"][s, t - 1]
            if self.rnn_size:
                first_chunk = -(-t // self.rec)
                self.np["rnn_states"][s, first_chunk:] = 0.0
        for k in self.obs_keys:  # any finite observation: the last step ended an episode
            self.np[f"obs.{k}"][s, self.T] = self.np[f"obs.{k}"][s, t - 1]
        self.np["values"][s, self.T] = 0.0

    def _send(self, finished: dict[int, list[int]]) -> None:
        for policy, slots in finished.items():
            self.buffers.transfer(slots, WORKER, QUEUED)
            self.learner_queues[policy].put(Trajectories(int(policy), slots))

    def _maybe_report(self, force: bool = False) -> None:
        """Episodes, games and steps to the runner every half second; in serial mode after
        every step, so that PBT sees each episode at the same point of a seeded run (on the
        clock, a repeat of the run ranked other windows and decided otherwise)."""
        now = time.monotonic()
        if force or self.cfg.serial_mode or now - self.last_report > 0.5:
            self.report_queue.put(
                WorkerReport(self.idx, self.episodes, self.matches, self.steps_since_report)
            )
            self.episodes, self.matches = [], []
            self.steps_since_report = 0
            self.last_report = now

    # --- exact resume (serial mode) ---------------------------------------------------------
    def resume_blockers(self) -> list[str]:
        """Why this worker's state cannot be saved for an exact resume ([] when it can)."""
        why = []
        if self.batch is not None and not hasattr(self.batch, "get_state"):
            why.append(f"the batched env {self.cfg.env} has no get_state()")
        elif self.batch is None:
            for e, env in enumerate(self.envs):
                if not hasattr(env, "get_state"):
                    why.append(f"{self._where(e)} has no get_state()")
                    break
                if hasattr(env, "can_save_state") and not env.can_save_state():
                    why.append(f"{self._where(e)} keeps no replay of its episode")
                    break
        if self.remote is not None:
            why.append("acting goes through an inference server")
        if self.scripted_actors:
            why.append("scripted players keep state of their own")
        if self.snapshot_models or self.snapshot_store:
            why.append("frozen snapshots play")
        if getattr(self.matchmaker, "ratings", None) is not None:
            why.append("Elo matchmaking (its ratings are not saved)")
        return why

    def state_dict(self) -> dict:
        """Everything this worker carries from one step to the next, as plain data (see
        `resume_blockers` first). Statistics not yet reported are sent now."""
        self._maybe_report(force=True)
        envs = (
            [self.batch.get_state()]
            if self.batch is not None
            else [env.get_state() for env in self.envs]
        )
        return {
            "rng": self.rng.bit_generator.state,
            "envs": envs,
            "unscored": self.unscored.copy(),
            "seat": [s if isinstance(s, str) else int(s) for s in self.seat],
            "seat_row": self.seat_row.copy(),
            "slot": self.slot.copy(),
            "t": self.t.copy(),
            "h": self.h.clone(),
            "waits": self.waits.copy(),
            "cur_obs": {k: v.copy() for k, v in self.cur_obs.items()},
            "pending_bootstrap": [
                [int(i), int(old), int(waited)]
                for i, (old, waited) in self.pending_bootstrap.items()
            ],
            "parked": {int(p): [(int(s), int(t)) for s, t in v] for p, v in self.parked.items()},
            "ep_return": self.ep_return.copy(),
            "last_return": self.last_return.copy(),
            "ep_len": self.ep_len.copy(),
            "ep_version": self.ep_version.copy(),
            "shaping": dict(self.shaping),
            "installed_shaping": dict(self.installed_shaping),
            "model_version": self.model_version.copy(),
            "noticed_version": self._noticed_version.copy(),
            "model_rows": sorted(int(p) for p in self.models),
            "matchmaker": (
                self.matchmaker.state_dict() if hasattr(self.matchmaker, "state_dict") else None
            ),
        }

    def restore_envs(self, state: dict) -> None:
        """Put every env back as `state_dict()` saw it (a gymnasium env replays its episode);
        ValueError naming the env when one cannot (a replay that ends elsewhere)."""
        if self.batch is not None:
            envs = [(-1, self.batch, state["envs"][0])]
        else:
            envs = [(e, env, s) for e, (env, s) in enumerate(zip(self.envs, state["envs"]))]
        for e, env, env_state in envs:
            try:
                env.set_state(env_state)
            except Exception as ex:
                raise ValueError(f"{self._where(e)}: set_state() failed: {ex}") from ex

    def load_state_dict(self, state: dict) -> None:
        """Continue exactly where `state_dict()` was taken (after `restore_envs`): the same
        seats, slots, episode sums and random stream. Weights are read again from the store."""
        self.rng.bit_generator.state = state["rng"]
        self.unscored = state["unscored"].copy()
        self.seat = list(state["seat"])
        self.seat_row = state["seat_row"].copy()
        self.slot = state["slot"].copy()
        self.t = state["t"].copy()
        self.h = state["h"].clone()
        if "waits" in state:  # saved before envs could say who acts next: every actor acts
            self.waits[...] = state["waits"]
        for k, v in state["cur_obs"].items():
            self.cur_obs[k][...] = v
        self.pending_bootstrap = {  # [actor, slot] from before waiting steps were counted
            int(entry[0]): [int(entry[1]), int(entry[2]) if len(entry) > 2 else 0]
            for entry in state["pending_bootstrap"]
        }
        self.parked = {int(p): [tuple(x) for x in v] for p, v in state["parked"].items()}
        self.ep_return = state["ep_return"].copy()
        self.last_return = state.get("last_return", np.zeros_like(self.ep_return)).copy()
        self.ep_len = state["ep_len"].copy()
        if "ep_version" in state:  # a state saved before it was kept: versions unknown
            self.ep_version = state["ep_version"].copy()
        self.shaping = dict(state["shaping"])
        # the dicts each env plays with now (a PBT change waits for the next episode)
        installed = state["installed_shaping"]
        for e, target in enumerate(self.shaping_targets):
            for a in range(self.num_agents):
                i = e * self.num_agents + a
                if target is not None and i in installed:
                    target.set_reward_shaping(installed[i], a)
        self.installed_shaping = {int(i): d for i, d in installed.items()}
        # the policies' weights, read from the new store now: a model made later would draw
        # its initial weights from the random stream that is restored next
        self.model_seq[:] = -1
        for row in state["model_rows"]:
            self._model_for(int(row))
        self.model_version = state["model_version"].copy()
        self._noticed_version = state["noticed_version"].copy()
        if state["matchmaker"] is not None:
            self.matchmaker.load_state_dict(state["matchmaker"])

    def close(self) -> None:
        self._maybe_report(force=True)
        for env in [self.batch] if self.batch is not None else self.envs:
            try:
                env.close()
            except Exception:  # closing is best effort; a broken env must not block shutdown
                pass
