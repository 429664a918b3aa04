"""The runner: builds every component, starts them (processes, or one loop in serial mode),
watches progress, drives PBT and self-play bookkeeping, and stops cleanly.

This is where the training loop lives: `Runner.run()` -> `_loop()`; the per-sample work
happens in RolloutWorker.step() and Learner.train_on().
"""

from __future__ import annotations

import collections
import importlib
import multiprocessing
import os
import pickle
import queue
import shutil
import signal
import sys
import threading
import time
import traceback
from typing import Optional

import gymnasium as gym
import numpy as np
import torch

from rl_pbt.config.parse import (
    Cfg,
    ConfigError,
    experiment_dir,
    recurrence,
    resume_changes,
    resume_mismatches,
    resume_notes,
    save_cfg,
    worker_splits_problem,
)
from rl_pbt.config.policy_values import (
    check_shaping_keys,
    describe_values,
    load_policy_values,
    split_values,
)
from rl_pbt.envs.contract import EnvContractError
from rl_pbt.envs.registry import known_to_new_processes, make_env, registry_snapshot
from rl_pbt.envs.scripted import make_scripted, scripted_snapshot
from rl_pbt.envs.wrappers import as_multiagent, reward_shaping_target
from rl_pbt.learning.checkpoints import (
    CheckpointError,
    CheckpointWriteError,
    checkpoint_files,
    checkpoint_order,
    read_checkpoint,
)
from rl_pbt.learning.learner import Learner, default_hparams
from rl_pbt.learning.learner_process import LearnerHost, learner_process_main
from rl_pbt.logging.files import (
    EXPERIMENT_MARKER,
    atomic_write_json,
    checkpoint_dir,
    experiment_name_problem,
    is_inside,
    read_json,
    read_run_config,
)
from rl_pbt.logging.progress import end_of_run_text
from rl_pbt.logging.stats import PopulationStats
from rl_pbt.memory.buffers import TrajectoryBuffers, num_slots_needed
from rl_pbt.memory.param_store import ParamStore, store_words
from rl_pbt.memory.slots import SlotPool
from rl_pbt.models.actor_critic import make_actor_critic
from rl_pbt.pbt.lineage import lineage_path, read_events
from rl_pbt.pbt.search_space import flatten_shaping, overlay_shaping, saved_member_shaping
from rl_pbt.runtime import heartbeat as hb
from rl_pbt.runtime import serial_state
from rl_pbt.runtime.control import (
    AddSnapshot,
    Apply,
    Export,
    ExportSnapshot,
    GroupControl,
    Import,
)
from rl_pbt.runtime.devices import (
    derive_seed,
    describe,
    device_map,
    fresh_seed,
    physical_memory,
    resolve_inference,
    resolve_start_method,
    shared_memory_room,
    torch_built_for_gpus,
    uses_cuda,
    visible_gpu_count,
)
from rl_pbt.runtime.messages import (
    STOP_NOW,
    STOPPING,
    ApplyPBT,
    ExportDone,
    ExportState,
    LearnerEvent,
    LearnerReport,
    LocalQueue,
    PublishSnapshot,
    SetRatings,
    SetRewardShaping,
    SetSnapshots,
    Stop,
    WorkerReport,
    drain,
    make_queue,
)
from rl_pbt.runtime.processes import (
    RunSpec,
    build_learner,
    build_worker,
    check_picklable_registry,
    learner_groups,
    seed_everything,
)
from rl_pbt.runtime.run_lock import RunLock
from rl_pbt.sampling.elo import (
    CrossPlay,
    EloRatings,
    matches_from_episode,
    scores_against_scripted,
    scores_against_snapshots,
)
from rl_pbt.sampling.inference_server import (
    DirectServer,
    InferenceIO,
    InferencePlan,
    InferenceServer,
    inference_process_main,
)
from rl_pbt.sampling.matchmaking import (
    SnapshotPool,
    is_snapshot,
    parse_snapshot_id,
    scripted_seat,
    snapshot_id,
)
from rl_pbt.sampling.worker_process import worker_process_main

ELO_SAVE_EVERY_S = 30.0  # elo.json is also written at every stop
# summary.json too, not only at the stop: a run killed whole (the OOM killer, a lost node)
# resumes its frames and episodes from it instead of counting from 0. It is rewritten when a
# newer checkpoint is found (looked for every SUMMARY_CHECK_EVERY_S), so that it goes with the
# checkpoints a resume loads
SUMMARY_CHECK_EVERY_S = 2.0
RATINGS_EVERY_S = 1.0  # Elo matchmaking: newest ratings to the workers at most this often


# Under forkserver (CUDA's start method) a child's end is read from the fork server: should the
# server end alone (killed by hand, or by the OOM killer), every child reads as ended with exit
# code 255 while it still runs. Where that code comes with the child's own process still
# running, its pid decides.
FORK_SERVER_LOST = 255


def _running(proc) -> bool:
    """Whether a child process runs, by its own pid where its fork server has ended."""
    if proc.is_alive():
        return True
    return proc.exitcode == FORK_SERVER_LOST and bool(proc.pid) and hb.pid_running(proc.pid)


def _wait_for(proc, timeout: float) -> None:
    """proc.join(timeout), or a plain wait where only its pid says it runs."""
    if proc.is_alive():
        proc.join(timeout=timeout)
    elif _running(proc):
        time.sleep(min(timeout, 0.05))


def _send(proc, sig: int) -> None:
    """A signal to a running child (by its pid, as `terminate` and `kill` send theirs)."""
    if _running(proc):
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            pass


def _is_learner(process_name: str) -> bool:
    """learner_P (one policy) or learners_DEVICE (--learner_processes=per_device)."""
    return process_name.startswith("learner")


class ComponentFailure(RuntimeError):
    pass


# a rollout worker that dies (killed, a crash in an env's native code) is restarted; one that
# dies this many times within RESTART_WINDOW_S stops the run
WORKER_DEATHS_ALLOWED = 3
RESTART_WINDOW_S = 600.0
STOP_GRACE_S = 30.0  # children get this long to stop and save; a stuck runner waits as long
PBT_SETTLE_S = 10.0  # at a stop, PBT steps already sent get this long to land before the saves
HUNG_STOP_GRACE_S = 2.0  # a worker or inference process that stopped answering gets this
# rl-pbt-train sets this to its own command line (with --restart_behavior=resume): a jammed run
# restarts itself with it from its last checkpoints (--restart_on_jam)
REEXEC_ARGV: Optional[list[str]] = None
# rl-pbt-train sets this: the run is the process's whole work, so once it has stopped a
# SIGINT or SIGTERM (Ctrl-C pressed again) is ignored, not a traceback in the process's exit
WHOLE_PROCESS = False
JAM_RESTARTS_ENV = "RL_PBT_JAM_RESTARTS"  # times of the restarts so far, comma-separated
JAM_RESTARTS_PER_HOUR = 3
# the time the command first started, carried over its automatic restarts: --train_for_seconds
# counts from it (a resume by running the command again counts anew)
STARTED_AT_ENV = "RL_PBT_STARTED_AT"
# the watchdog sleeps 1 s: a wake (or a turn of the main loop) this much later means the run was
# suspended, and no component could beat meanwhile
SUSPENDED_AFTER_S = 5.0
JAM_AFTER_DEATH_S = 300.0  # a silent component this soon after a worker death: a jam


def jam_restart_argv(cfg: Cfg, now: Optional[float] = None) -> Optional[list[str]]:
    """The command that restarts this run after a jam, or None when it must stop instead (not
    started by rl-pbt-train, --restart_on_jam off, or 3 restarts within the hour already)."""
    if REEXEC_ARGV is None or not cfg.restart_on_jam:
        return None
    now = time.time() if now is None else now
    times = [float(t) for t in os.environ.get(JAM_RESTARTS_ENV, "").split(",") if t]
    recent = [t for t in times if now - t < 3600]
    if len(recent) >= JAM_RESTARTS_PER_HOUR:
        return None
    os.environ[JAM_RESTARTS_ENV] = ",".join(str(t) for t in [*recent, now])
    return list(REEXEC_ARGV)


def restart_whole_run(argv: list[str], started_at: float) -> None:
    """Replace this process by a new run of `argv` (same pid, same terminal; the run lock's
    descriptor closes on exec, so the new run takes the lock again). `started_at`: when the
    command first started, which the new run's --train_for_seconds counts from."""
    os.environ[STARTED_AT_ENV] = repr(started_at)
    restarts = len(os.environ.get(JAM_RESTARTS_ENV, "").split(","))
    log(
        f"restarting the whole run from its last checkpoints ({restarts} of "
        f"{JAM_RESTARTS_PER_HOUR} restarts allowed per hour; --restart_on_jam)"
    )
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(argv[0], argv)


def _started_at(value: Optional[str], now: float) -> float:
    """The command's first start from STARTED_AT_ENV (`now` when unset or not a time up to
    now)."""
    try:
        started = float(value) if value else now
    except ValueError:
        return now
    return started if 0 < started <= now else now


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def check_experiment_dir(cfg: Cfg) -> str:
    """The experiment folder, after the checks that keep every other folder safe: a plain
    name inside --train_dir, and with --restart_behavior=overwrite a folder this trainer
    made (its marker file inside), not a link. Raises ConfigError before anything is touched."""
    problem = experiment_name_problem(cfg.experiment)
    if problem:
        raise ConfigError(
            f"--experiment={cfg.experiment!r} {problem}: give a plain folder name (no '/', "
            f"no '..'); the run goes to --train_dir={cfg.train_dir!r}/<name>"
        )
    exp_dir = experiment_dir(cfg)
    if not os.path.isfile(os.path.join(exp_dir, "config.json")):
        return exp_dir
    if cfg.restart_behavior == "resume":
        check_resume(cfg, os.path.join(exp_dir, "config.json"))
    if cfg.restart_behavior == "overwrite":
        why = None
        if os.path.islink(exp_dir):
            why = "is a symbolic link"
        elif not is_inside(exp_dir, cfg.train_dir):
            why = f"does not lie inside --train_dir={cfg.train_dir!r}"
        elif not os.path.isfile(os.path.join(exp_dir, EXPERIMENT_MARKER)):
            why = f"has no {EXPERIMENT_MARKER} marker (this trainer did not create it)"
        if why:
            raise ConfigError(
                f"--restart_behavior=overwrite: {exp_dir} {why}, so it is not deleted; "
                "remove it yourself, or use --restart_behavior=restart or another --experiment"
            )
    return exp_dir


def _saved_config(exp_dir: str) -> Optional[dict]:
    """The config.json of the run in `exp_dir`, or None (none, or unreadable: check_resume
    refuses such a resume)."""
    try:
        return read_run_config(os.path.join(exp_dir, "config.json"))
    except (OSError, ValueError):
        return None


