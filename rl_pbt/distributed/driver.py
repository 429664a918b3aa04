"""A population over a Ray cluster: node groups of `--policies_per_node` members, each an
ordinary single-machine run inside a Ray actor, and one PBT over all of them, here.

The driver keeps what belongs to the whole population in the experiment folder: the PBT state
and lineage (`pbt/`), `population.json` (members, groups, every copy between groups) and one
TensorBoard tree (`.summary/`, one run per member, global ids). Each group trains in
`groups/g{i}/` (checkpoints, its own logs) on the node Ray placed it on (under --ray_node_dir
when given). Where the driver does not see a group's newest checkpoints (another node's disk),
it fetches them through the object store into its own `groups/g{i}/`, so the experiment folder
always holds every member's latest checkpoint: a group started on a node without them (a new
node, a dead node's replacement, a resume elsewhere) gets them from there.

Every loop turn (about a second) the driver polls each group for its members' env steps and
new episode objectives, feeds the PBT manager with global ids (member m of group g is global
id `g * policies_per_node + m`) and carries out its decisions: inside a group as the
single-machine run does (shared memory), across groups by exporting the source's whole state
(weights, normalisers, Adam moments) into Ray's object store and importing it into the
target, which reads it back at once to check it arrived bit for bit.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import socket
import time
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from rl_pbt.config.parse import Cfg, ConfigError, save_cfg
from rl_pbt.envs.registry import make_env, registry_snapshot
from rl_pbt.envs.wrappers import as_multiagent, reward_shaping_target
from rl_pbt.learning.checkpoints import (
    CheckpointError,
    CheckpointWriteError,
    checkpoint_files,
    checkpoint_order,
    install_checkpoint_file,
)
from rl_pbt.learning.learner import default_hparams
from rl_pbt.logging import progress
from rl_pbt.logging.files import POPULATION_FILE, atomic_write_json, read_json, scalars_path
from rl_pbt.logging.stats import ScalarsFile, time_limit
from rl_pbt.runtime.control import RunEnded
from rl_pbt.runtime.devices import derive_seed, fresh_seed
from rl_pbt.runtime.run_lock import RunLock
from rl_pbt.sampling.elo import EloRatings, scores_against_scripted, scores_against_snapshots
from rl_pbt.sampling.matchmaking import (
    SNAPSHOT_PREFIX,
    is_snapshot,
    parse_snapshot_id,
    scripted_seat,
)

POLL_EVERY_S = 1.0
POLL_WAIT_S = 2.0  # a poll not answered in this time is taken at a later round
SILENT_NOTE_EVERY_S = 60.0
STOP_GRACE_S = 10.0  # at the stop, for the answer of a group's last poll
REPLY_TIMEOUT_S = 300.0
STATUS_EVERY_S = 10.0
SUMMARY_EVERY_S = 10.0
GROUP_RESTARTS = 3  # per group, by Ray, before the run stops
# what the driver knows of a group before its first answer
NOT_HEARD: dict[str, Any] = {"finished": False, "status": None, "error": None}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def split_groups(num_policies: int, per_node: int) -> list[list[int]]:
    """Global member ids per node group: consecutive blocks of `per_node`, the last smaller."""
    return [
        list(range(s, min(s + per_node, num_policies))) for s in range(0, num_policies, per_node)
    ]


RAY_CONNECT_TIMEOUT_S = 5.0


def ray_address_problem(address: str) -> Optional[str]:
    """Why a HOST:PORT address cannot be a Ray cluster's (nothing answers there within
    RAY_CONNECT_TIMEOUT_S), or None. Ray itself would retry for minutes, printing only its
    own log lines. "auto" is the cluster Ray would find (RAY_ADDRESS, else the last one
    started on this machine), checked the same way; "local" starts one."""
    if address == "auto":
        address, problem = _auto_address()
        if problem or address is None:
            return problem
    if address == "local" or "://" in address:
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not host:
        return "expected auto, local or HOST:PORT (the head node's GCS address)"
    try:
        socket.create_connection((host.strip("[]"), int(port)), RAY_CONNECT_TIMEOUT_S).close()
    except OSError as e:
        return (
            f"nothing answers there within {RAY_CONNECT_TIMEOUT_S:.0f} s ({e.strerror or e}); "
            "is the head node up (ray start --head) and the port right?"
        )
    return None


def _auto_address() -> tuple[Optional[str], Optional[str]]:
    """(HOST:PORT of the cluster --ray_address=auto joins, or None; why there is none, or
    None). Asks Ray's own lookup; where that lookup has moved (another Ray version), (None,
    None): ray.init decides, as before."""
    try:
        from ray._private.services import get_ray_address_from_environment
    except ImportError:
        return None, None
    try:
        return get_ray_address_from_environment("auto", None), None
    except ConnectionError:
        return None, (
            "no Ray cluster runs on this machine and RAY_ADDRESS is not set; start one (ray "
            "start --head), give its HOST:PORT, or use --ray_address=local"
        )
    except Exception:  # noqa: BLE001 - Ray's lookup failed otherwise: ray.init will say why
        return None, None


class GroupsNotPlaced(RuntimeError):
    """Node groups whose actors Ray did not place within --ray_group_timeout_s."""


@dataclass
class Member:
    group: int
    local: int


class PopulationDriver:
    def __init__(self, cfg: Cfg):
        from rl_pbt.runtime.runner import check_experiment_dir

        self.cfg = cfg
        probe = as_multiagent(
            make_env(cfg.env, cfg, {"worker_index": -1, "vector_index": 0, "env_id": 0})
        )
        target = reward_shaping_target(probe)
        self.default_shaping = target.get_default_reward_shaping() if target else None
        self.rank_on, self.scripted = ranking(cfg, probe)
        # Elo rates games between players: a one-agent env has none, and writes no elo.json
        # (rl-pbt-report would then suggest rl-pbt-match, which needs two players)
        self.rates_games = int(probe.num_agents) > 1
        probe.close()
        check_experiment_dir(cfg)
        self.groups = split_groups(cfg.num_policies, cfg.policies_per_node)
        self.member = {
            gid: Member(g, m) for g, ids in enumerate(self.groups) for m, gid in enumerate(ids)
        }
        self.run_seed = cfg.seed if cfg.seed is not None else fresh_seed()
        problem = ray_address_problem(cfg.ray_address)
        if problem:  # before anything is written
            raise ConfigError(f"--ray_address={cfg.ray_address}: {problem}")
        # the lock first: a second start of the experiment touches nothing (held until the
        # end of run(), released if the start fails)
        self.run_lock = RunLock(cfg.train_dir, cfg.experiment)
        self.run_lock.acquire()
        try:
            self._open_experiment(cfg)
        except BaseException:
            self.run_lock.release()
            raise

    def _open_experiment(self, cfg: Cfg) -> None:
        """The experiment folder (new, or resumed), its PBT and self-play state."""
        from rl_pbt.config.parse import experiment_dir
        from rl_pbt.runtime.runner import _saved_config, prepare_experiment_dir

        saved = _saved_config(experiment_dir(cfg)) or {}  # before prepare may move it aside
        self.exp_dir, self.resuming = prepare_experiment_dir(cfg)
        save_cfg(cfg, os.path.join(self.exp_dir, "config.json"))
        os.makedirs(os.path.join(self.exp_dir, "groups"), exist_ok=True)
        self.pbt = self._make_pbt() if cfg.with_pbt else None
        # without PBT: each member's values, sent to its group as it starts (None: the defaults)
        self.fixed_values = None
        if self.pbt is None:
            self.fixed_values = self._fixed_values(self.resuming and bool(saved.get("with_pbt")))
        self.started_at: dict[int, float] = {}
        self.finished: dict[int, Optional[int]] = {}
        before = self._read_population() if self.resuming else {}
        # each member's count of the run before, until its group reports (a summary written
        # while the groups start says where the members are, not 0)
        steps = before.get("env_steps")
        self.env_steps = (
            [int(x) for x in steps]
            if isinstance(steps, list) and len(steps) == cfg.num_policies
            else [0] * cfg.num_policies
        )
        self.copies: list[dict[str, Any]] = before.get("cross_group_copies", [])
        self.group_nodes: dict[str, str] = dict(before.get("group_nodes", {}))
        self.group_hosts: dict[str, str] = dict(before.get("group_hosts", {}))  # group -> its IP
        # (member, seconds from the decision to its first update after the copy, across groups)
        self.copy_latencies: list[tuple[int, float, bool]] = []
        self.before_arrival: dict[int, float] = {}  # member -> decision to arrival (s)
        # groups Ray restarted: their members' counts before, and at the resume
        self.restarts: list[dict[str, Any]] = before.get("group_restarts", [])
        self._resuming: dict[int, dict[str, Any]] = {}  # group -> its restart record
        self.recent: list[list[float]] = _recent_objectives(self.exp_dir, cfg.num_policies)
        self.recent_are_returns = [False] * cfg.num_policies  # the env gives no objective
        self.writers: dict[int, Any] = {}  # member -> its TensorBoard writer
        # the population's scalar log and summary.json (global ids; each group keeps its own
        # under groups/gK with its local ids): what rl-pbt-report reads
        self.scalars = ScalarsFile(scalars_path(self.exp_dir))
        self._rows_at: dict[int, int] = {}  # member -> env steps of its last row
        # decisions a group could not carry out (it was restarting); snapshots sent to the
        # other groups: over the whole run, resumes included, as the copies and restarts above
        self._failed_copies = int(before.get("decisions_not_carried_out", 0))
        self.shared_snapshots = int(before.get("snapshots_shared_between_groups", 0))
        # the newest snapshots shared (pool size): name -> (its group, its weights' object
        # ref); a group Ray restarts gets the others' again
        self.shared_pool: collections.OrderedDict[str, tuple[int, Any]] = collections.OrderedDict()
        # (group, local member) -> (checkpoint name, the read's object ref, when it was asked)
        self.fetching: dict[tuple[int, int], tuple[str, Any, float]] = {}
        # a newer checkpoint named while an older one of the same member is on its way: fetched
        # once that one is in (the last poll's name must reach the experiment folder)
        self.fetch_next: dict[tuple[int, int], str] = {}
        # checkpoints copied here from the groups' nodes; seconds from the ask to the file here
        self.fetched: dict[str, Any] = _counts(
            before.get("checkpoints_fetched_from_groups"), {"files": 0, "bytes": 0, "seconds": []}
        )
        # every group's rated games in one table, global ids ('elo' ranks the population on it)
        self.elo = EloRatings.from_dict(read_json(self._elo_path(), {}))
        # checkpoints sent from here to starting groups
        self.sent = _counts(before.get("checkpoints_sent_to_groups"), {"files": 0, "bytes": 0})
        # groups not started yet in a new run: an earlier run's folder on their node (outside
        # the experiment folder, --ray_node_dir) is set aside, not resumed
        self.fresh_groups = set() if self.resuming else set(range(len(self.groups)))
        self.in_flight: dict[int, set[int]] = {}  # group -> members whose copy has not landed
        # (monotonic time, env steps in all, the slowest member's): rate and ETA
        self.progress_samples: collections.deque = collections.deque(maxlen=64)
        self.heard: set[int] = set()  # groups whose actor has answered (Ray placed them)
        self.polling: dict[int, tuple[Any, float]] = {}  # group -> (its pending poll, asked at)
        self.last_poll: dict[int, dict] = {}  # group -> its last answer
        self.silent_noted: dict[int, float] = {}  # group -> when its silence was last logged
        # --with_wandb: the population's scalars and PBT events, as a run on one machine logs
        # them (node groups log nothing there of their own)
        self.wandb = None
        if cfg.with_wandb:
            from rl_pbt.logging.wandb_log import WandbSink

            self.wandb = WandbSink(cfg, self.exp_dir, cfg.num_policies)

    def _make_pbt(self):
        from rl_pbt.config.policy_values import load_policy_values
        from rl_pbt.pbt.manager import PBTManager, PBTStateError

        values = None
        if self.cfg.policy_values:
            values = load_policy_values(self.cfg.policy_values, self.cfg.num_policies)
        try:
            return PBTManager(
                self.cfg,
                self.cfg.num_policies,
                default_hparams(self.cfg),
                self.default_shaping,
                self.exp_dir,
                seed=derive_seed(self.run_seed, "pbt"),
                initial_values=values,
            )
        except PBTStateError as e:
            raise ConfigError(str(e)) from None

    def _fixed_values(self, pbt_stopped: bool) -> Optional[list[tuple[dict, Optional[dict]]]]:
        """Each member's (learning values, shaping) in a run without PBT, as on one machine: a
        PBT run resumed without it keeps what PBT gave each member (its policy files; the
        checkpoints hold the same learning values); else --policy_values; else None."""
        from rl_pbt.config.policy_values import load_policy_values, split_values
        from rl_pbt.pbt.search_space import overlay_shaping, saved_member_shaping

        n, default = self.cfg.num_policies, self.default_shaping
        if pbt_stopped:
            if self.cfg.policy_values:
                log(f"{self.cfg.policy_values} not used: each member keeps the values PBT gave it")
            return [({}, saved_member_shaping(self.exp_dir, m, default)) for m in range(n)]
        if not self.cfg.policy_values:
            return None
        out = []
        for entry in load_policy_values(self.cfg.policy_values, n):
            hparams, shaping_flat = split_values(entry)
            shaping = None
            if shaping_flat and default is not None:
                shaping = overlay_shaping(default, shaping_flat, default)
            out.append((dict(hparams), shaping))
        log(f"per-policy values from {self.cfg.policy_values}, sent to each member's group")
        return out

    def _elo_path(self) -> str:
        return os.path.join(self.exp_dir, "elo.json")

    def _population_path(self) -> str:
        return os.path.join(self.exp_dir, POPULATION_FILE)

    def _read_population(self) -> dict:
        try:
            with open(self._population_path()) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    # --- the run ----------------------------------------------------------------------------
    def run(self) -> int:
        import ray

        from rl_pbt.distributed.group import NodeGroup

        cfg = self.cfg
        started_ray = not ray.is_initialized()
        if started_ray:
            # "local" starts a new instance here even where a cluster runs; "auto" joins it
            # a local instance without the dashboard: its CPU is the trainer's
            local = {"include_dashboard": False} if cfg.ray_address == "local" else {}
            try:
                ray.init(
                    address=cfg.ray_address, log_to_driver=True, configure_logging=False, **local
                )
            except (ConnectionError, RuntimeError, ValueError) as e:  # no cluster there
                from rl_pbt.runtime.runner import one_line_error

                raise ConfigError(
                    f"--ray_address={cfg.ray_address}: cannot join a Ray cluster "
                    f"({one_line_error(e)}); start "
                    "one (ray start --head), or try --ray_address=local"
                ) from e
        log(
            f"experiment {self.exp_dir} ({'resuming' if self.resuming else 'new'}); "
            f"{cfg.num_policies} members in {len(self.groups)} node groups on Ray "
            f"({cfg.ray_address}): "
            + ", ".join(f"g{g}: {ids}" for g, ids in enumerate(self.groups))
        )
        actor_cls = ray.remote(NodeGroup)
        cfg_dict = cfg.to_dict()
        registry = registry_snapshot([cfg.env])
        self.actors = [
            actor_cls.options(
                name=f"rl_pbt_{cfg.experiment}_g{g}",
                num_cpus=cfg.ray_cpus_per_group,
                num_gpus=cfg.ray_gpus_per_group,
                max_restarts=GROUP_RESTARTS,
                max_task_retries=-1,
                **self._placement(g),
            ).remote(cfg_dict, g, ids, self.run_seed, registry)
            for g, ids in enumerate(self.groups)
        ]
        self.run_lock.acquire()
        self._save_population([None] * len(self.groups))  # enjoy/match find members now
        status = 0
        try:
            self._start_groups(list(range(len(self.groups))))
        except GroupsNotPlaced as e:
            log(f"ERROR: {e}")
            status = 1
        except (ray.exceptions.RayError, CheckpointError, CheckpointWriteError) as e:
            log(f"ERROR: a node group did not start: {_first_line(e)}")
            status = 1
        stop = {"asked": False}

        def ask_stop(signum, frame):
            if stop["asked"]:
                raise KeyboardInterrupt
            stop["asked"] = True
            log(f"{signal.Signals(signum).name}: stopping every node group")

        previous = {s: signal.signal(s, ask_stop) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            last_status = last_summary = time.monotonic()
            start = time.time()
            while not stop["asked"] and status == 0:
                polls = self._poll_groups()
                self._collect_fetched(block=False)
                failed = [g for g, p in enumerate(polls) if p["finished"] and p["status"] != 0]
                if failed:
                    g = failed[0]
                    log(f"ERROR: node group {g} stopped: {polls[g]['error'] or 'see its log'}")
                    status = 1
                    break
                if all(p["finished"] for p in polls):
                    break
                silent = self._silent_too_long()
                if silent is not None:
                    log(
                        f"ERROR: node group {silent} has not answered for "
                        f"{cfg.ray_group_timeout_s} s (--ray_group_timeout_s): stopping the "
                        "run; the same command resumes it"
                    )
                    status = 1
                    break
                if self.pbt is not None:
                    self._pbt_step()
                now = time.monotonic()
                if now - last_status > STATUS_EVERY_S:
                    self._status_line(time.time() - start)
                    last_status = now
                if now - last_summary > SUMMARY_EVERY_S:
                    self._write_summaries()
                    self._save_population([self.finished.get(g) for g in range(len(self.groups))])
                    last_summary = now
                if time.time() - start > cfg.train_for_seconds:
                    log(f"--train_for_seconds={cfg.train_for_seconds} reached")
                    break
                time.sleep(POLL_EVERY_S)
        except KeyboardInterrupt:
            status = 1
        except (
            ray.exceptions.RayError,
            CheckpointError,
            CheckpointWriteError,
            GroupsNotPlaced,
        ) as e:
            # a group that cannot start again (or died for good)
            log(f"ERROR: a node group stopped for good: {_first_line(e)}")
            status = 1
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            statuses = self._stop_groups()
            if any(s != 0 for s in statuses) and status == 0:
                status = 1
            if self.pbt is not None:
                self.pbt.save()
            self._write_summaries()
            self._save_population(statuses)
            for w in self.writers.values():
                w.close()
            self.scalars.close()
            if self.wandb is not None:
                self.wandb.close()
            self.run_lock.release()
            for a in self.actors:
                ray.kill(a, no_restart=True)
            if started_ray:
                ray.shutdown()
        if stop["asked"]:
            status = 1
        self._status_line(None)
        best = self.best_member() or 0
        head = f"Results in {self.exp_dir}"
        if status:
            head = (
                f"The population stopped before its end (exit status {status}; the messages "
                "above say why). The same command resumes it. What it saved is in "
                f"{self.exp_dir}"
            )
        print(
            f"{head}: population.json, summary.json, stats/scalars.jsonl, pbt/ (state, "
            f"lineage), .summary/ (TensorBoard), groups/g*/ (each node group's run and "
            f"checkpoints). Next:\n"
            f"  the population's report: rl-pbt-report --experiment={cfg.experiment} "
            f"--train_dir={cfg.train_dir}\n"
            f"  watch member {best} (the best): rl-pbt-enjoy --env={cfg.env} "
            f"--experiment={cfg.experiment} --train_dir={cfg.train_dir} --policy={best}",
            flush=True,
        )
        return status

    def _placement(self, g: int) -> dict:
        """A resumed group goes back to the node it ran on, where its folder is, when that
        node is alive and has room (soft affinity); else Ray places it anywhere."""
        node = self.group_nodes.get(str(g))
        if node is None:
            return {}
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node, soft=True)}

    def _stop_groups(self) -> list[Optional[int]]:
        """Stop every group at once and take its last answer (its final checkpoints are fetched
        before the actors go); one deadline for all. A group whose last poll has not answered
        within STOP_GRACE_S more (its actor lost with its node, or waiting for one), and a
        group Ray never placed, is not waited for; a finished group keeps its status. Returns
        each group's status (None: not known)."""
        import ray

        try:
            self._take_answers(STOP_GRACE_S)  # a group only slow to answer is stopped too
        except ray.exceptions.RayError as e:
            log(f"a node group's last answer was lost: {_first_line(e)}")
        statuses: list[Optional[int]] = [self.finished.get(g) for g in range(len(self.actors))]
        stops = {}
        for g, actor in enumerate(self.actors):
            if statuses[g] is not None:
                continue
            if g not in self.heard or g in self.polling:
                what = "never started" if g not in self.heard else "is not answering"
                log(f"node group {g} {what}: not waited for at the stop")
                self._drop_fetches(g)
                continue
            stops[g] = actor.stop.remote()  # each waits up to REPLY_TIMEOUT_S for its saves
        if stops:
            ray.wait(list(stops.values()), num_returns=len(stops), timeout=REPLY_TIMEOUT_S + 60)
        for g, ref in stops.items():
            try:
                statuses[g] = ray.get(ref, timeout=0)
                self._take_one(
                    g, ray.get(self.actors[g].poll.remote(), timeout=REPLY_TIMEOUT_S), final=True
                )
            except ray.exceptions.RayError as e:
                log(f"node group {g} did not stop cleanly: {_first_line(e)}")
                self._drop_fetches(g)
        self._collect_fetched(block=True)  # the final checkpoints, before the actors go
        return statuses

    def _drop_fetches(self, g: int) -> None:
        """Checkpoints of group g still on their way are not waited for (it does not answer):
        the experiment folder keeps the newest that arrived."""
        for key in [k for k in self.fetching if k[0] == g]:
            name = self.fetch_next.pop(key, None) or self.fetching[key][0]
            del self.fetching[key]
            log(f"checkpoint {name} of node group {g} not fetched: the group is not answering")

    # --- what the groups report -------------------------------------------------------------
    def _poll_groups(self) -> list[dict]:
        """Ask every group for its news and take the answers that come within POLL_WAIT_S; a
        group that does not answer (its actor waits for a node, or restarts) is asked again
        once it has, and the others go on meanwhile. A group that has finished is not asked
        again (its last answer named its final checkpoints). Returns each group's last answer."""
        now = time.monotonic()
        for g, actor in enumerate(self.actors):
            if g not in self.polling and self.finished.get(g) is None:
                self.polling[g] = (actor.poll.remote(), now)
        self._take_answers(POLL_WAIT_S)
        for g in sorted(self.polling):
            silent = self._silent_s(g)
            if silent >= SILENT_NOTE_EVERY_S and (
                time.monotonic() - self.silent_noted.get(g, -SILENT_NOTE_EVERY_S)
                >= SILENT_NOTE_EVERY_S
            ):
                self.silent_noted[g] = time.monotonic()
                log(
                    f"node group {g} has not answered for {silent:.0f} s (Ray restarting it, "
                    "or no node with its --ray_cpus_per_group/--ray_gpus_per_group free); "
                    f"the run stops at {self.cfg.ray_group_timeout_s} s (--ray_group_timeout_s)"
                )
        return [self.last_poll.get(g, NOT_HEARD) for g in range(len(self.actors))]

    def _take_answers(self, wait_s: float) -> None:
        """Take every pending poll that answers within wait_s. Each answer is taken before an
        error of another group's is raised (its episodes and games were handed over once)."""
        import ray

        if not self.polling:
            return
        refs = [ref for ref, _ in self.polling.values()]
        answered = set(ray.wait(refs, num_returns=len(refs), timeout=wait_s)[0])
        error = None
        for g, (ref, asked) in sorted(self.polling.items()):
            if ref not in answered:
                continue
            del self.polling[g]
            try:
                self.last_poll[g] = ray.get(ref, timeout=REPLY_TIMEOUT_S)
            except ray.exceptions.RayError as e:
                error = error or e
                continue
            self._take_one(g, self.last_poll[g])
            if g in self.silent_noted:
                log(f"node group {g} answers again after {time.monotonic() - asked:.0f} s")
                del self.silent_noted[g]
        if error is not None:
            raise error

    def _silent_s(self, g: int) -> float:
        """Seconds group g's pending poll has waited (0 when none is pending)."""
        return time.monotonic() - self.polling[g][1] if g in self.polling else 0.0

    def _silent_too_long(self) -> Optional[int]:
        """The first group silent past --ray_group_timeout_s, if any."""
        limit = self.cfg.ray_group_timeout_s
        return next((g for g in sorted(self.polling) if self._silent_s(g) > limit), None)

    def _silent_groups(self) -> set[int]:
        """Groups whose poll has waited past POLL_WAIT_S."""
        return {g for g in self.polling if self._silent_s(g) > POLL_WAIT_S}

    def _silent_members(self) -> set[int]:
        """Members of silent groups: PBT neither judges nor copies them until they answer (a
        call to them would wait as long)."""
        return {gid for g in self._silent_groups() for gid in self.groups[g]}

    def _take_one(self, g: int, poll: dict, final: bool = False) -> None:
        ids = self.groups[g]
        self.in_flight[g] = {ids[m] for m in poll.get("copying", [])}
        restarted = self.started_at.get(g) not in (None, poll["started_at"])
        if restarted:
            log(f"node group {g} was restarted by Ray: its members resume from checkpoints")
            before = [self.env_steps[i] for i in ids]
            record = {"group": g, "time": time.time(), "env_steps_before": before,
                      "env_steps_resumed": [None] * len(ids)}  # fmt: skip
            self.restarts.append(record)
            self._resuming[g] = record
        record = self._resuming.get(g)
        if record is not None:
            # each member's first count after the restart: that of the checkpoint it loaded
            # (plus whatever it trained since), never a start from zero
            resumed = record["env_steps_resumed"]
            for m, steps in enumerate(poll["env_steps"]):
                if resumed[m] is None and steps > 0:
                    resumed[m] = int(steps)
            if all(x is not None for x in resumed):
                del self._resuming[g]
        if poll["waiting"] and not final:
            self._start_groups([g])
        if (restarted or g not in self.started_at) and not poll["finished"] and not final:
            self._send_values(g)
            if restarted:
                self._resend_snapshots(g)
        self.started_at[g] = poll["started_at"]
        node, ip = poll.get("node_id"), poll.get("node_ip")
        ip_before = self.group_hosts.get(str(g))
        if ip is not None and ip_before is not None and ip != ip_before:
            log(
                f"node group {g} now runs on {ip}, not on {ip_before} where it ran before: "
                "what that node's folder lacks of its newest checkpoints comes from the "
                "experiment folder"
            )
        if node is not None:
            self.group_nodes[str(g)] = node
        if ip is not None:
            self.group_hosts[str(g)] = ip
        for m, name in poll["checkpoints"].items():
            self._fetch(g, int(m), name)
        for m, steps in enumerate(poll["env_steps"]):
            # a member's count as its group has it: lower after Ray restarted the group from
            # older checkpoints; 0 before its learner has loaded one (the count before stands)
            if int(steps) > 0:
                self.env_steps[ids[m]] = int(steps)
        for m, objective, is_return in poll["episodes"]:
            gid = ids[m]
            self.recent[gid] = (self.recent[gid] + [objective])[-100:]
            self.recent_are_returns[gid] = bool(is_return)
            if self.pbt is not None and self.rank_on in ("episodes", "elo"):
                self.pbt.record_episode(gid, objective)
        for team_a, team_b, score in poll["matches"]:
            match = (
                [self._global_seat(g, s) for s in team_a],
                [self._global_seat(g, s) for s in team_b],
                score,
            )
            self.elo.record_match(*match)
            if self.pbt is not None and self.rank_on == "snapshots":
                scores = scores_against_snapshots([match])
            elif self.pbt is not None and self.rank_on == "scripted":
                scores = scores_against_scripted([match], self.scripted)
            else:
                continue
            for policy, value in scores:
                self.pbt.record_episode(policy, value)
        for m, seconds, across in poll["copy_latencies"]:
            if across:  # from the arrival in the group: add the driver's part before it
                seconds += self.before_arrival.pop(ids[m], 0.0)
            self.copy_latencies.append((ids[m], seconds, across))
        if len(self.groups) > 1 and not poll["finished"]:
            for sid, m, steps in poll["snapshots"]:
                self._share_snapshot(g, sid, ids[m], steps)
        self.finished[g] = poll["status"] if poll["finished"] else None

    # --- checkpoints: the driver's copy, and groups that start without theirs ----------------
    def _group_dir(self, g: int) -> str:
        return os.path.join(self.exp_dir, "groups", f"g{g}")

    def _start_groups(self, groups: list[int]) -> None:
        """Start groups waiting to: each gets the checkpoints the experiment folder holds that
        are newer than those on its node (all of them on a node that has none)."""
        import ray

        asked = [self.actors[g].held.remote() for g in groups]
        limit = self.cfg.ray_group_timeout_s
        ready = set(ray.wait(asked, num_returns=len(asked), timeout=limit)[0])
        self.heard.update(g for g, ref in zip(groups, asked) if ref in ready)
        missing = [g for g, ref in zip(groups, asked) if ref not in ready]
        if missing:
            c = self.cfg
            raise GroupsNotPlaced(
                f"node group(s) {', '.join(map(str, missing))} did not start within "
                f"{limit} s (--ray_group_timeout_s): Ray has no room for them "
                f"(--ray_cpus_per_group={c.ray_cpus_per_group:g}, --ray_gpus_per_group="
                f"{c.ray_gpus_per_group:g} each; `ray status` shows what the cluster has)"
            )
        held = ray.get(asked, timeout=REPLY_TIMEOUT_S)
        starts = []
        for g, on_node in zip(groups, held):
            files, steps = {}, []
            for m, name in on_node.items():
                here = checkpoint_files(os.path.join(self._group_dir(g), f"checkpoint_p{m}"))
                if here and (
                    name is None or checkpoint_order(here[-1])[:2] > checkpoint_order(name)[:2]
                ):
                    with open(here[-1], "rb") as f:
                        files[f"checkpoint_p{m}/{os.path.basename(here[-1])}"] = f.read()
                    steps.append(f"p{self.groups[g][int(m)]} at {checkpoint_order(here[-1])[1]:,}")
            if files:
                size = sum(len(b) for b in files.values())
                self.sent["files"] += len(files)
                self.sent["bytes"] += size
                log(
                    f"node group {g}: its node lacks the newest checkpoints of "
                    f"{', '.join(steps)} env steps: sent from the experiment folder "
                    f"({size / 2**20:.1f} MiB)"
                )
            behavior = "resume"
            if g in self.fresh_groups:  # a new run: the node's old folder is not resumed
                self.fresh_groups.discard(g)
                behavior = "overwrite" if self.cfg.restart_behavior == "overwrite" else "restart"
            starts.append(self.actors[g].start.remote(files, behavior))
        ray.get(starts, timeout=REPLY_TIMEOUT_S)

    def _fetch(self, g: int, m: int, name: Optional[str]) -> None:
        """Copy member m of group g's newest checkpoint `name` here when the experiment folder
        does not have it (the group runs on another node's disk); in the background."""
        if name is None:
            return
        if (g, m) in self.fetching:
            if self.fetching[(g, m)][0] != name:
                self.fetch_next[(g, m)] = name
            return
        if os.path.isfile(os.path.join(self._group_dir(g), f"checkpoint_p{m}", name)):
            return  # here already: a copy, or the group's own folder (one machine, shared disk)
        ref = self.actors[g].read_checkpoint.remote(m, name)
        self.fetching[(g, m)] = (name, ref, time.monotonic())

    def _collect_fetched(self, block: bool) -> None:
        """Install the fetched checkpoints that have arrived (with `block`: all of them, and
        the newer ones named meanwhile)."""
        import ray

        while True:
            for (g, m), (name, ref, asked) in list(self.fetching.items()):
                if not block and not ray.wait([ref], timeout=0)[0]:
                    continue
                del self.fetching[(g, m)]
                self._install_fetched(g, m, name, ref, asked)
                newer = self.fetch_next.pop((g, m), None)
                if newer is not None:
                    self._fetch(g, m, newer)
            if not block or not self.fetching:
                return

    def _install_fetched(self, g: int, m: int, name: str, ref, asked: float) -> None:
        import ray

        try:
            data = ray.get(ref, timeout=REPLY_TIMEOUT_S)
        except (ray.exceptions.RayError, TimeoutError) as e:
            log(f"checkpoint {name} of node group {g} not fetched: {_first_line(e)}")
            return
        if data is None:
            return  # rotated away meanwhile: the next poll names the newer one
        folder = os.path.join(self._group_dir(g), f"checkpoint_p{m}")
        try:
            install_checkpoint_file(folder, name, data, self.cfg.keep_checkpoints)
        except (CheckpointError, CheckpointWriteError) as e:
            log(f"checkpoint {name} of node group {g} not kept here: {e}")
            return
        self.fetched["files"] += 1
        self.fetched["bytes"] += len(data)
        self.fetched["seconds"].append(round(time.monotonic() - asked, 4))

    def _global_seat(self, g: int, seat):
        """A seat of one of group g's games, named for the whole population: members by global
        id, the group's own snapshots as the other groups know them ('snap:m3@1200000')."""
        if isinstance(seat, (int, np.integer)):
            return self.groups[g][int(seat)]
        if is_snapshot(seat) and not seat.startswith(FOREIGN_PREFIX):
            member, steps = parse_snapshot_id(seat)
            return foreign_snapshot_id(self.groups[g][member], steps)
        return seat  # another group's snapshot (already global), or a scripted player

    def _send_values(self, g: int) -> None:
        """The PBT values of group g's members (restored ones on a resume or a restart); without
        PBT, their fixed values (`_fixed_values`), if any."""
        import ray

        if self.pbt is not None:
            pbt = self.pbt
            values = [(dict(pbt.hparams[gid]), pbt.shaping[gid]) for gid in self.groups[g]]
        elif self.fixed_values is not None:
            values = [self.fixed_values[gid] for gid in self.groups[g]]
        else:
            return
        actor = self.actors[g]
        calls = [
            actor.apply.remote(m, None, dict(hparams), shaping)
            for m, (hparams, shaping) in enumerate(values)
            if hparams or shaping is not None
        ]
        try:
            ray.get(calls, timeout=REPLY_TIMEOUT_S)
        except RunEnded:  # Ray's error for it is a RunEnded too
            return  # it ended meanwhile (a re-run with nothing left to train): its poll says how
        except (ray.exceptions.RayError, RuntimeError, TimeoutError) as e:
            log(f"node group {g} did not take its PBT values: {_first_line(e)}")

    # --- self-play across groups -------------------------------------------------------------
    def _share_snapshot(self, g: int, sid: str, member: int, steps: int) -> None:
        """Group g froze a snapshot of `member`: it joins every other group's pool of
        opponents, its weights shipped once through the object store."""
        import ray

        weights = self.actors[g].export_snapshot.remote(sid)  # stays in the store
        name = foreign_snapshot_id(member, steps)
        silent = self._silent_groups()  # a call to them would wait: they miss this one
        others = [
            a
            for h, a in enumerate(self.actors)
            if h != g and self.finished.get(h) is None and h not in silent
        ]
        try:
            ray.get([a.add_snapshot.remote(name, weights) for a in others], timeout=REPLY_TIMEOUT_S)
            self.shared_snapshots += 1
            self.shared_pool[name] = (g, weights)
            while len(self.shared_pool) > self.cfg.selfplay_snapshot_pool_size:
                self.shared_pool.popitem(last=False)  # the oldest: out of every pool by now
        except (ray.exceptions.RayError, RuntimeError, TimeoutError) as e:
            log(f"snapshot {name} not shared: {_first_line(e)}")

    def _resend_snapshots(self, g: int) -> None:
        """Group g was restarted by Ray with an empty pool of frozen opponents: the other
        groups' newest snapshots, oldest first, go to it again (their weights are still in the
        object store, held by the driver)."""
        import ray

        again = [(name, ref) for name, (src, ref) in self.shared_pool.items() if src != g]
        if not again:
            return
        actor = self.actors[g]
        calls = [actor.add_snapshot.remote(name, ref) for name, ref in again]
        taken = 0
        for (name, _), call in zip(again, calls):
            try:
                ray.get(call, timeout=REPLY_TIMEOUT_S)
                taken += 1
            except (ray.exceptions.RayError, RuntimeError, TimeoutError) as e:
                log(f"snapshot {name} not sent to node group {g} again: {_first_line(e)}")
        log(f"node group {g}: {taken} of the other groups' snapshots sent to it again")

    # --- PBT across groups ------------------------------------------------------------------
    def _pbt_step(self) -> None:
        import ray

        ratings = None
        if self.rank_on == "elo":
            ratings = [self.elo.rating(gid) for gid in range(self.cfg.num_policies)]
        # copies in a group not landed yet, and members of groups not answering: not judged now
        copying = set().union(*self.in_flight.values()) | self._silent_members()
        # a group that finished its budget has stopped: its members are ranked, but their
        # weights can no longer be exported (the others may train on, on slower nodes)
        stopped = {
            gid for g, st in self.finished.items() if st is not None for gid in self.groups[g]
        }
        decisions = self.pbt.update(
            list(self.env_steps), ratings=ratings, copying=copying, no_source=stopped
        )
        for d in decisions:
            target = self.member[d.policy_id]
            actor = self.actors[target.group]
            try:
                if d.source_id is None or self.member[d.source_id].group == target.group:
                    source = None if d.source_id is None else self.member[d.source_id].local
                    ray.get(
                        actor.apply.remote(target.local, source, dict(d.hparams), d.shaping),
                        timeout=REPLY_TIMEOUT_S,
                    )
                else:
                    self._copy_across(d, target)
                if d.source_id is not None and self.rates_games:  # from the source's rating
                    self.elo.set_rating(d.policy_id, self.elo.rating(d.source_id))
            except (ray.exceptions.RayError, RuntimeError, TimeoutError) as e:
                self._failed_copies += 1
                if isinstance(e, TimeoutError):  # a busy group may still carry it out: kept
                    log(f"PBT: no answer yet to the decision for p{d.policy_id}: {_first_line(e)}")
                else:
                    # a group restarting (or stopped) meanwhile: it resumes from its checkpoint
                    # and gets its member's values when it is back, which are those from
                    # before: the decision is taken back (values, record, lineage)
                    self.pbt.cancel(d)
                    log(
                        f"PBT: the decision for p{d.policy_id} was not carried out, and is taken "
                        f"back: {_first_line(e)} ({d.log_line})"
                    )
                    continue
            log(d.log_line)
            if self.wandb is not None:
                steps = self.env_steps[d.policy_id]
                self.wandb.log_pbt_event(d.policy_id, d.source_id, steps, d.log_line)

    def _copy_across(self, d, target: Member) -> None:
        import ray

        decided = time.time()
        source = self.member[d.source_id]
        state = self.actors[source.group].export.remote(source.local)  # stays in the store
        same, installed_s = ray.get(
            self.actors[target.group].import_state.remote(
                target.local, state, dict(d.hparams), d.shaping
            ),
            timeout=REPLY_TIMEOUT_S,
        )
        copied_s = time.time() - decided
        # the group times the first update from the state's arrival on its own clock; the
        # stretch before the arrival (export, transfer) is what the driver saw less the install
        self.before_arrival[d.policy_id] = max(0.0, copied_s - installed_s)
        record = {
            "time": decided,
            "env_steps": self.env_steps[d.policy_id],
            "target": d.policy_id,
            "source": d.source_id,
            "target_group": target.group,
            "source_group": source.group,
            "copied_s": round(copied_s, 4),
            "bit_exact": same,
        }
        self.copies.append(record)
        what = "bit for bit" if same else "BUT THE STATE READ BACK DIFFERS"
        log(
            f"PBT: p{d.policy_id} (group {target.group}) took p{d.source_id}'s state from group "
            f"{source.group} in {record['copied_s']:.2f} s, {what}"
        )

    # --- output -----------------------------------------------------------------------------
    def _status_line(self, elapsed: Optional[float]) -> str:
        """The population's progress: env steps in all and per second (over the last minute),
        the budget's share done by the slowest member, the time left, recent objectives."""
        cfg = self.cfg
        total, slowest = sum(self.env_steps), min(self.env_steps)
        share = min(1.0, slowest / max(1, cfg.train_for_env_steps))
        objectives = " ".join(f"{np.mean(r):.2f}" if r else "-" for r in self.recent)
        if elapsed is None:
            text = (
                f"done: {total:,} env steps in all, {share:.0%} of the budget (slowest member "
                f"{slowest:,}); objectives {objectives}"
            )
            log(text)
            return text
        now = time.monotonic()
        self.progress_samples.append((now, total, slowest))
        rate = progress.progress_rate([(t, n) for t, n, _ in self.progress_samples])
        eta = progress.estimate_eta(
            [(t, s) for t, _, s in self.progress_samples],
            cfg.train_for_env_steps,
            elapsed=elapsed,
            time_limit=time_limit(cfg),
        )
        per_s = f" ({rate:,.0f}/s)" if rate is not None else ""
        text = (
            f"[{elapsed:.0f}s] {total:,} env steps in all{per_s}, {share:.0%} of the budget "
            f"(slowest member {slowest:,}), {eta.text()}; objectives {objectives}"
        )
        log(text)
        return text

    def _write_summaries(self) -> None:
        try:
            from tensorboardX import SummaryWriter
        except ImportError:  # a core dependency; the guard keeps a broken install running
            return
        rows: dict[int, tuple[int, dict[str, float]]] = {}  # new rows of the scalar log
        for gid in range(self.cfg.num_policies):
            w = self.writers.get(gid)
            if w is None:
                w = SummaryWriter(os.path.join(self.exp_dir, ".summary", str(gid)))
                self.writers[gid] = w
            steps = self.env_steps[gid]
            if self.recent[gid]:
                w.add_scalar("population/objective", float(np.mean(self.recent[gid])), steps)
            w.add_scalar("population/node_group", self.member[gid].group, steps)
            if gid in self.elo:
                w.add_scalar("population/elo", self.elo.rating(gid), steps)
            w.flush()
            if steps > self._rows_at.get(gid, 0):
                rows[gid] = (steps, self._scalars_of(gid))
                self.scalars.write(gid, steps, time.time(), rows[gid][1])
                self._rows_at[gid] = steps
        if rows and self.wandb is not None:
            self.wandb.log_scalars(rows)
        if len(self.elo) and self.rates_games:
            atomic_write_json(self._elo_path(), self.elo.to_dict())
        atomic_write_json(os.path.join(self.exp_dir, "summary.json"), self._summary())

    def _scalars_of(self, gid: int) -> dict[str, float]:
        """A member's row of the population's scalar log, under the tags a run's log uses."""
        out = {"population/node_group": float(self.member[gid].group)}
        if self.recent[gid]:  # an env without true_objective: its returns, under their tag
            tag = "episode/reward" if self.recent_are_returns[gid] else "episode/true_objective"
            out[tag] = float(np.mean(self.recent[gid]))
        ranked = self.pbt.objectives().get(gid) if self.pbt is not None else None
        if ranked is not None:
            out["pbt/objective"] = float(ranked)
        if gid in self.elo:
            out["selfplay/elo"] = float(self.elo.rating(gid))
        return out

    def _ranks(self) -> list[Optional[float]]:
        """Each member's value of what PBT ranks on (the recent objective without PBT)."""
        if self.pbt is not None and self.rank_on == "elo":
            return [self.elo.rating(g) for g in range(len(self.recent))]  # as PBT ranks them
        if self.pbt is not None and self.rank_on in ("snapshots", "scripted"):
            ranked = self.pbt.ranked_objectives()
            return [ranked.get(g) for g in range(len(self.recent))]
        return [float(np.mean(r)) if r else None for r in self.recent]

    def best_member(self) -> Optional[int]:
        """The member with the best value of what PBT ranks on (ties: the lowest id)."""
        ranks = [(v, -g) for g, v in enumerate(self._ranks()) if v is not None]
        return -max(ranks)[1] if ranks else None

    def _summary(self) -> dict[str, Any]:
        """summary.json of the population, with global ids, as a run on one machine writes it
        (the figures the driver has: env steps and the episodes' objectives)."""
        policies = {}
        for gid, recent in enumerate(self.recent):
            mean = float(np.mean(recent)) if recent else None
            policies[str(gid)] = {
                "env_steps": int(self.env_steps[gid]),
                "mean_objective": mean,
                "recent_objectives": [float(v) for v in recent],
                "node_group": self.member[gid].group,
            }
        return {"policies": policies, "best_policy": self.best_member()}

    def _save_population(self, statuses: list) -> None:
        across = [round(s, 4) for _, s, a in self.copy_latencies if a]
        inside = [round(s, 4) for _, s, a in self.copy_latencies if not a]
        atomic_write_json(
            self._population_path(),
            {
                "groups": {f"g{g}": ids for g, ids in enumerate(self.groups)},
                "group_nodes": self.group_nodes,  # the Ray node each group last ran on
                "group_hosts": self.group_hosts,  # and that node's address
                "env_steps": self.env_steps,
                "statuses": statuses,
                "cross_group_copies": self.copies,
                "decisions_not_carried_out": self._failed_copies,
                "group_restarts": self.restarts,
                "snapshots_shared_between_groups": self.shared_snapshots,
                # checkpoint files copied between the groups' nodes and the experiment folder
                "checkpoints_fetched_from_groups": self.fetched,
                "checkpoints_sent_to_groups": self.sent,
                # decision -> the target's first update after the copy
                "first_update_after_copy_s": {"across_groups": across, "inside_groups": inside},
                "objectives": [float(np.mean(r)) if r else None for r in self.recent],
            },
        )


