"""What a child process needs to build its component, and the builders themselves.

`RunSpec` is a picklable record (config, spaces, shared-memory buffers, queues, seeds, the
env registry), so children start the same way under fork, forkserver and spawn; the process
entry points (`worker_process_main`, `learner_process_main`, `inference_process_main`) are
module-level functions that take it. Serial mode builds the same components from the same
spec in one process.
"""

from __future__ import annotations

import ast
import gc
import os
import pickle
import random
import signal
import sys
import threading
import time
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Optional

import numpy as np
import torch

from rl_pbt.config.parse import Cfg, ConfigError
from rl_pbt.envs.registry import (
    EnvEntry,
    has_batched_env,
    make_env,
    make_env_batch,
    restore_registry,
)
from rl_pbt.envs.scripted import restore_scripted
from rl_pbt.memory.buffers import TrajectoryBuffers
from rl_pbt.memory.param_store import ParamStore
from rl_pbt.memory.slots import SlotPool
from rl_pbt.models.actor_critic import make_actor_critic
from rl_pbt.runtime.devices import derive_seed
from rl_pbt.runtime.heartbeat import Heartbeats, ParentWatch


@dataclass
class RunSpec:
    cfg: Cfg
    exp_dir: str
    resuming: bool
    run_seed: int
    obs_space: Any
    action_space: Any
    num_agents: int
    device_of: dict[int, str]
    buffers: TrajectoryBuffers
    params: ParamStore
    pool: SlotPool
    learner_queues: list  # per policy (policies hosted by one process share one queue)
    worker_queues: list  # control messages, per rollout worker
    report_queue: Any
    heartbeats: Heartbeats
    stop_flag: torch.Tensor
    registry: dict[str, EnvEntry]
    initial_shaping: dict[int, Optional[dict]]
    use_snapshots: bool
    # device inference (None: rollout workers act locally)
    inference: Any = None
    # the env's scripted players (register_scripted_policy), and the seat id of the one
    # --pbt_target_objective=vs_scripted:NAME plays against (None: no such games)
    scripted: Optional[dict] = None
    scripted_seat: Optional[str] = None
    # learning values a resume changed (without PBT): each learner takes them over its
    # checkpoint's
    resume_hparams: Optional[dict] = None
    # which start of the run this is (0: new; a resume draws seeds of its own: derive_seed)
    run_start: int = 0

    def make_model(self):
        return make_actor_critic(self.obs_space, self.action_space, self.cfg)

    def learner_hb(self, policy_id: int) -> int:
        return self.cfg.num_workers + policy_id

    def inference_hb(self, server_idx: int) -> int:
        return self.cfg.num_workers + self.cfg.num_policies + server_idx


def check_picklable_registry(registry: dict[str, EnvEntry], env_name: str, method: str) -> None:
    """Children started by spawn/forkserver rebuild envs from pickled factories: a lambda or a
    function local to another function cannot travel. Say so before anything starts."""
    entry = registry.get(env_name)
    if entry is None:
        return
    factories = [("make_env_func", entry.make_env), ("make_batch_func", entry.make_batch)]
    factories += [("obs_features", f) for f in (entry.obs_features or {}).values()]
    factories.append(("symmetry", entry.symmetry))
    for what, fn in factories:
        if fn is None:
            continue
        where = _main_definition(fn)
        shown = _qualname(fn)
        if where == "guard":
            raise ConfigError(
                f"--env={env_name}: its {what} {shown!r} is defined under "
                '`if __name__ == "__main__":` in your script, and children started with '
                f"--mp_start_method={method} import the script without running that block; "
                "define it at the script's top level, or use "
                "--mp_start_method=fork (CPU only)"
            )
        if where in ("interactive", "elsewhere"):
            how = (
                "interactively (a notebook cell, python -c, an exec)"
                if where == "interactive"
                else "in your script, but not at its top level"
            )
            raise ConfigError(
                f"--env={env_name}: its {what} {shown!r} is defined {how}, and "
                f"children started with --mp_start_method={method} import the main module "
                "afresh, where it does not exist; put it in a .py module (at its top level) "
                "and import it, or use --mp_start_method=fork (CPU only)"
            )
        try:
            pickle.dumps(fn)
        except (pickle.PicklingError, AttributeError, TypeError) as e:
            raise ConfigError(
                f"--env={env_name}: its {what} {getattr(fn, '__qualname__', fn)!r} cannot be "
                f"sent to child processes started with --mp_start_method={method} ({e}); "
                "define it at module level (not a lambda or a nested function), or use "
                "--mp_start_method=fork (CPU only)"
            ) from e