def check_resume(cfg: Cfg, config_path: str) -> None:
    """A resumed run has the env, population and network of the run it resumes: else its
    checkpoints cannot load, and the old config would be overwritten by a run that fails."""
    try:
        saved = read_run_config(config_path)
    except ValueError as e:
        raise ConfigError(
            f"cannot resume {os.path.dirname(config_path)}: its config.json is unreadable "
            f"({e}); use --restart_behavior=restart (moves the old run aside) or another "
            "--experiment"
        ) from None
    exp_dir = os.path.dirname(config_path)
    # a population on Ray keeps its checkpoints in its node groups' folders, and each group's
    # run checks its own
    recorded = {} if cfg.ray_address else recorded_env_steps(exp_dir)
    unusable = unusable_checkpoints(exp_dir, cfg.num_policies, recorded)
    if unusable:
        raise ConfigError(
            f"cannot resume {exp_dir}: {unusable}; restore its "
            "checkpoints, or start the run over: --restart_behavior=restart (moves the old run "
            "aside) or --restart_behavior=overwrite (deletes it)"
        )
    wrong = resume_mismatches(cfg, saved)
    if wrong:
        raise ConfigError(
            f"cannot resume {os.path.dirname(config_path)} with {'; '.join(wrong)}: a resumed "
            "run keeps the env, the number of policies and the network of the run it "
            "continues. Give the run's values to resume it, or start a new run: "
            "--restart_behavior=restart (moves the old run aside), "
            "--restart_behavior=overwrite (deletes it), or another --experiment"
        )


def unusable_checkpoints(
    exp_dir: str, num_policies: int, recorded: Optional[dict[int, int]] = None
) -> Optional[str]:
    """Why some policy cannot resume: it has checkpoint files and none of them can be read
    (else it would train from scratch and its new checkpoints rotate the old ones out), or it
    has none while the run recorded env steps of it (its checkpoints were deleted or lost:
    it would start from random weights under the old step count). None when each policy has
    a readable checkpoint, or none and no steps recorded (a run stopped before its first
    checkpoint). `recorded`: each policy's env steps the run recorded (`recorded_env_steps`).
    Only the newest readable checkpoint of each policy is read."""
    recorded = recorded or {}
    for p in range(num_policies):
        folder = checkpoint_dir(exp_dir, p)
        found, newest = newest_readable_checkpoint(folder)
        if found is None and newest is not None:
            return (
                f"none of the {len(checkpoint_files(folder))} checkpoints of policy {p} in "
                f"{folder} can be read (the newest {newest})"
            )
        if found is None and recorded.get(p, 0) > 0:
            return (
                f"policy {p} has trained {recorded[p]:,} env steps (summary.json), but {folder} "
                "holds no checkpoint of it"
            )
    return None