def _counts(before: Any, empty: dict[str, Any]) -> dict[str, Any]:
    """Counters from the population.json of the run before (a resume adds to them), `empty`
    when it has none of that shape."""
    if not isinstance(before, dict) or set(before) != set(empty):
        return empty
    if not all(isinstance(before[k], type(v)) for k, v in empty.items()):
        return empty
    return before


def _recent_objectives(exp_dir: str, n: int) -> list[list[float]]:
    """Each member's recent objectives from the summary.json of the run before (a resume goes
    on from them), empty lists for a new run or a summary of another shape."""
    recent: list[list[float]] = [[] for _ in range(n)]
    try:
        policies = read_json(os.path.join(exp_dir, "summary.json"), {}).get("policies", {})
        for gid in range(n):
            values = policies.get(str(gid), {}).get("recent_objectives") or []
            recent[gid] = [float(v) for v in values][-100:]
    except (OSError, ValueError, TypeError, AttributeError):
        return [[] for _ in range(n)]
    return recent


def ranking(cfg: Cfg, probe) -> tuple[str, Optional[str]]:
    """What PBT ranks the population on: 'episodes' (their objectives), 'elo' (ratings from
    every group's games), 'snapshots' or 'scripted' (scores of games against frozen snapshots
    or against the scripted player, whose seat id comes second). ConfigError where the env
    cannot give such games."""
    target = cfg.pbt_target_objective
    kind = {"elo": "elo", "vs_snapshots": "snapshots"}.get(target, "episodes")
    if target.startswith("vs_scripted:"):
        kind = "scripted"
    if kind != "episodes" and int(probe.num_agents) < 2:
        raise ConfigError(
            f"--pbt_target_objective={target} ranks on games between players: it needs a "
            f"multi-agent env, and --env={cfg.env} has one agent"
        )
    if kind != "scripted":
        return kind, None
    from rl_pbt.envs.scripted import make_scripted

    name = target.partition(":")[2]
    try:
        make_scripted(cfg.env, name, probe)
    except ValueError as e:
        raise ConfigError(f"--pbt_target_objective={target}: {e}") from None
    return kind, scripted_seat(name)


FOREIGN_PREFIX = f"{SNAPSHOT_PREFIX}m"


def foreign_snapshot_id(member: int, env_steps: int) -> str:
    """A snapshot's name in the pools of the other node groups: by global member id, which
    no group's own snapshots use ('snap:m3@1200000' for member 3 at 1.2M env steps)."""
    return f"{FOREIGN_PREFIX}{int(member)}@{int(env_steps)}"


def _first_line(e: BaseException) -> str:
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line and not line.startswith("File")]
    return (errors[-1] if errors else lines[0] if lines else type(e).__name__)[:300]


def run(cfg: Cfg) -> int:
    return PopulationDriver(cfg).run()