def _main_definition(fn: Any) -> Optional[str]:
    """Where `fn`, from the module being run (`__main__`), is defined, when spawn and
    forkserver children (which import that module afresh, without its main block) cannot
    define it too: "guard" (inside `if __name__ == "__main__":`), "interactive" (a notebook
    cell, `python -c`: the module has no file), "elsewhere" (the file binds no such name at
    its top level: an `exec`, a name made in a function). None otherwise (not from
    `__main__`, bound at the file's top level, or a file that does not parse: pickling then
    decides). Each such child would fail with a traceback of its own."""
    if getattr(fn, "__module__", None) != "__main__" or "<" in _qualname(fn):
        return None  # a lambda or a nested function: pickling names it
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path:
        return "interactive"
    name = _qualname(fn).split(".")[0]
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return None
    if name in _top_level_names(tree.body):
        return None  # the children bind it too
    defined = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    for node in tree.body:
        if isinstance(node, ast.If) and _is_main_test(node.test):
            if any(isinstance(n, defined) and n.name == name for n in ast.walk(node)):
                return "guard"
    return "elsewhere"


def _qualname(fn: Any) -> str:
    """A function's or class's qualified name; a callable object's class's."""
    return getattr(fn, "__qualname__", None) or type(fn).__qualname__


def _top_level_names(body: list) -> set[str]:
    """Names a module binds when imported: its top-level defs, classes, assignments and
    imports, also inside top-level if/try/with/for blocks (not the main block)."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.If) and _is_main_test(node.test):
            continue
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            inner = [getattr(node, k, []) for k in ("body", "orelse", "finalbody")]
            inner += [h.body for h in getattr(node, "handlers", [])]
            for block in inner:
                names |= _top_level_names(block)
    return names


def _is_main_test(test: ast.expr) -> bool:
    """`__name__ == "__main__"` (either way round)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return False
    if not isinstance(test.ops[0], ast.Eq):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s.id for s in sides if isinstance(s, ast.Name)]
    values = [s.value for s in sides if isinstance(s, ast.Constant)]
    return names == ["__name__"] and values == ["__main__"]


ORPHAN_GRACE_S = 10.0
# a learner may be in the middle of a long training iteration when the runner dies, and then
# has its checkpoint to write: as long as a stopping runner gives it (runner.STOP_GRACE_S)
LEARNER_ORPHAN_GRACE_S = 30.0


def _end_if_orphaned(grace_s: float) -> None:
    """A child whose runner died stops by itself (learners save first), seeing it through
    `ParentWatch` in its loop. If its main thread is blocked for good instead (on a shared
    queue left locked by the killed runner), this thread ends the process after a grace
    period, so that no process outlives the run."""
    watch = ParentWatch()
    while not watch.gone():
        time.sleep(1.0)
    time.sleep(grace_s)
    os._exit(1)


def child_setup(
    spec: RunSpec,
    role: str,
    index: int,
    restart: int = 0,
    hide_gpus: bool = False,
    orphan_grace_s: float = ORPHAN_GRACE_S,
    signals: bool = True,
) -> int:
    """First thing in every child: one CPU thread, the user's envs, this child's own seeds;
    with `signals`, SIGINT and SIGTERM as `child_signals` sets them (a learner has set its
    `StopRequest` before).

    `hide_gpus` (learners of CPU policies on a machine with GPUs): hide the GPUs from this
    process before anything initialises CUDA. torch's optimisers ask for the accelerator on
    every step, which would otherwise open a CUDA context (hundreds of MiB of GPU memory) in
    a process that never uses it. Rollout workers keep them: a user's env may render on one."""
    if hide_gpus:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    torch.set_num_threads(1)
    restore_registry(spec.registry)
    if spec.scripted:
        restore_scripted(spec.cfg.env, spec.scripted)
    guard = threading.Thread(
        target=_end_if_orphaned, args=(orphan_grace_s,), name="orphan-guard", daemon=True
    )
    guard.start()
    seed = derive_seed(spec.run_seed, role, index, restart, spec.run_start)
    seed_everything(seed)
    if signals:  # last, so that a signal is never raised inside the set-up (a forked child
        child_signals()  # drops one before: the runner, which it reaches too, stops the child)
    return seed


def child_done() -> None:
    """A child's last call: the objects left are put out of the garbage collector's reach
    (`gc.freeze`), so a spawn child's interpreter exit skips its last walk over all of them
    (about a second with torch loaded on a 2-core machine; fork and forkserver children end
    with os._exit and skip it anyway)."""
    gc.freeze()