def recorded_env_steps(exp_dir: str) -> dict[int, int]:
    """Each policy's env steps as the run's summary.json records them (none from a summary
    that is missing or of another shape)."""
    try:
        policies = read_json(os.path.join(exp_dir, "summary.json"), {}).get("policies") or {}
        return {int(p): int(entry.get("env_steps") or 0) for p, entry in policies.items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def newest_readable_checkpoint(folder: str) -> tuple[Optional[tuple[str, dict]], Optional[str]]:
    """((path, state) of the newest checkpoint of `folder` that reads, or None; why the newest
    file does not read, or None), quietly: the learner names bad files when it resumes."""
    newest = None
    for path in reversed(checkpoint_files(folder)):
        try:
            return (path, read_checkpoint(path, map_location="cpu")), newest
        except CheckpointError as e:
            newest = newest or e.reason
    return None, newest


STARTS_FILE = "starts.json"


def count_start(exp_dir: str, resuming: bool) -> int:
    """This start's number in the run's folder (0 for a new run, 1 for its first resume, ...),
    recorded for the next start. A run from before the file existed had one start."""
    path = os.path.join(exp_dir, "stats", STARTS_FILE)
    start = 0
    if resuming:
        try:
            start = int((read_json(path) or {}).get("starts", 1))
        except (OSError, ValueError, TypeError, AttributeError):  # unreadable: a new number
            start = int(time.time())
    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic_write_json(path, {"starts": start + 1})
    return start


def _size(n: int) -> str:
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB"


def prepare_experiment_dir(cfg: Cfg) -> tuple[str, bool]:
    """Apply --restart_behavior; returns (folder, resuming)."""
    exp_dir = check_experiment_dir(cfg)
    exists = os.path.isfile(os.path.join(exp_dir, "config.json"))
    marker = os.path.join(exp_dir, EXPERIMENT_MARKER)
    if not exists and os.path.isdir(exp_dir) and not os.path.isfile(marker) and os.listdir(exp_dir):
        # someone else's files: marking the folder as ours would let a later
        # --restart_behavior=overwrite delete them
        raise ConfigError(
            f"--experiment={cfg.experiment!r}: {exp_dir} already holds files this trainer did "
            "not write; give another --experiment, or empty the folder first"
        )
    if exists and cfg.restart_behavior == "overwrite":
        shutil.rmtree(exp_dir)
        exists = False
    elif exists and cfg.restart_behavior == "restart":
        backup = f"{exp_dir}_old_{time.strftime('%Y%m%d_%H%M%S')}"
        os.replace(exp_dir, backup)
        log(f"--restart_behavior=restart: previous run moved to {backup}")
        exists = False
    try:
        os.makedirs(exp_dir, exist_ok=True)
    except OSError as e:  # e.g. a path the permissions allow on paper (root, /proc)
        raise ConfigError(
            f"--train_dir={cfg.train_dir!r}: cannot make {exp_dir} ({e.strerror or e}); "
            "give a folder you can write to"
        ) from None
    if not os.path.isfile(marker):
        with open(marker, "w") as f:
            f.write("an rl_pbt experiment folder: --restart_behavior=overwrite may delete it\n")
    return exp_dir, exists


class Runner:
    def __init__(self, cfg: Cfg):
        self.cfg = cfg
        # what the env is, before anything is written: a config error leaves the folder alone
        try:
            probe = as_multiagent(
                make_env(cfg.env, cfg, {"worker_index": -1, "vector_index": 0, "env_id": 0})
            )
        except (ConfigError, EnvContractError):
            raise
        except Exception as e:  # a missing dependency, a space the trainer cannot take, ...
            raise ConfigError(
                f"--env={cfg.env}: the env cannot be made: {one_line_error(e)}"
            ) from e
        self.obs_space, self.action_space = probe.observation_space, probe.action_space
        self.num_agents = int(probe.num_agents)
        target = reward_shaping_target(probe)
        self.default_shaping = target.get_default_reward_shaping() if target else None
        self.scripted_players: dict = {}  # the one vs_scripted plays, for the children
        self.scripted_seat = self._scripted_opponent(probe)
        probe.close()
        self.policy_values = None  # per-policy starting values (--policy_values)
        if cfg.policy_values:
            self.policy_values = load_policy_values(cfg.policy_values, cfg.num_policies)
            check_shaping_keys(self.policy_values, flatten_shaping(self.default_shaping), cfg.env)
        self.use_snapshots = cfg.selfplay_snapshot_prob > 0 and self.num_agents > 1
        if cfg.selfplay_snapshot_prob > 0 and not self.use_snapshots:  # one agent: refused
            # (parse_cfg has made sure vs_snapshots comes with --selfplay_snapshot_prob)
            if cfg.with_pbt and cfg.pbt_target_objective == "vs_snapshots":
                raise ConfigError(
                    "--pbt_target_objective=vs_snapshots ranks on games against frozen "
                    f"snapshots: it needs a multi-agent env, and --env={cfg.env} has one agent"
                )
            raise ConfigError(
                f"--selfplay_snapshot_prob={cfg.selfplay_snapshot_prob:g}: frozen snapshots are "
                f"opponents in self-play, and --env={cfg.env} has one agent; leave the flag out"
            )
        if self.num_agents == 1 and cfg.with_pbt and cfg.pbt_target_objective == "elo":
            raise ConfigError(
                "--pbt_target_objective=elo ranks on ratings from games between members: it "
                f"needs a multi-agent env, and --env={cfg.env} has one agent"
            )
        if self.num_agents == 1 and cfg.matchmaking != "uniform":
            raise ConfigError(
                f"--matchmaking={cfg.matchmaking} draws opponents in self-play, and "
                f"--env={cfg.env} has one agent; leave the flag out"
            )

        check_experiment_dir(cfg)
        # devices and the start method, before anything is written: a config error (say
        # --device=gpu on a machine without one) leaves the folder alone. No torch.cuda call
        # here: CUDA is first touched in the children.
        num_gpus = visible_gpu_count(cfg.device, cfg.num_gpus)
        self.device_of = device_map(cfg.num_policies, num_gpus, cfg.device)
        self.uses_cuda = uses_cuda(self.device_of)
        self.start_method = resolve_start_method(cfg.mp_start_method, self.uses_cuda)
        self.registry = registry_snapshot([cfg.env])
        if not cfg.serial_mode and self.start_method != "fork":
            check_picklable_registry(self.registry, cfg.env, self.start_method)
        # the run's seed: --seed, else a fresh one (logged); every process derives its own
        self.run_seed = cfg.seed if cfg.seed is not None else fresh_seed()
        seed_everything(self.run_seed)
        self.num_policies = cfg.num_policies

        # the network, the trajectory buffers and the PBT inputs, still before anything is
        # written: a model that does not fit the env, buffers too large for the memory or a
        # search space that does not fit the env stop here with one line
        template = self._template_model()
        self.n_params = sum(p.numel() for p in template.parameters())
        self.inference_mode, self.inference_why = resolve_inference(
            cfg.inference,
            self.uses_cuda,
            any(template.obs_spec.is_image(k) for k in template.obs_spec.keys),
            self.n_params,
        )
        splits_problem = worker_splits_problem(cfg, self.inference_mode)
        if splits_problem:
            raise ConfigError(f"{splits_problem} ({self.inference_why})")
        self.buffers = self._allocate_buffers(template)
        self._replayer = self._check_pbt_inputs()

        # a second run on the same folder stops here, before anything on disk is touched: the
        # lock is taken now and held until the end of run() (released if the start fails)
        self.run_lock = RunLock(cfg.train_dir, cfg.experiment)
        self.run_lock.acquire()
        try:
            self._open_experiment(cfg, template)
        except BaseException:
            self.run_lock.release()
            raise

    def _open_experiment(self, cfg: Cfg, template) -> None:
        """The experiment folder (new, or resumed), the shared memory, queues, statistics, PBT
        and self-play state of the run; its config.json last."""
        saved = _saved_config(experiment_dir(cfg))  # before prepare may move it aside
        self.exp_dir, self.resuming = prepare_experiment_dir(cfg)
        self.resume_hparams: dict[str, float] = {}
        # a PBT run resumed without PBT: each member keeps the values PBT gave it, so the
        # starting values of --policy_values are not laid over them again
        pbt_stopped = self.resuming and bool((saved or {}).get("with_pbt")) and not cfg.with_pbt
        self.policy_values_unused = pbt_stopped and self.policy_values is not None
        if self.policy_values_unused:
            self.policy_values = None
        if self.resuming:
            problem = saved_network_problem(self.exp_dir, template)
            if problem:
                raise ConfigError(problem)
            notes, self.resume_hparams = resume_notes(
                resume_changes(cfg, saved or {}),
                pbt_before=bool((saved or {}).get("with_pbt")),
                pbt_now=bool(cfg.with_pbt),
                replay=bool(cfg.pbt_replay_lineage),
            )
            for note in notes:
                log(f"note: {note}")
        _warm_up_imports(template, self.start_method)
        # the last row: a state copied in from another node group lands there (never in the
        # target's own transfer row, which a copy inside the group may be reading)
        self.incoming_row = self.store_rows() - 1
        self.params = ParamStore.for_model(self.store_rows(), template)
        self.free_queue = make_queue(cfg.serial_mode, max_size_bytes=4_000_000)
        self.pool = SlotPool(self.buffers, self.free_queue)
        self.pool.fill()

        self.report_queue = make_queue(cfg.serial_mode, max_size_bytes=20_000_000)
        # the policies hosted by one learner process share its queue (messages name the policy)
        self.groups = [[p] for p in range(cfg.num_policies)]
        if not cfg.serial_mode:
            self.groups = learner_groups(cfg, self.device_of)
        self.learner_queues: list = [None] * cfg.num_policies
        for group in self.groups:
            q = make_queue(cfg.serial_mode, max_size_bytes=8_000_000)
            for p in group:
                self.learner_queues[p] = q
        self.worker_queues = [make_queue(cfg.serial_mode) for _ in range(cfg.num_workers)]
        self.inference = None  # InferencePlan with --inference=device
        if self.inference_mode == "device":
            io = InferenceIO.allocate(
                cfg.num_workers,
                cfg.num_envs_per_worker * self.num_agents,
                template.obs_spec,
                template.act_spec,
                template.rnn_size,
                len(set(self.device_of.values())),
            )
            self.inference = InferencePlan.for_devices(
                io,
                self.device_of,
                lambda: make_queue(cfg.serial_mode, max_size_bytes=1_000_000),
                fused=cfg.fused_inference,
            )
        names = [f"rollout worker {i}" for i in range(cfg.num_workers)] + [
            f"learner {p}" for p in range(cfg.num_policies)
        ]
        if self.inference is not None:
            names += [f"inference server on {d}" for d in self.inference.devices]
        self.heartbeats = hb.Heartbeats(names)
        self.stop_flag = torch.zeros(1, dtype=torch.int32).share_memory_()

        self.stats = PopulationStats(cfg, self.exp_dir, self.num_policies)
        if self.resuming:
            self.stats.resumed = True
            try:
                before = read_json(os.path.join(self.exp_dir, "summary.json"), None)
            except (OSError, ValueError):  # damaged: this run's own figures only
                before = None
            if isinstance(before, dict):
                self.stats.restore(before)
        self.env_steps = [0] * cfg.num_policies
        self.versions = [0] * cfg.num_policies
        self.pbt = self._make_pbt()
        if self.resuming and self.pbt is not None:
            self.stats.restore_pbt_last(read_events(lineage_path(self.exp_dir)))
        # PBT's objective: each episode's target (or Elo), or only games against snapshots
        target = cfg.pbt_target_objective
        self.pbt_on_episodes = self.pbt is not None and target != "vs_snapshots"
        self.pbt_on_episodes &= self.scripted_seat is None
        self.elo = (
            EloRatings.from_dict(read_json(self._elo_path(), {}))
            if os.path.isfile(self._elo_path())
            else EloRatings()
        )
        cross_play = os.path.join(self.exp_dir, "cross_play.json")
        try:  # a resume goes on with the table (it started anew and overwrote the file)
            saved = read_json(cross_play, {}) if self.resuming else {}
        except (OSError, ValueError):
            saved = {}
        self.cross_play = CrossPlay.from_dict(saved, cfg.num_policies)
        if self.num_agents > 1:
            self.stats.elo = self.elo  # each member's rating joins its logged scalars
        self._elo_saved_at = time.time()
        self._summary_checked_at = time.time()
        self._summary_kept: Optional[list[int]] = None  # the checkpoints' steps it was written with
        self._summary_failed = False
        if self.pbt is not None and target == "elo":  # the best member is PBT's best
            self.stats.rank_by("elo", self._ratings)
        elif self.pbt is not None and (target == "vs_snapshots" or target.startswith("vs_scr")):
            self.stats.rank_by(target.split(":")[0], self.pbt.ranked_objectives)
        self._ratings_sent: Optional[dict] = None
        self._ratings_sent_at = 0.0
        self.snapshots = SnapshotPool(cfg.selfplay_snapshot_pool_size)
        self.snapshot_rows: dict[str, int] = {}  # published snapshots (known to workers)
        self.snapshot_row_of: dict[str, int] = {}  # every snapshot in the pool -> its row
        self.last_snapshot_steps = [0] * cfg.num_policies
        self.processes: list = []
        self._ctx = None  # the multiprocessing context children start from
        self._fork_server_lost = False  # said once: the fork server ended, children run on
        self.incarnation = [0] * cfg.num_workers  # restarts of each rollout worker
        self.worker_deaths: dict[int, list[float]] = {}  # monotonic times, within the window
        # a component went silent soon after a worker death, or a learner or server died by a
        # signal: rl-pbt-train then restarts the whole run from its checkpoints
        self.jammed = False
        self.silent_rows: set[int] = set()  # heartbeat rows found not answering
        self.worker_restarts = 0
        self._loop_alive = time.monotonic()  # the watchdog's view of the main loop
        self._resumed_at = -float("inf")  # when the watchdog last woke from a suspension
        self.proc_hb: dict[str, int] = {}  # process name -> its (first) heartbeat row
        self.copying: dict[int, int] = {}  # PBT copies sent and not yet landed: target -> source
        # after a copy: the version of the target's copied weights; its episodes that began on
        # older weights do not count for PBT
        self.copied_version: dict[int, int] = {}
        # per policy: learning values (ApplyPBT) sent and not yet confirmed ("pbt_applied")
        self.pbt_unapplied: collections.Counter = collections.Counter()
        self.learner_proc_of: dict[int, str] = {}  # policy -> the process hosting its learner
        # per replacement: seconds from the decision to the weights copied, to the first
        # trajectory from the copied weights, to the first update on it
        self.copy_latencies: list[tuple[float, float, float]] = []
        self.start_time = time.time()
        # --train_for_seconds counts from the command's first start, across automatic restarts
        self.budget_start = _started_at(os.environ.pop(STARTED_AT_ENV, None), self.start_time)
        if self.budget_start < self.start_time:
            log(
                f"--train_for_seconds={cfg.train_for_seconds} counts from the command's start, "
                f"{self.start_time - self.budget_start:.0f} s ago"
            )
        self.interrupted = False  # stopped by Ctrl-C or SIGTERM (the footer says so)
        self.stop_signals = _StopSignals()  # a SIGINT or SIGTERM noted, for the loop to take
        # policies a checkpoint of which could not be written: the run ends with status 1
        self.save_failed: set[int] = set()
        self.side_state_failed = False  # at the last save of pbt/state.json, Elo, summary.json
        # a node group of a population on several machines: its PBT is decided outside
        self.control: Optional[GroupControl] = None
        # last: a run stopped by an error above leaves the config of the run it resumes alone
        save_cfg(cfg, os.path.join(self.exp_dir, "config.json"))
        # every process's seed also takes this start's number: a resume draws new episodes,
        # openings and samples instead of replaying its first start's (and repeats them too)
        self.run_start = count_start(self.exp_dir, self.resuming)
        if self.run_start:  # the main process too (it acts in serial mode)
            seed_everything(derive_seed(self.run_seed, "main", start=self.run_start))

    def _template_model(self):
        self._check_model_memory()
        try:
            return self.make_model()
        except ConfigError:
            raise
        except (ValueError, RuntimeError, TypeError, NotImplementedError) as e:
            raise ConfigError(
                f"--env={self.cfg.env}: no model for its observations {_flat(self.obs_space)} "
                f"and actions {_flat(self.action_space)} with these flags: {one_line_error(e)}"
            ) from e

    def store_rows(self) -> int:
        """Rows of the shared weight store: the members, the snapshot pool, one for a state
        copied in from another node group."""
        pool = self.cfg.selfplay_snapshot_pool_size if self.use_snapshots else 0
        return self.cfg.num_policies + pool + 1

    def _check_model_memory(self) -> None:
        """The network and the shared store of its copies are sized before anything is built
        (on torch's meta device, which holds no data): more than the machine's memory stops
        the start with one line (a layer of 10^9 units swapped for minutes; a pool of 10^8
        snapshots failed deep inside torch)."""
        memory = physical_memory()
        try:
            with torch.device("meta"):
                probe = self.make_model()
            weights = sum(p.numel() for p in probe.parameters())
            words = weights + store_words(self.store_rows(), probe)
        except Exception:  # noqa: BLE001 - a model that cannot be sized so: built as usual
            return
        if memory is None or 4 * words <= memory:
            return
        cfg = self.cfg
        pool = f", --selfplay_snapshot_pool_size={cfg.selfplay_snapshot_pool_size}"
        raise ConfigError(
            f"the network ({weights:,} parameters) and the shared store of its "
            f"{self.store_rows():,} copies (--num_policies={cfg.num_policies}"
            f"{pool if self.use_snapshots else ''}, with Adam's moments for PBT copies) take "
            f"{4 * words / 2**30:,.1f} GiB, more than this machine's {memory / 2**30:,.1f} GiB; "
            "lower the model's sizes (--encoder_mlp_layers, --rnn_size, ...) or those counts"
        )

    def _allocate_buffers(self, template) -> TrajectoryBuffers:
        """The trajectory slots in shared memory, sized first: on a machine that overcommits
        memory an allocation larger than what is free can succeed and fail later (a process
        killed, a bus error on a full /dev/shm) instead of at once."""
        cfg = self.cfg
        traj_per_iter = cfg.batch_size * cfg.num_batches_per_epoch // cfg.rollout
        actors = cfg.num_workers * cfg.num_envs_per_worker * self.num_agents
        slots = num_slots_needed(actors, cfg.num_policies, traj_per_iter)
        layout = TrajectoryBuffers.layout(slots, cfg.rollout, template.obs_spec,
                                          template.act_spec, template.rnn_size,
                                          recurrence(cfg))  # fmt: skip
        what = (
            f"the trajectory buffers ({slots:,} slots of --rollout={cfg.rollout} steps, for "
            f"{actors:,} actors and --batch_size={cfg.batch_size}) do not fit in memory"
        )
        advice = (
            "lower --num_workers, --num_envs_per_worker, --rollout or --batch_size, or the "
            "model's sizes"
        )
        need = TrajectoryBuffers.nbytes(layout)
        room, where = shared_memory_room()
        if room is not None and need > room:
            if where.startswith("free in"):  # a container's /dev/shm is often 64 MiB
                advice += "; or give /dev/shm more room (docker run --shm-size=8g)"
            raise ConfigError(f"{what} ({_size(need)}, {_size(room)} {where}); {advice}")
        try:
            return TrajectoryBuffers.allocate(layout)
        except (MemoryError, RuntimeError) as e:
            raise ConfigError(f"{what} ({one_line_error(e)}); {advice}") from e

    def _check_pbt_inputs(self):
        """The lineage to replay (returned) or the search space, checked against the env."""
        cfg = self.cfg
        try:
            if cfg.pbt_replay_lineage:
                from rl_pbt.pbt.replay import ScheduleReplayer

                return ScheduleReplayer(
                    cfg.pbt_replay_lineage,
                    cfg.pbt_replay_policy,
                    default_hparams(cfg),
                    self.default_shaping,
                )
            if cfg.with_pbt:
                from rl_pbt.pbt.manager import search_space_of

                try:
                    search_space_of(cfg, default_hparams(cfg), self.default_shaping)
                except ValueError as e:  # an entry the env does not fit: name the file
                    where = f"--pbt_search_space={cfg.pbt_search_space!r}: "
                    text = str(e)
                    if cfg.pbt_search_space and not text.startswith("--pbt_search_space"):
                        text = where + text
                    raise ConfigError(text) from None
        except ValueError as e:
            raise ConfigError(str(e)) from None
        return None

    # --- factories --------------------------------------------------------------------------
    def make_model(self):
        return make_actor_critic(self.obs_space, self.action_space, self.cfg)

    def spec(self) -> RunSpec:
        """What every child needs, picklable (fork, forkserver and spawn alike)."""
        return RunSpec(
            cfg=self.cfg,
            exp_dir=self.exp_dir,
            resuming=self.resuming,
            resume_hparams=self.resume_hparams,
            run_seed=self.run_seed,
            run_start=self.run_start,
            obs_space=self.obs_space,
            action_space=self.action_space,
            num_agents=self.num_agents,
            device_of=dict(self.device_of),
            buffers=self.buffers,
            params=self.params,
            pool=self.pool,
            learner_queues=self.learner_queues,
            worker_queues=self.worker_queues,
            report_queue=self.report_queue,
            heartbeats=self.heartbeats,
            stop_flag=self.stop_flag,
            registry=self.registry,
            initial_shaping={p: self._policy_shaping(p) for p in range(self.num_policies)},
            use_snapshots=self.use_snapshots,
            inference=self.inference,
            scripted=self.scripted_players,
            scripted_seat=self.scripted_seat,
        )

    def _make_pbt(self):
        if self._replayer is not None:
            return self._replayer
        if not self.cfg.with_pbt:
            return None
        from rl_pbt.pbt.manager import PBTManager, PBTStateError

        try:
            return PBTManager(
                self.cfg,
                self.num_policies,
                default_hparams(self.cfg),
                self.default_shaping,
                self.exp_dir,
                seed=derive_seed(self.run_seed, "pbt"),
                initial_values=self.policy_values,
            )
        except (PBTStateError, ValueError) as e:  # one line and exit status 2, like a bad flag
            raise ConfigError(str(e)) from None

    def _elo_path(self) -> str:
        return os.path.join(self.exp_dir, "elo.json")

    # --- start ------------------------------------------------------------------------------
    def _initial_messages(self) -> None:
        """Current learning values (PBT state on resume, --policy_values) to every learner;
        the workers were built knowing each policy's shaping (`_policy_shaping`)."""
        for p in range(self.num_policies):
            if self.pbt is not None:
                hparams = dict(self.pbt.hparams[p])
            else:
                hparams = split_values(self.policy_values[p])[0] if self.policy_values else {}
            if hparams:
                self.learner_queues[p].put(ApplyPBT(p, None, hparams))
                self.pbt_unapplied[p] += 1

    def _policy_shaping(self, p: int) -> Optional[dict]:
        """Policy p's reward shaping now: PBT's (restored on resume), else the defaults with
        --policy_values' shaping leaves for p on top; on the resume without PBT of a run that
        had it, the shaping PBT had given p stands in for the defaults (its members keep the
        values they have, as the resume note says)."""
        if self.pbt is not None:
            return self.pbt.shaping[p]
        shaping_flat = split_values(self.policy_values[p])[1] if self.policy_values else {}
        base = None
        if self.resuming:
            base = saved_member_shaping(self.exp_dir, p, self.default_shaping)
        base = base or self.default_shaping
        if not shaping_flat:
            return base
        return overlay_shaping(base, shaping_flat, self.default_shaping)

    def run(self) -> int:
        # the stop sets its own handlers: a caller's (a script training twice) come back after
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        # from the start line on, a signal stops the run as it would later: noted, and taken
        # between two turns of the loop (the start-up's children are started first)
        self.stop_signals.install()
        if threading.current_thread() is not threading.main_thread() and self.control is None:
            log(
                "train() runs outside the main thread: Ctrl-C and SIGTERM do not reach it, and "
                "it stops at its budget (--train_for_env_steps / --train_for_seconds)"
            )
        try:
            return self._run()
        finally:
            for sig, handler in previous.items():
                if WHOLE_PROCESS:
                    _set_signal(sig, signal.SIG_IGN)
                elif handler is not None:
                    _set_signal(sig, handler)

    def _run(self) -> int:
        cfg = self.cfg
        log(
            f"experiment {self.exp_dir} ({'resuming' if self.resuming else 'new'}); "
            f"{cfg.num_policies} policies on {describe(self.device_of)}; {self.n_params:,} "
            f"parameters per policy; {self.buffers.num_slots} trajectory slots"
        )
        seed_note = "" if cfg.seed is not None else f" (random; --seed={self.run_seed} repeats it)"
        if self.run_start:
            seed_note += f", start {self.run_start + 1} of this run: streams of its own"
        mode = "serial mode" if cfg.serial_mode else f"children start by {self.start_method}"
        why = f" ({self.inference_why})" if self.inference_why and self.uses_cuda else ""
        mode += f"; {self.inference_mode} inference{why}"
        log(f"seed {self.run_seed}{seed_note}; {mode}")
        if cfg.with_pbt and self.default_shaping is not None:
            log(f"PBT reward shaping defaults: {self.default_shaping}")
        note = action_box_note(self.action_space)
        if note:
            log(f"WARNING: {note}")
        if self.policy_values_unused:
            log(f"{cfg.policy_values} not used: each member keeps the values PBT gave it")
        if self.policy_values is not None:
            values = describe_values(self.policy_values)
            if not cfg.with_pbt:
                log(f"per-policy values from {cfg.policy_values}: {values}")
            elif self.pbt is not None and self.pbt.restored:
                log(f"{cfg.policy_values} not used: the PBT state of the run is restored")
            else:
                drawn = ""
                if cfg.pbt_init_random:
                    who = "every member" if cfg.pbt_mutate_reference_policy else "all but p0"
                    drawn = f"; then {who} drew the tuned values (--pbt_init_random)"
                log(f"per-policy starting values from {cfg.policy_values}: {values}{drawn}")
        if cfg.with_pbt and self.pbt is not None:  # not a lineage replay
            tuned = ", ".join(self.pbt.space) or "nothing"
            log(f"PBT search space: {tuned}")
            if self.pbt.rebuilt_note:
                log(f"WARNING: {self.pbt.rebuilt_note}")
            for note in self.pbt.space_notes:
                log(f"PBT search space: {note}")
            first = max(cfg.pbt_start_mutation, cfg.pbt_period_env_steps)
            if first >= cfg.train_for_env_steps:
                log(
                    f"WARNING: --with_pbt: no PBT step fits in --train_for_env_steps="
                    f"{cfg.train_for_env_steps}: the first comes once every policy is past "
                    f"--pbt_start_mutation={cfg.pbt_start_mutation} and has trained "
                    f"--pbt_period_env_steps={cfg.pbt_period_env_steps} (set them lower)"
                )
            every = cfg.selfplay_snapshot_every_env_steps
            if cfg.pbt_target_objective == "vs_snapshots" and every >= cfg.train_for_env_steps:
                log(
                    "WARNING: --pbt_target_objective=vs_snapshots ranks members on games "
                    "against frozen snapshots, and none is taken before the end: "
                    f"--selfplay_snapshot_every_env_steps={every} is not below "
                    f"--train_for_env_steps={cfg.train_for_env_steps} (set it lower)"
                )
        self.run_lock.acquire()  # held since __init__ (again after a release)
        try:
            status = self._run_serial() if cfg.serial_mode else self._run_parallel()
        finally:
            _try_write("the logs", self.stats.close)
            self.run_lock.release()
            if self.control is not None:
                self.control.fail_all("the node group's run ended")
        if status != 0 and self.jammed and not self.interrupted:
            argv = jam_restart_argv(cfg) if not self._time_spent() else None
            if argv is not None:
                restart_whole_run(argv, self.budget_start)
        if self.control is not None:  # a node group: the population's driver says what's next
            return status
        text = end_of_run_text(
            self.exp_dir,
            cfg,
            has_pbt=bool(cfg.with_pbt),  # a replay has a schedule, but no lineage of its own
            selfplay=self.num_agents > 1,
            best_policy=self.stats.best_policy(),
            own_env=self._own_env(),
            status=status,
            # "stopped with what it learned saved" only where every save at the stop was
            interrupted=self.interrupted and not self.save_failed and not self.side_state_failed,
            trained=status == 0 or any(self._kept_steps()),
        )
        print(text, flush=True)
        return status

    def _own_env(self) -> bool:
        """The env was registered by the user's code (not a built-in, not one of gymnasium's
        own ids): a command started anew would not know it."""
        return not known_to_new_processes(self.cfg.env)

    def _scripted_opponent(self, probe) -> Optional[str]:
        """The seat id of --pbt_target_objective=vs_scripted:NAME's player (None without one),
        checked here: a multi-agent env, a player the env registers, parameters it takes."""
        target = self.cfg.pbt_target_objective
        if not target.startswith("vs_scripted:"):
            return None
        name = target.partition(":")[2]
        if self.num_agents != 2:
            raise ConfigError(
                f"--pbt_target_objective={target}: games against a scripted player need a "
                f"2-agent env (one member against the player), and --env={self.cfg.env} has "
                f"{self.num_agents} agent(s)"
            )
        try:
            make_scripted(self.cfg.env, name, probe)
        except ValueError as e:
            raise ConfigError(f"--pbt_target_objective={target}: {e}") from None
        player = name.partition(":")[0]
        self.scripted_players = {player: scripted_snapshot(self.cfg.env).get(player)}
        if player == "random":
            self.scripted_players = {}
        try:  # children started by spawn or forkserver rebuild it from a pickle
            pickle.dumps(self.scripted_players)
        except Exception as e:
            raise ConfigError(
                f"--pbt_target_objective={target}: the scripted player's factory cannot be "
                f"pickled ({e}); register a module-level function"
            ) from None
        return scripted_seat(name)

    def _worker_factory(self, worker_idx: int, should_stop, blocking: bool = True):
        return build_worker(self.spec(), worker_idx, should_stop, blocking=blocking)

    def _learner_factory(self, policy_id: int) -> Learner:
        return build_learner(self.spec(), policy_id)

    def serve_in_process(self, learners: dict[int, Learner]) -> None:
        """Serial mode with --inference=device: requests are served on the spot, here, with
        the weights `learners` (started, so published) share with the servers."""
        if self.inference is None:
            return
        plan = self.inference
        if plan.weight_queues is None:
            plan.weight_queues = [LocalQueue() for _ in plan.devices]
        for p, learner in learners.items():
            if learner.device_weights is None:
                learner.share_weights(plan.board, plan.weights_queue_of(p))
                learner.device_weights.publish(learner.model, learner.version)
        for i in range(len(self.inference.devices)):
            server = InferenceServer(self.inference, i, self.make_model)
            self.inference.request_queues[i] = DirectServer(server)

    def _run_serial(self) -> int:
        cfg = self.cfg
        learners = {p: self._learner_factory(p) for p in range(self.num_policies)}
        host = LearnerHost(
            learners, _MergedQueue(self.learner_queues), self.learner_queues, self.report_queue
        )
        host.start(self.resuming, self.resume_hparams)
        self._initial_messages()
        self.serve_in_process(learners)
        workers: list = []
        status = 0
        turn_ended = False  # stopped at the end of a loop turn: the state is whole
        stop = _TurnEndStop()
        try:
            with stop:
                # a signal noted while the learners started: the first turn is the last
                if self.stop_signals.requested is not None:
                    log(f"{self.stop_signals.name()}: stopping at the end of the first turn")
                    stop.requested = True
                for i in range(cfg.num_workers):  # their envs start here: an env may fail already
                    workers.append(self._worker_factory(i, lambda: False, blocking=False))
                if self.resuming:
                    self._restore_serial_state(learners, workers)
                while True:
                    for w, worker in enumerate(workers):
                        for msg in drain(self.worker_queues[w]):
                            worker.handle(msg)
                        worker.step()
                    while host.poll(timeout=0.0):
                        pass
                    if self._tick() or stop.requested:
                        turn_ended = True
                        break
        except KeyboardInterrupt:
            log("interrupted: saving checkpoints")
            self.interrupted = True
            status = 1
        except EnvContractError as e:  # the env's fault: one line naming it
            log(f"ERROR: {e}")
            status = 1
        except CheckpointWriteError:  # a full disk: the host's report names it (final tick)
            status = 1
        except Exception:  # stop as a parallel run does: say why, save what is sound
            log(f"ERROR:\n{traceback.format_exc()}")
            status = 1
        if stop.requested and status == 0:
            status = 1  # stopped by a signal, as a parallel run reports it
            self.interrupted = True
        exact = turn_ended and self._settle_turn(host, workers)
        try:
            host.handle(Stop(save=True))
        except CheckpointWriteError:  # the older checkpoints are kept; named at the final tick
            status = 1
            exact = False
        self._save_serial_state(learners, workers, exact)
        for worker in workers:
            worker.close()
        self._tick(final=True)
        return status

    def _settle_turn(self, host: LearnerHost, workers: list) -> bool:
        """At the end of the last turn: the workers take the messages the last tick sent (as
        they would first thing in the next turn). True when nothing else is in flight, so
        that the state saved now is the whole state; a PBT step still on its way to a
        learner is applied, and the state is then not saved."""
        for w, worker in enumerate(workers):
            for msg in drain(self.worker_queues[w]):
                worker.handle(msg)
        in_flight: list = []
        for _ in range(8):  # a source's export sends the copy on to the target's queue
            arrived = [msg for q in self.learner_queues for msg in drain(q)]
            if not arrived:
                break
            for msg in arrived:
                host.handle(msg)
            in_flight += arrived
        if in_flight:
            log("a PBT step was under way at the stop: the next run resumes from the checkpoints")
        return not in_flight

    def _save_serial_state(self, learners: dict, workers: list, exact: bool) -> None:
        """Serial mode: write serial_state.pt for an exact resume, or remove an old one."""
        blockers = [why for w in workers for why in w.resume_blockers()] if exact else []
        if not exact or blockers or len(workers) != self.cfg.num_workers:
            serial_state.remove(self.exp_dir)
            if blockers:
                log(f"no exact resume for this run: {blockers[0]}")
            return
        try:
            # after a copy, the episodes that began on the replaced weights must still not
            # count for PBT once they end after the resume
            own = {"copied_version": dict(self.copied_version)}
            serial_state.save(
                self.exp_dir, self.cfg, self.buffers, self.free_queue, learners, workers, own
            )
        except (CheckpointWriteError, TypeError) as e:
            serial_state.remove(self.exp_dir)
            log(f"no exact resume for this run: {e}")

    def _restore_serial_state(self, learners: dict, workers: list) -> None:
        state, why = serial_state.load(self.exp_dir, self.cfg, self.buffers, learners)
        if state is None:
            if why:
                log(f"{why}: resuming from the checkpoints, with new episodes")
            return
        try:  # the envs first: nothing else is touched before they are all back
            for worker, saved in zip(workers, state["workers"]):
                worker.restore_envs(saved)
        except ValueError as e:
            log(f"{serial_state.FILE_NAME} not used: {e}; resuming from the checkpoints, with "
                "new episodes")  # fmt: skip
            for i, worker in enumerate(workers):  # new workers, new envs, their slots back
                worker.close()
                self.pool.reclaim(i)
                workers[i] = self._worker_factory(i, lambda: False, blocking=False)
            return
        serial_state.restore(state, self.buffers, self.free_queue, learners, workers)
        own = state.get("runner") or {}  # a state saved before the runner had a part: none
        self.copied_version = {int(p): int(v) for p, v in own.get("copied_version", {}).items()}
        log(f"resumed exactly where the run stopped ({serial_state.FILE_NAME}: envs replayed)")

    def _start_processes(self, ctx) -> None:
        if self.inference is not None:
            # a multiprocessing queue pickles with torch's reducers: a CUDA buffer travels as
            # an IPC handle to the same memory, a CPU one as shared memory
            self.inference.weight_queues = [ctx.Queue() for _ in self.inference.devices]
        spec = self.spec()
        for group in self.groups:
            name = f"learner_{group[0]}"
            if len(group) > 1:
                name = f"learners_{self.device_of[group[0]]}"
            self.learner_proc_of.update({p: name for p in group})
            self._start(ctx, learner_process_main, name, (spec, group), spec.learner_hb(group[0]))
        self._initial_messages()
        if self.inference is not None:
            for i, device in enumerate(self.inference.devices):
                name = f"inference_{device}"
                self._start(ctx, inference_process_main, name, (spec, i), spec.inference_hb(i))
        for w in range(self.cfg.num_workers):
            self._start(ctx, worker_process_main, f"rollout_worker_{w}", (spec, w), w)
        self._write_pids()

    def _write_pids(self) -> None:
        """pids.json: the process of each component (to watch or profile one, or kill it)."""
        pids = {"runner": os.getpid(), **{p.name: p.pid for p in self.processes}}
        atomic_write_json(os.path.join(self.exp_dir, "pids.json"), pids)

    def _start(self, ctx, target, name: str, args: tuple, hb_idx: int) -> None:
        proc = ctx.Process(target=target, name=name, daemon=True, args=args)
        proc.start()
        self.processes.append(proc)
        self.proc_hb[name] = hb_idx

    def _mp_context(self):
        ctx = multiprocessing.get_context(self.start_method)
        if self.start_method == "forkserver":
            # modules imported once by the server, so children start fast and share their pages
            # (not __main__: a user script that touches CUDA on import would poison the server)
            ctx.set_forkserver_preload(["rl_pbt.runtime.preload"])
        return ctx

    def _run_parallel(self) -> int:
        self._ctx = self._mp_context()
        status = 0
        self._loop_done = threading.Event()
        try:
            self._start_children()
            self._loop_alive = time.monotonic()
            threading.Thread(target=self._watch_loop, name="runner-watchdog", daemon=True).start()
            while not self._tick():
                now = time.monotonic()
                if now - self._loop_alive > SUSPENDED_AFTER_S:  # see _watch_loop
                    self._resumed_at = now
                self._loop_alive = now
                self._take_stop_request()
                self._check_health()
        except ComponentFailure as e:
            if self.stop_signals.requested is not None:  # most likely ended by the same signal
                log(f"{self.stop_signals.name()}: stopping ({e})")
                self.interrupted = True
            else:
                log(f"ERROR: {e}")
            status = 1
        except KeyboardInterrupt:
            log("interrupted: saving checkpoints")
            self.interrupted = True
            status = 1
        except Exception:  # a bug in the main process: still stop the others and save
            log(f"ERROR in the main process:\n{traceback.format_exc()}")
            status = 1
        finally:
            self._shutdown()
            self._loop_done.set()
        if self.save_failed:  # a checkpoint could not be written, perhaps at the stop
            status = status or 1
        return status

    def _start_children(self) -> None:
        """Start the children. A signal to the process group may end one being started (the
        fork server, before it set its handlers): the stop it asked for then goes on."""
        try:
            self._start_processes(self._ctx)
        except Exception as e:
            if self.stop_signals.requested is None:
                raise
            log(f"not every process started after {self.stop_signals.name()} ({one_line_error(e)})")
            self._take_stop_request()

    def _take_stop_request(self) -> None:
        """A SIGINT or SIGTERM noted since the last turn stops the run here, between two turns
        of the loop (as Ctrl-C: checkpoints, PBT state, Elo and summary saved)."""
        if self.stop_signals.requested is not None:
            log(f"{self.stop_signals.name()}: stopping")
            raise KeyboardInterrupt

    # --- health -----------------------------------------------------------------------------
    def _check_health(self) -> None:
        stopping = self.stop_flag[0] or self.stop_signals.requested is not None
        for i, proc in enumerate(self.processes):
            if proc.exitcode == FORK_SERVER_LOST and _running(proc):
                if not (self._fork_server_lost or stopping):  # (a group SIGTERM ends it too)
                    log(
                        "the fork server ended (its children run on); the processes are "
                        "watched by their pids from here on"
                    )
                self._fork_server_lost = True
                continue
            if proc.exitcode is not None and not stopping:
                idx = self.proc_hb[proc.name]
                what = (
                    f"{self.heartbeats.names[idx]} died (exit code {proc.exitcode}) while "
                    f"{self.heartbeats.describe(idx)}"
                )
                if proc.exitcode == 0 and not proc.name.startswith("rollout_worker_"):
                    # a learner or inference process ends by itself only on a SIGINT or
                    # SIGTERM sent to it (its learners saved first): the run stops as on that
                    # signal, and is not restarted
                    log(f"{what}: it was stopped by a signal; stopping the run")
                    raise KeyboardInterrupt
                if proc.exitcode == 1:
                    # a Python exception: its report (the reason) is on its way; a bug that a
                    # restart would only repeat, so the run stops with it
                    self._consume_reports(timeout=1.0)
                    raise ComponentFailure(what)
                if proc.name.startswith("rollout_worker_"):
                    self._restart_worker(i, idx, what)
                    continue
                # a learner or inference server killed by a signal: the others save, and the
                # whole run restarts from the checkpoints where --restart_on_jam allows it
                self.jammed = True
                raise ComponentFailure(what)
        stale = self.heartbeats.stale(self.cfg.heartbeat_timeout)
        if stale and time.monotonic() - self._resumed_at < self.cfg.heartbeat_timeout:
            stale = []  # suspended with the rest (Ctrl-Z, a batch system): they beat again
        if stale:
            idx, silent = stale[0]
            self.silent_rows = {i for i, _ in stale}
            deaths = [t for times in self.worker_deaths.values() for t in times]
            if deaths and time.monotonic() - max(deaths) < JAM_AFTER_DEATH_S:
                self.jammed = True  # most likely on a queue the dead worker left locked
            raise ComponentFailure(
                f"{self.heartbeats.names[idx]} stopped answering "
                f"{silent:.0f} s ago while {self.heartbeats.describe(idx)}"
            )

    def _watch_loop(self) -> None:
        """The runner's own heartbeat: if its loop stops turning for --heartbeat_timeout (a
        shared queue left locked by a process killed inside it can block it for good), stop
        the children (learners save on the stop flag when they can) and exit, not hang.
        A wake far later than asked means the process was suspended (SIGSTOP, Ctrl-Z): the
        loop and the children's heartbeats get --heartbeat_timeout from then."""
        woke = time.monotonic()
        while not self._loop_done.wait(1.0):
            now = time.monotonic()
            slept, woke = now - woke, now
            if slept > SUSPENDED_AFTER_S:
                self._loop_alive = self._resumed_at = now
                log(f"the run was suspended for {slept:.0f} s; going on")
                continue
            stuck = now - self._loop_alive
            # stopping takes its own time (saving, joining): the loop has stopped turning then
            limit = self.cfg.heartbeat_timeout + (90 if self.stop_flag[0] else 0)
            if stuck < limit:
                continue
            log(
                f"ERROR: the runner's loop has not moved for {stuck:.0f} s (a shared queue "
                "left locked by a process killed inside it?); stopping: the learners save "
                "what they can, then every process ends"
            )
            self.stop_flag[0] = STOP_NOW  # no Stop message can follow: save at once
            # the learners' saves are what matters: go on once they have all ended
            savers = [p for p in self.processes if _is_learner(p.name)]
            deadline = time.monotonic() + STOP_GRACE_S
            while any(_running(p) for p in savers) and time.monotonic() < deadline:
                time.sleep(0.2)
            for proc in self.processes:
                _send(proc, signal.SIGKILL)
            asked = self.stop_signals.requested is not None  # a stop asked for: no restart
            argv = jam_restart_argv(self.cfg) if not (self._time_spent() or asked) else None
            if argv is not None:
                restart_whole_run(argv, self.budget_start)
            os._exit(1)

    def _restart_worker(self, i: int, w: int, what: str) -> None:
        """Rollout worker w died without a word (a signal, a crash in native code): give its
        slots back and start it again with fresh envs; the run goes on."""
        now = time.monotonic()
        deaths = [t for t in self.worker_deaths.get(w, []) if now - t < RESTART_WINDOW_S]
        deaths.append(now)
        self.worker_deaths[w] = deaths
        if len(deaths) >= WORKER_DEATHS_ALLOWED:
            raise ComponentFailure(
                f"{what}; it died {len(deaths)} times within {RESTART_WINDOW_S / 60:.0f} "
                "minutes, so the run stops"
            )
        reclaimed = self.pool.reclaim(w)
        drain(self.worker_queues[w])  # what was meant for the dead one; the new one is told anew
        self.heartbeats.beat(w, hb.STARTING, w)
        self.incarnation[w] += 1
        self.worker_restarts += 1
        dead = self.processes[i]
        name = dead.name
        dead.join(timeout=1.0)
        dead.close()  # its sentinel pipe and the rest go now, not at the end of the run
        proc = self._ctx.Process(
            target=worker_process_main,
            name=name,
            daemon=True,
            args=(self.spec(), w, self.incarnation[w]),
        )
        proc.start()
        self.processes[i] = proc
        self._write_pids()
        if self.use_snapshots:
            self.worker_queues[w].put(SetSnapshots(dict(self.snapshot_rows)))
        self._ratings_sent = None  # the next ratings go out to every worker
        log(
            f"{what}: restarted it with fresh envs ({reclaimed} trajectory slots back in the "
            f"pool; {len(deaths)} of {WORKER_DEATHS_ALLOWED} deaths allowed in "
            f"{RESTART_WINDOW_S / 60:.0f} minutes)"
        )

    def _shutdown(self) -> None:
        """Stop everyone, let the learners save, write the side state. Never raises on a
        component's error: a second failure reported while stopping is only logged."""
        self.stop_flag[0] = STOPPING
        # a second SIGINT/SIGTERM (timeout, docker stop, Slurm) must not cut the saves short
        for sig in (signal.SIGINT, signal.SIGTERM):
            _set_signal(sig, _log_signal_while_stopping)
        self._send_stops([(q, Stop()) for q in self.worker_queues])
        self._settle_pbt()
        self._send_stops(
            [(self.learner_queues[p], Stop(save=True)) for p in range(self.num_policies)]
        )
        start = time.time()
        hung = self._hung_children()
        for proc in self.processes:
            deadline = start + (HUNG_STOP_GRACE_S if proc.name in hung else STOP_GRACE_S)
            while _running(proc) and time.time() < deadline:
                _wait_for(proc, 0.1)
                self._consume_reports(raise_errors=False)
        for proc in self.processes:
            if _running(proc):
                why = "still not answering" if proc.name in hung else "did not stop in time"
                log(f"{proc.name} {why}; terminating it")
                _send(proc, signal.SIGTERM)
        for proc in self.processes:  # a learner takes SIGTERM as a request to stop: no more
            deadline = time.time() + HUNG_STOP_GRACE_S
            while _running(proc) and time.time() < deadline:
                _wait_for(proc, 0.1)
            _send(proc, signal.SIGKILL)
        self._consume_reports(raise_errors=False)
        self._save_side_state()
        self.stats.status_line(
            self._kept_steps(), self.versions, time.time() - self.budget_start, force=True
        )

    def _kept_steps(self) -> list[int]:
        """Each policy's env steps as its newest checkpoint holds them (0 without one): what a
        resume starts from. At a clean stop the learners have just saved, and these are the
        steps they trained; a learner killed before a save, or whose checkpoint could not be
        written, counts those of the checkpoint it left."""
        kept = []
        for p in range(self.num_policies):
            files = checkpoint_files(checkpoint_dir(self.exp_dir, p))
            kept.append(max(0, checkpoint_order(files[-1])[1]) if files else 0)
        return kept

    @staticmethod
    def _send_stops(stops: list) -> None:
        for q, stop in stops:
            try:
                q.put(stop, timeout=5)
            except Exception as e:  # a full or broken queue must not stop the others' saves
                log(f"could not send stop: {e!r}")

    def _settle_pbt(self) -> None:
        """Before the learners save: let the PBT steps already sent land (up to PBT_SETTLE_S).
        pbt/state.json records a step when it is decided; a copy still on its way at the save
        would leave the member with the new values on its old weights after a resume."""
        deadline = time.monotonic() + PBT_SETTLE_S
        by_name = {proc.name: proc for proc in self.processes}

        def waiting() -> list[int]:
            return [
                p
                for p, n in self.pbt_unapplied.items()
                if n > 0 and by_name.get(self.learner_proc_of.get(p)) is not None
                and _running(by_name[self.learner_proc_of[p]])
            ]  # fmt: skip

        while waiting() and time.monotonic() < deadline:
            self._consume_reports(timeout=0.05, raise_errors=False)
        late = waiting()
        if late:
            who = ", ".join(f"p{p}" for p in sorted(late))
            log(
                f"WARNING: the PBT step of {who} had not landed {PBT_SETTLE_S:.0f} s into the "
                "stop; after a resume it keeps its new values on the weights it had"
            )

    def _hung_children(self) -> set[str]:
        """The workers and inference processes the heartbeats found silent: they hold no
        training state, so the stop does not wait for them (a learner always gets the full
        time to save)."""
        return {
            name
            for name, row in self.proc_hb.items()
            if row in self.silent_rows and not _is_learner(name)
        }

    # --- the observer loop ------------------------------------------------------------------
    def _tick(self, final: bool = False) -> bool:
        """Consume reports, print status, run PBT and self-play bookkeeping; True when done.
        `final` (a serial run's end): errors reported are logged, the run is stopping."""
        timeout = 0.0 if (final or self.cfg.serial_mode) else 0.05
        self._consume_reports(timeout, raise_errors=not final)
        elapsed = time.time() - self.budget_start  # the command's time, restarts included
        steps = self._kept_steps() if final else self.env_steps
        self.stats.status_line(steps, self.versions, elapsed)
        self.stats.maybe_write_summaries(self.env_steps, self.pbt)
        if final:
            self._save_side_state()
            return True
        if self.pbt is not None:
            self._pbt_step()
        if self.control is not None:
            self._serve_control()
        if self.use_snapshots:
            self._snapshot_step()  # which sends the ratings too
        elif self.cfg.matchmaking == "elo" and self.num_agents > 1:
            self._send_ratings()  # the workers draw opponents by them
        self._maybe_save_elo()
        self._maybe_save_summary()
        done = min(self.env_steps) >= self.cfg.train_for_env_steps
        if self.control is not None and self.control.stop_requested:
            done = True
        if self._time_spent():
            log(f"--train_for_seconds={self.cfg.train_for_seconds} reached")
            done = True
        if done and self.cfg.serial_mode:
            self._save_side_state()
        return done

    def _consume_reports(self, timeout: float = 0.0, raise_errors: bool = True) -> None:
        """Apply queued reports; a component's error raises ComponentFailure, or with
        raise_errors=False (while stopping) is logged and the rest still applied."""
        for msg in drain(self.report_queue, timeout=timeout):
            if isinstance(msg, LearnerEvent) and msg.kind == "save_failed":
                # its newest checkpoint holds fewer env steps than it trained: the run does not
                # end as a success (summary.json counts the checkpoint's steps)
                self.save_failed.add(msg.policy_id)
                if raise_errors:
                    raise ComponentFailure(msg.detail)
                log(f"ERROR (while stopping): {msg.detail}")
                continue
            if not raise_errors and isinstance(msg, LearnerEvent) and msg.kind == "error":
                log(f"ERROR (while stopping): {self._error_text(msg)}")
                continue
            if isinstance(msg, WorkerReport):
                self.stats.add_sampling(msg.env_steps * self.cfg.env_frameskip)
                for ep in msg.episodes:
                    current = not isinstance(ep.policy_id, int) or self._counts_for_pbt(
                        ep.policy_id, ep.policy_version
                    )
                    self.stats.add_episode(ep, current)
                    ranked = self.pbt_on_episodes or self.control is not None
                    if not ranked or not isinstance(ep.policy_id, int) or not current:
                        continue
                    objective, is_return = ep.objective, ep.objective is None
                    if is_return:
                        if self.pbt_on_episodes:
                            self.stats.warn_no_objective(ep.policy_id)
                        objective = ep.episode_return
                    if self.pbt_on_episodes:
                        self.pbt.record_episode(ep.policy_id, objective)
                    if self.control is not None:  # ranked by the population's driver
                        self.control.record_episode(ep.policy_id, objective, is_return)
                for match in msg.matches:
                    if any(is_snapshot(s) and s not in self.snapshot_row_of for s in match.seats):
                        continue  # played against a snapshot since evicted from the pool
                    matches = matches_from_episode(match.seats, match.teams, match.objectives)
                    # a member's game begun on weights a PBT copy replaced (or while the copy
                    # is on its way) rates neither the copy nor its opponents
                    rated = all(
                        self._counts_for_pbt(s, v)
                        for s, v in zip(match.seats, match.versions or [-1] * len(match.seats))
                        if isinstance(s, int)
                    )
                    for team_a, team_b, score in matches:
                        if not rated:
                            continue
                        self.cross_play.record(team_a, team_b, score)
                        self.elo.record_match(team_a, team_b, score)
                        if self.control is not None:  # rated by the population's driver too
                            self.control.record_match(team_a, team_b, score)
                    if self.pbt is not None and not self.pbt_on_episodes and rated:
                        if self.scripted_seat is not None:
                            scores = scores_against_scripted(matches, self.scripted_seat)
                        else:
                            scores = scores_against_snapshots(matches)
                        for policy, score in scores:
                            self.pbt.record_episode(policy, score)
            elif isinstance(msg, LearnerReport):
                self.env_steps[msg.policy_id] = msg.env_steps
                self.versions[msg.policy_id] = msg.version
                self.stats.add_train(msg)
            elif isinstance(msg, LearnerEvent):
                if msg.kind == "error":
                    raise ComponentFailure(self._error_text(msg))
                if msg.kind == "snapshot_published" and msg.data["id"] in self.snapshot_row_of:
                    self.snapshot_rows[msg.data["id"]] = msg.data["row"]
                    self._broadcast_snapshots()
                    if self.control is not None:  # for the other node groups too
                        p, steps = parse_snapshot_id(msg.data["id"])
                        self.control.record_snapshot(msg.data["id"], p, steps)
                if msg.kind == "loaded":
                    log(f"policy {msg.policy_id}: {msg.detail}")
                    if "env_steps" in msg.data:
                        self.stats.resumed_from(msg.policy_id, int(msg.data["env_steps"]))
                if msg.kind == "pbt_applied" and self.pbt_unapplied[msg.policy_id] > 0:
                    self.pbt_unapplied[msg.policy_id] -= 1
                if msg.kind == "pbt_applied" and msg.detail != "source=None":
                    source = self.copying.pop(msg.policy_id, None)
                    if source is not None:
                        self.elo.set_rating(msg.policy_id, self.elo.rating(source))
                    self.cross_play.forget(msg.policy_id)  # its games were the old weights'
                    self.stats.forget(msg.policy_id)
                    self.copied_version[msg.policy_id] = int(msg.data["version"])
                if msg.kind == "copy_trained" and msg.data["decided"] is not None:
                    decided = msg.data["decided"]  # that copy's own decision
                    # wall clocks of two processes: never print a negative delay
                    copied, fresh, trained = (
                        max(0.0, msg.data[k] - decided) for k in ("copied", "fresh", "trained")
                    )
                    # in summary.json (pbt_copy_latency_s); the status block sums PBT up
                    self.copy_latencies.append((copied, fresh, trained))
                    if self.control is not None:
                        self.control.record_copy_latency(msg.policy_id, trained)
                if msg.kind == "exported" and self.control is not None:
                    state = self.params.read_transfer(msg.data["row"]).clone()
                    key = (msg.policy_id, int(msg.data["row"]))
                    for reply in self.control.waiting_exports.pop(key, []):
                        reply.set(state)

    def _counts_for_pbt(self, policy: int, version: int = -1) -> bool:
        """Whether a result of `policy` from an episode its weights of `version` began (-1:
        unknown) goes into its PBT record and Elo rating: not while a copy to it is on its way,
        nor (after it) an episode that began on the weights it replaced."""
        if policy in self.copying:
            return False
        fresh = self.copied_version.get(policy)
        if fresh is None or version < 0:
            return True
        return version >= fresh

    @staticmethod
    def _error_text(msg: LearnerEvent) -> str:
        return (
            f"learner {msg.policy_id} failed:\n{msg.detail}" if msg.policy_id >= 0 else msg.detail
        )

    def _ratings(self) -> dict[int, float]:
        """Every member's rating as PBT ranks on it (the starting rating before any game)."""
        return {p: self.elo.rating(p) for p in range(self.num_policies)}

    def _time_spent(self) -> bool:
        """--train_for_seconds is over, counted from the command's start (restarts included):
        the run stops, and a jam does not restart it."""
        return time.time() - self.budget_start > self.cfg.train_for_seconds

    def _pbt_step(self) -> None:
        ratings = None
        if self.cfg.pbt_target_objective == "elo":
            ratings = [self.elo.rating(p) for p in range(self.num_policies)]
        with _SignalsDeferred():  # a step is decided, recorded and sent whole, or not at all
            steps = list(self.env_steps)
            for d in self.pbt.update(steps, ratings=ratings, copying=set(self.copying)):
                self._apply_decision(d.policy_id, d.source_id, d.hparams, d.shaping)
                self.stats.pbt_event(d)

    def _apply_decision(self, policy: int, source, hparams: dict, shaping) -> None:
        """Send a PBT decision on its way: the source's state exported first when it copies
        one, then the new values to the learner, the shaping to every worker."""
        decided = None if source is None else time.time()
        apply = ApplyPBT(policy, source, dict(hparams), decided_at=decided)
        self.pbt_unapplied[policy] += 1
        if source is None:
            self.learner_queues[policy].put(apply)
        else:
            self.learner_queues[source].put(ExportState(source, apply))
            self.copying[policy] = source  # the rating follows the weights, when they land
        if shaping is not None:
            for q in self.worker_queues:
                q.put(SetRewardShaping(policy, shaping))

    def _serve_control(self) -> None:
        """A node group: carry out the population driver's commands (see runtime/control.py)."""
        for command, reply in self.control.pending():
            if isinstance(command, Apply):
                if command.source is not None:
                    self.control.forget(command.policy)
                self._apply_decision(
                    command.policy, command.source, command.hparams, command.shaping
                )
                reply.set()
            elif isinstance(command, Export):
                p = command.policy
                waiting = self.control.waiting_exports.setdefault((p, p), [])
                if not waiting:  # one export answers every request made meanwhile
                    self.learner_queues[p].put(ExportState(p, ExportDone(p)))
                waiting.append(reply)
            elif isinstance(command, Import):
                p = command.policy
                # its results from now until the copy lands are the old weights' (as for a
                # copy inside the group); those not yet polled too
                self.control.forget(p)
                self.copying[p] = p  # the rating is the driver's to carry over
                # the state goes in p's own transfer row, which p's learner then imports
                state = command.state.to(torch.float32).reshape(-1)
                row = self.incoming_row  # the driver carries out one copy at a time
                self.params.write_transfer(row, state)
                # exported again right after the import (into the same row): the reply is that
                # state, to compare with the one sent
                apply = ApplyPBT(
                    p, row, dict(command.hparams), export_to=row, decided_at=command.arrived_at
                )
                self.learner_queues[p].put(apply)
                self.pbt_unapplied[p] += 1
                self.control.waiting_exports.setdefault((p, row), []).append(reply)
                self.control.imported.add(p)
                if command.shaping is not None:
                    for q in self.worker_queues:
                        q.put(SetRewardShaping(p, command.shaping))
            elif isinstance(command, ExportSnapshot):
                row = self.snapshot_rows.get(command.snapshot)
                if row is None:  # evicted meanwhile
                    reply.set(error=f"snapshot {command.snapshot} is no longer in the pool")
                else:
                    reply.set(self.params.read_flat(row))
            elif isinstance(command, AddSnapshot):
                if self.use_snapshots and command.snapshot not in self.snapshot_row_of:
                    row, _ = self._pool_row(command.snapshot)
                    weights = command.weights.to(torch.float32).reshape(-1)
                    self.params.publish_flat(row, weights, command.version)
                    self.snapshot_rows[command.snapshot] = row
                    self.elo.set_rating(command.snapshot, self.elo.initial)
                    self._broadcast_snapshots()
                reply.set()
            else:
                reply.set(error=f"unknown command {command!r}")

    def _snapshot_step(self) -> None:
        """Freeze a copy of each policy every --selfplay_snapshot_every_env_steps into a row
        of the param store; workers are told once the learner confirms it is written."""
        evicted_any = False
        taken = []
        for p in range(self.num_policies):
            if self.env_steps[p] - self.last_snapshot_steps[p] < (
                self.cfg.selfplay_snapshot_every_env_steps
            ):
                continue
            self.last_snapshot_steps[p] = self.env_steps[p]
            sid = snapshot_id(p, self.env_steps[p])
            _, evicted = self._pool_row(sid)
            evicted_any |= evicted
            self.elo.set_rating(sid, self.elo.rating(p))
            taken.append((p, sid))
        # more snapshots at once than the pool holds: the first ones are evicted by the last,
        # whose rows they had; only those still in the pool are written (two learners writing
        # one row would leave either's weights under the other's name)
        for p, sid in taken:
            if sid in self.snapshot_row_of:
                self.learner_queues[p].put(PublishSnapshot(p, self.snapshot_row_of[sid], sid))
        if evicted_any:
            self._broadcast_snapshots()
        if self.cfg.matchmaking == "elo":
            self._send_ratings()

    def _pool_row(self, sid: str) -> tuple[int, bool]:
        """A param-store row for the new snapshot `sid`, the oldest one evicted from a full
        pool; (row, whether one was evicted)."""
        evicted = self.snapshots.add(sid)
        if evicted is not None:
            row = self.snapshot_row_of.pop(evicted)
            self.snapshot_rows.pop(evicted, None)
            self.elo.remove(evicted)
        else:
            row = self.num_policies + len(self.snapshot_row_of)
        self.snapshot_row_of[sid] = row
        return row, evicted is not None

    def _send_ratings(self) -> None:
        """Elo matchmaking: the workers get the ratings when they changed, at most once per
        RATINGS_EVERY_S. Only the newest ratings matter, so a full queue (a worker busy or
        starting slow envs) drops the message instead of blocking the main loop."""
        now = time.time()
        if now - self._ratings_sent_at < RATINGS_EVERY_S:
            return
        ratings = {k: self.elo.rating(k) for k in self.elo.keys()}
        if ratings == self._ratings_sent:
            return
        self._ratings_sent, self._ratings_sent_at = ratings, now
        for q in self.worker_queues:
            try:
                q.put_nowait(SetRatings(ratings))
            except queue.Full:  # this worker gets the next ones
                pass

    def _maybe_save_elo(self) -> None:
        """elo.json every ELO_SAVE_EVERY_S, not only at a clean exit: a killed run resumes
        with its ratings (and Elo-ranked PBT with its ranking)."""
        if time.time() - self._elo_saved_at >= ELO_SAVE_EVERY_S:
            self._save_elo()

    def _maybe_save_summary(self) -> None:
        """summary.json during the run, each time a policy has a newer checkpoint (the stop
        writes it too); a write that fails is named once, and tried again at the next one."""
        if time.time() - self._summary_checked_at < SUMMARY_CHECK_EVERY_S:
            return
        self._summary_checked_at = time.time()
        kept = self._kept_steps()
        if kept == self._summary_kept:
            return
        self._summary_kept = kept
        try:
            self._write_summary(final=False, kept=kept)
        except OSError as e:
            if not self._summary_failed:
                log(f"could not write summary.json: {e.strerror or e} (tried again at the "
                    "next checkpoint and at the stop)")  # fmt: skip
            self._summary_failed = True

    def _save_elo(self) -> None:
        if len(self.elo) and self.num_agents > 1:  # ratings come from games between players
            atomic_write_json(self._elo_path(), self.elo.to_dict())
            # the report's win-rate matrix: recent games between members
            path = os.path.join(self.exp_dir, "cross_play.json")
            atomic_write_json(path, self.cross_play.to_dict())
        self._elo_saved_at = time.time()

    def _broadcast_snapshots(self) -> None:
        for q in self.worker_queues:
            q.put(SetSnapshots(dict(self.snapshot_rows)))

    def _save_side_state(self) -> None:
        """pbt/state.json first (what the next run resumes from), then Elo and summary.json;
        a write that fails (a full disk) is logged and the others are still tried."""
        written = [_try_write("pbt/state.json", self.pbt.save)] if self.pbt is not None else []
        written.append(_try_write("the Elo ratings", self._save_elo))
        written.append(_try_write("summary.json", self._write_summary))
        # the curves' last point: the run's final step counts (not the last timed row's)
        written.append(
            _try_write(
                "the last scalars",
                lambda: self.stats.maybe_write_summaries(self.env_steps, self.pbt, force=True),
            )
        )
        self.side_state_failed = not all(written)  # the end's text says so

    def _write_summary(self, final: bool = True, kept: Optional[list[int]] = None) -> None:
        # what a resume starts from: the steps of the checkpoints it loads
        summary = self.stats.summary(self._kept_steps() if kept is None else kept, final)
        summary["final"] = final  # else written during the run (one killed whole leaves it)
        summary["seed"] = self.run_seed  # drawn when --seed was not given: --seed repeats it
        summary["worker_restarts"] = self.worker_restarts
        summary["pbt_copy_latency_s"] = [
            {"weights_copied": c, "first_experience": f, "first_update": t}
            for c, f, t in self.copy_latencies
        ]
        if self.inference is not None:
            forwards, actors = self.inference.io.stats.sum(0).tolist()
            summary["inference_batch_size"] = actors / forwards if forwards else 0.0
        atomic_write_json(os.path.join(self.exp_dir, "summary.json"), summary)


class _TurnEndStop:
    """Serial mode: the first SIGINT or SIGTERM asks the loop to stop at the end of its turn,
    where the whole state can be saved; a second one interrupts at once."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.requested = False
        self.previous: dict = {}

    def __call__(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        log(f"{signal.Signals(signum).name}: stopping at the end of this turn (again: at once)")

    def __enter__(self):
        try:
            for sig in self.SIGNALS:
                self.previous[sig] = signal.signal(sig, self)
        except ValueError:  # not the main thread: signals stay as they were
            pass
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


class _SignalsDeferred:
    """SIGINT/SIGTERM arriving inside a step that must not be cut in half (a PBT step: the
    members' values, the policy files, the lineage, state.json and the messages to the
    learners) are handled as the step ends."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __enter__(self):
        self.previous: dict = {}
        self.arrived: Optional[int] = None
        for sig in self.SIGNALS:
            previous = _set_signal(sig, self._note)
            if previous is not None:
                self.previous[sig] = previous
        return self

    def _note(self, signum, frame) -> None:
        self.arrived = signum

    def __exit__(self, *exc) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        sig = self.arrived
        if sig is None or exc[0] is not None:
            return
        handler = self.previous.get(sig)
        if callable(handler):
            handler(sig, None)
        elif handler == signal.SIG_DFL:
            os.kill(os.getpid(), sig)


def action_box_note(space) -> Optional[str]:
    """A continuous action box that does not hold 0 strictly inside: the policy's actions
    start around 0 (std 1) and are clipped into the box, so they all start on its edge (half
    of them for a box with 0 at an edge, like [0, 1])."""
    if not isinstance(space, gym.spaces.Box):
        return None
    low = np.asarray(space.low, float).reshape(-1)
    high = np.asarray(space.high, float).reshape(-1)
    bad = np.flatnonzero(~((low < 0) & (high > 0)))
    if bad.size == 0:
        return None
    edge = np.all((low[bad] <= 0) & (high[bad] >= 0))
    ranges = [f"[{low[i]:g}, {high[i]:g}]" for i in bad]
    if bad.size == low.size and len(set(ranges)) == 1:  # every dimension alike
        where, many = f"the action box {ranges[0]}", False
    else:
        shown = bad[:6].tolist()
        more = ", ..." if bad.size > 6 else ""
        where = (
            f"dimension{'s' if bad.size > 1 else ''} {', '.join(map(str, shown))}{more} of the "
            f"action box ({', '.join(ranges[:6])}{more})"
        )
        many = bad.size > 1
    held = ("have" if many else "has") + " 0 at an edge"
    return (
        f"{where} "
        + (held if edge else ("do" if many else "does") + " not hold 0")
        + ", where the policy's actions start (std 1): clipped into the box, "
        + ("half of them start" if edge else "they all start")
        + " on its edge; rescale the actions in the env (e.g. to [-1, 1])"
    )


def saved_network_problem(exp_dir: str, template) -> Optional[str]:
    """Why the network of a run being resumed does not fit the one built now (the env's
    observation or action spaces changed since), or None. Checked on policy 0's newest
    usable checkpoint, before anything is written."""
    found, _ = newest_readable_checkpoint(checkpoint_dir(exp_dir, 0))
    if found is None or not isinstance(found[1].get("model"), dict):
        return None
    saved = {k: tuple(v.shape) for k, v in found[1]["model"].items() if hasattr(v, "shape")}
    now = {k: tuple(v.shape) for k, v in template.state_dict().items()}
    differ = [k for k in now if k in saved and saved[k] != now[k]]
    differ += [k for k in now.keys() ^ saved.keys()]
    if not differ:
        return None
    k = differ[0]
    what = f"{k}: saved {saved.get(k, 'none')}, now {now.get(k, 'none')}"
    return (
        f"{found[0]} holds a network of other sizes than this run builds ({what}): the env's "
        "observation or action spaces (or the model) changed since the run was saved; use a "
        "new --experiment, or --restart_behavior=overwrite to start this one over"
    )


def _flat(x) -> str:
    return " ".join(str(x).split())  # a space's text may hold line breaks (a numpy array)


def one_line_error(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")


def _try_write(what: str, write) -> bool:
    try:
        write()
        return True
    except OSError as e:
        log(f"ERROR: could not write {what}: {e.strerror or e}")
        return False


def _set_signal(sig, handler):
    """signal.signal, or None where signals cannot be set (a thread other than the main one,
    as a node group's run inside a Ray actor)."""
    try:
        return signal.signal(sig, handler)
    except ValueError:
        return None


class _StopSignals:
    """The main process's SIGTERM handler during a run (SIGINT's too, where Python's own
    handler has it): it notes the request, and the run stops like Ctrl-C (checkpoints, PBT
    state, Elo and summary saved) between two turns of its loop, or once its children are
    started. Raised as KeyboardInterrupt on the spot, a signal could land in code that
    swallows the exception (a logging lock's release around a fork, a finaliser) and be lost:
    the run then trained on to its budget. A second one before the loop took the first (a
    loop stuck on a locked queue) is raised at once; once the stop is under way, the stop's
    own handlers only log further signals, so that no save is cut short."""

    def __init__(self):
        self.requested: Optional[int] = None  # the signal that asked for the stop
        self.pid = os.getpid()

    def __call__(self, signum, frame) -> None:
        # nothing printed here: the handler may run inside a print (a reentrant write fails).
        # A child forked a moment ago, before it set its own handlers, leaves it: the runner,
        # which a signal to the process group reaches too, stops it.
        if os.getpid() != self.pid:
            return
        if self.requested is not None:  # asked again: the loop has not taken the first (stuck)
            raise KeyboardInterrupt
        self.requested = signum

    def name(self) -> str:
        return signal.Signals(self.requested).name if self.requested else "a signal"

    def install(self) -> None:
        self.pid = os.getpid()
        _set_signal(signal.SIGTERM, self)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not an ignored
            _set_signal(signal.SIGINT, self)  # one (a background job), nor a caller's own


def _log_signal_while_stopping(signum, frame) -> None:
    log(f"{signal.Signals(signum).name} while stopping: still saving, please wait")


def _warm_up_imports(model, start_method: str) -> None:
    """One backward pass here, before forking, so the modules torch imports lazily on first
    use are loaded once and shared copy-on-write, instead of slowly in every child. No
    optimiser step: torch's optimisers ask CUDA whether a graph capture is under way, and the
    main process never touches CUDA.

    None when children fork and torch is a GPU build: there the first backward pass starts
    autograd's threads for the machine's GPUs, and every forked child then refuses autograd
    ("Unable to handle autograd's threading in combination with fork-based multiprocessing"):
    a run with --device=cpu on a machine with a GPU. On a GPU build without a GPU the children
    only lose the shared imports."""
    if start_method == "fork" and torch_built_for_gpus():
        return
    loss = sum(p.sum() for p in model.parameters()) * 0.0
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    model.zero_grad(set_to_none=True)
    if start_method == "fork":
        # what an optimiser's first step imports (its dynamo guard): about 2 s in every forked
        # learner otherwise, while the others start too (spawned children import it anew)
        importlib.import_module("torch._dynamo")


class _MergedQueue:
    """Serial mode: the one learner host reads every policy's queue."""

    def __init__(self, queues):
        self.queues = queues

    def get_many(self, block=True, timeout=0.0, max_messages_to_get=10**9):
        import queue as std_queue

        out = []
        for q in self.queues:
            try:
                out += q.get_many(block=False, max_messages_to_get=max_messages_to_get)
            except std_queue.Empty:
                pass
        if not out:
            raise std_queue.Empty
        return out


def run(cfg: Cfg) -> int:
    np.set_printoptions(precision=3)
    return Runner(cfg).run()