def child_signals() -> None:
    """SIGTERM to the whole process group (timeout, docker stop, Slurm) stops a child the way
    Ctrl-C does: learners save their checkpoints on the way out. SIGINT is taken as the main
    process takes it: a run started with SIGINT ignored (a background job, nohup) ignores it in
    every process, so a `kill -INT` to the whole group does not stop the children alone (the
    main process would see them die and restart them)."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


class StopRequest:
    """A learner's SIGINT/SIGTERM handler: it only notes the request, and the learner's loop
    stops between two steps. Raised as KeyboardInterrupt instead, a signal would land on any
    line: in the middle of an optimiser step or of a PBT weight copy (a half-updated model then
    saved), or, a second time, in the middle of the final save (no checkpoint at all)."""

    def __init__(self):
        self.requested = False

    def __call__(self, signum, frame) -> None:
        self.requested = True

    def install(self) -> StopRequest:
        signal.signal(signal.SIGTERM, self)
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # as child_signals
            signal.signal(signal.SIGINT, self)
        return self


def seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


# --- rollout workers -------------------------------------------------------------------------
def _make_env_for(cfg: Cfg, env_config: dict):
    return make_env(cfg.env, cfg, env_config)


def _make_env_batch_for(cfg: Cfg, env_configs: list[dict]):
    return make_env_batch(cfg.env, cfg, env_configs)


def policy_share(cfg: Cfg, num_agents: int, worker_idx: int) -> Optional[list[int]]:
    """Single-agent envs: worker w plays policies p with p % num_workers == w (when that
    splits the population evenly), so its fused forward reads a fraction of the weights;
    every policy still gets an equal share of experience."""
    if num_agents != 1 or cfg.serial_mode or cfg.num_policies % cfg.num_workers != 0:
        return None
    return list(range(worker_idx, cfg.num_policies, cfg.num_workers))


def build_worker(
    spec: RunSpec,
    worker_idx: int,
    should_stop: Callable[[], bool],
    blocking: bool = True,
    incarnation: int = 0,
):
    from rl_pbt.sampling.elo import EloRatings
    from rl_pbt.sampling.matchmaking import LeastServedMatchmaker, make_matchmaker
    from rl_pbt.sampling.rollout_worker import RolloutWorker

    cfg = spec.cfg
    worker_snapshots: dict[str, int] = {}
    ratings = EloRatings()
    matchmaker = make_matchmaker(
        cfg.matchmaking,
        cfg.num_policies,
        cfg.pbt_mix_policies_in_one_env,
        cfg.selfplay_snapshot_prob if spec.use_snapshots else 0.0,
        ratings=ratings,
        pool=_LivePool(worker_snapshots),
        scripted=((spec.scripted_seat, cfg.selfplay_scripted_prob) if spec.scripted_seat else None),
    )
    share = policy_share(cfg, spec.num_agents, worker_idx)
    if share is not None:
        matchmaker = LeastServedMatchmaker(share, cfg.policy_focus_env_steps)
    # envs seed themselves from cfg.seed and their id: the run's seed, drawn when --seed was
    # not given, so that --seed=S repeats a run that drew S
    env_cfg = cfg if cfg.seed is not None else Cfg({**cfg.to_dict(), "seed": spec.run_seed})
    worker = RolloutWorker(
        cfg,
        worker_idx,
        partial(_make_env_for, env_cfg),
        spec.make_model,
        spec.buffers,
        spec.pool,
        spec.params,
        spec.learner_queues,
        spec.report_queue,
        matchmaker,
        spec.heartbeats,
        worker_idx,
        should_stop,
        blocking=blocking,
        make_env_batch=(
            partial(_make_env_batch_for, env_cfg)
            if cfg.batched_envs and has_batched_env(cfg.env)
            else None
        ),
        initial_shaping=dict(spec.initial_shaping),
        # a restarted worker gets fresh env seeds: it must not replay its predecessor's games
        seed=derive_seed(spec.run_seed, "worker", worker_idx, incarnation, spec.run_start),
        inference=spec.inference,
        incarnation=incarnation,
    )
    worker.snapshot_store = worker_snapshots
    worker.ratings = ratings
    return worker


class _LivePool:
    """The snapshot ids a worker currently knows, seen through the SnapshotPool interface."""

    def __init__(self, mapping: dict):
        self.mapping = mapping

    def ids(self) -> list[str]:
        return list(self.mapping)

    def __len__(self) -> int:
        return len(self.mapping)


# --- learners --------------------------------------------------------------------------------
def build_learner(spec: RunSpec, policy_id: int):
    """Policy p's learner; its initial weights come from its own seed, so policies differ
    without --seed and repeat with it."""
    from rl_pbt.learning.learner import Learner

    seed = derive_seed(spec.run_seed, "learner", policy_id, start=spec.run_start)
    torch.manual_seed(seed)
    learner = Learner(
        spec.cfg,
        policy_id,
        spec.make_model(),
        spec.buffers,
        spec.pool,
        spec.params,
        spec.device_of[policy_id],
        spec.exp_dir,
        seed=derive_seed(spec.run_seed, "minibatches", policy_id, start=spec.run_start),
        turn_taking=spec.num_agents > 1,
    )
    plan = spec.inference
    if plan is not None and plan.weight_queues is not None:  # set for child processes
        learner.share_weights(plan.board, plan.weights_queue_of(policy_id))
    return learner


def learner_groups(spec_cfg: Cfg, device_of: dict[int, str]) -> list[list[int]]:
    """Which policies share a learner process: one each, or one process per device."""
    if spec_cfg.learner_processes == "per_device":
        groups: dict[str, list[int]] = {}
        for p in sorted(device_of):
            groups.setdefault(device_of[p], []).append(p)
        return list(groups.values())
    return [[p] for p in sorted(device_of)]
