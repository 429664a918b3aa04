"""A population over Ray: a 2-node cluster on this machine (one CPU each), 4 CartPole members in
2 node groups, one PBT across both. The run learns, PBT copies members across groups bit for
bit, a group whose actor is killed is restarted by Ray and resumes from its checkpoints, a
re-run restores the same PBT state and lineage, and groups whose folders the driver cannot see
have their checkpoints copied to the experiment folder, from which a re-run on nodes that lost
them resumes."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import types

import pytest

from launch import report
from launch import train as train_cli
from rl_pbt import parse_cfg, train
from rl_pbt.learning.checkpoints import latest_checkpoint
from rl_pbt.logging.files import checkpoint_dir, read_json
from tests.small_run import CARTPOLE_LEARN

ray = pytest.importorskip("ray")

STEPS = 60_000  # env steps per member

FLAGS = [
    "--env=CartPole-v1",
    *CARTPOLE_LEARN,  # with the overrides below (later flags win)
    "--num_policies=4",
    "--policies_per_node=2",
    "--with_pbt",
    # PBT rounds at 20k, 30k, 40k and 50k env steps, each replacing the bottom half with the
    # top half at any gap: the test needs a copy between the groups, and with one member
    # replaced per round only at a 10% gap (the defaults) two rounds made none in one CI run
    "--pbt_period_env_steps=10000",
    "--pbt_start_mutation=20000",
    "--pbt_replace_fraction=0.5",
    "--pbt_replace_reward_gap=0",
    "--num_workers=1",
    f"--train_for_env_steps={STEPS}",
    "--save_every_sec=3",
    "--seed=3",
]


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    c.add_node(num_cpus=1)
    ray.init(address=c.address, configure_logging=False)
    yield c
    ray.shutdown()
    c.shutdown()


def read(path):
    with open(path) as f:
        return f.read()


def checkpoint_steps(path: str) -> int:
    """The env steps in a checkpoint's name (checkpoint_{version}_{env_steps}.pth)."""
    return int(os.path.splitext(os.path.basename(path))[0].split("_")[2])


def copied_across_groups(exp_dir: str) -> bool:
    """The lineage holds a copy between node groups g0 (p0, p1) and g1 (p2, p3)."""
    path = os.path.join(exp_dir, "pbt", "lineage.jsonl")
    if not os.path.isfile(path):
        return False
    with open(path) as f:
        events = [json.loads(line) for line in f if line.endswith("\n")]
    return any(e["action"] == "replace" and e["source"] // 2 != e["policy"] // 2 for e in events)


def kill_group_when_checkpointed(exp_dir, name, out):
    """Kill node group g1's actor (Ray restarts it) once PBT has copied a member between the
    groups and each of g1's members has a checkpoint after some training on disk (a member
    that has not trained yet may have one at 0 env steps: on a busy machine one member can
    start training well after the other). Killed earlier, g1 resumed behind g0, which finished
    its budget (and stopped: no source any more) before g1 reached a PBT round, and some runs
    made no copy between the groups."""
    folders = [os.path.join(exp_dir, "groups", "g1", f"checkpoint_p{m}") for m in range(2)]

    def trained(folder: str) -> bool:
        newest = os.path.isdir(folder) and latest_checkpoint(folder)
        return bool(newest) and checkpoint_steps(newest) > 0

    deadline = time.time() + 240
    while time.time() < deadline:
        if copied_across_groups(exp_dir) and all(trained(f) for f in folders):
            time.sleep(2.0)
            # the newest checkpoint of each of g1's members when it dies: env steps in its name
            out["checkpointed"] = [checkpoint_steps(latest_checkpoint(f)) for f in folders]
            ray.kill(ray.get_actor(name), no_restart=False)
            out["killed"] = time.time()
            return
        time.sleep(0.5)


def test_population_over_two_nodes(cluster, tmp_path, capsys):
    flags = [
        *FLAGS,
        f"--ray_address={cluster.address}",
        f"--train_dir={tmp_path}",
        "--experiment=pop",
    ]
    exp = os.path.join(tmp_path, "pop")
    killed = {}
    killer = threading.Thread(
        target=kill_group_when_checkpointed, args=(exp, "rl_pbt_pop_g1", killed), daemon=True
    )
    killer.start()
    assert train(parse_cfg(flags)) == 0
    out = capsys.readouterr().out
    assert killed, "group g1 was never killed"
    assert "node group 1 was restarted by Ray" in out

    population = json.loads(read(os.path.join(exp, "population.json")))
    # the killed group's members resumed from their checkpoints: their first counts after the
    # restart are at least those of the newest checkpoints at the kill, never 0
    (restart,) = [r for r in population["group_restarts"] if r["group"] == 1]
    assert all(r >= c > 0 for r, c in zip(restart["env_steps_resumed"], killed["checkpointed"])), (
        restart,
        killed,
    )
    # every member trained its whole budget, the killed group's included
    assert min(population["env_steps"]) >= STEPS
    # the population learned: its best member at the usual CartPole bar
    assert max(population["objectives"]) >= 195, population["objectives"]
    # PBT copied members across node groups, each checked bit for bit on arrival
    across = population["cross_group_copies"]
    assert across, "no copy between node groups"
    assert all(c["bit_exact"] for c in across), across
    assert all(c["source_group"] != c["target_group"] for c in across)

    # the population's summary.json and scalar log, with global ids: what the report reads
    summary = json.loads(read(os.path.join(exp, "summary.json")))
    assert sorted(summary["policies"]) == ["0", "1", "2", "3"]
    objectives = population["objectives"]
    assert summary["best_policy"] == objectives.index(max(objectives))
    rows = [
        json.loads(line)
        for line in read(os.path.join(exp, "stats", "scalars.jsonl")).split("\n")
        if line
    ]
    # CartPole gives no true_objective: its returns, named so, as in a local run's log
    assert {r["policy"] for r in rows if "episode/reward" in r["scalars"]} == {0, 1, 2, 3}
    assert not any("episode/true_objective" in r["scalars"] for r in rows)
    # the report reads them as a local run's: a curve and a final objective per member
    run = report.load_run(exp)
    assert sorted(report.curves_for(run.timelines, "episode/reward")) == [0, 1, 2, 3]
    _, table, source = report.final_rows(run)
    assert len(table) == 4 and run.summary and not run.problems, (table, run.problems)
    assert all(r["objective"] is not None for r in table), table

    # enjoy and match find member 3 in its node group's folder
    assert checkpoint_dir(exp, 3) == os.path.join(exp, "groups", "g1", "checkpoint_p1")
    assert latest_checkpoint(checkpoint_dir(exp, 3)) is not None

    # a re-run with nothing left to train restores the same PBT values and lineage
    state = json.loads(read(os.path.join(exp, "pbt", "state.json")))
    lineage = read(os.path.join(exp, "pbt", "lineage.jsonl"))
    nodes = population["group_nodes"]
    assert len(set(nodes.values())) == 2  # one group per node (one CPU each)
    assert train(parse_cfg(flags)) == 0
    # each group went back to the node where its folder is
    assert json.loads(read(os.path.join(exp, "population.json")))["group_nodes"] == nodes
    again = json.loads(read(os.path.join(exp, "pbt", "state.json")))
    for key in ("hparams", "shaping_flat", "last_update"):
        assert again[key] == state[key], key
    assert read(os.path.join(exp, "pbt", "lineage.jsonl")) == lineage


@pytest.mark.slow  # 33 s; the population over two nodes stays in the default run
def test_self_play_over_node_folders_the_driver_cannot_see(cluster, tmp_path, capsys):
    """Arena self-play in 2 node groups that keep their runs in a folder the driver does not
    see (--ray_node_dir, as on another node's disk). Each group's frozen snapshots join the
    other group's pool of opponents, and games are played against them there. Every member's
    newest checkpoint reaches the experiment folder through the object store, and a re-run
    whose nodes lost their folders resumes from there. (One run for both: a population over
    Ray takes about 20 s to start and train here.)"""
    import envs  # noqa: F401  (registers the arena)

    node = tmp_path / "node"
    flags = [
        "--env=arena_duel",
        "--num_policies=4",
        "--policies_per_node=2",
        "--num_workers=1",
        "--num_envs_per_worker=8",
        "--selfplay_snapshot_prob=0.5",
        "--selfplay_snapshot_every_env_steps=3000",
        # every snapshot of the run stays in the pools and in the ratings: a pool of 8 (the
        # default) kept the last ones only: 2-8 games against the other group's in a group's
        # table, and none in one CI run (30-45 now)
        "--selfplay_snapshot_pool_size=32",
        "--train_for_env_steps=18000",
        "--save_every_sec=2",
        "--with_pbt",
        "--pbt_target_objective=elo",  # rated over the whole population, by the driver
        "--seed=5",
        f"--ray_address={cluster.address}",
        f"--train_dir={tmp_path / 'driver'}",
        f"--ray_node_dir={node}",
        "--experiment=sp",
    ]
    assert train(parse_cfg(flags)) == 0
    exp = os.path.join(tmp_path, "driver", "sp")
    population = json.loads(read(os.path.join(exp, "population.json")))

    # snapshots: each group played the other group's members' snapshots
    assert population["snapshots_shared_between_groups"] >= 2
    for g, others in (("g0", ("m2", "m3")), ("g1", ("m0", "m1"))):
        elo = json.loads(read(os.path.join(node, "sp", "groups", g, "elo.json")))
        # entries: [player, rating, games]; the other group's members' snapshots played here
        foreign = [
            games
            for key, _, games in elo["entries"]
            if isinstance(key, str) and key.startswith(tuple(f"snap:{m}@" for m in others))
        ]
        assert sum(foreign) > 0, f"{g} never played a snapshot of the other group"
    # the driver's table holds every group's games, members by global id and every snapshot
    # under one name (a group's own snapshots renamed as the other groups know them)
    rated = {
        str(key): games for key, _, games in read_json(os.path.join(exp, "elo.json"))["entries"]
    }
    assert all(rated.get(str(m), 0) > 0 for m in range(4)), rated
    for m in range(4):
        assert any(k.startswith(f"snap:m{m}@") for k in rated), (m, rated)
    assert not any(k.startswith("snap:") and not k.startswith("snap:m") for k in rated), rated

    # checkpoints: the newest of every member, on its node and in the experiment folder alike
    def on_node(gid: int):
        """Member gid's newest checkpoint in its node group's folder (2 members a group)."""
        g, m = divmod(gid, 2)
        return latest_checkpoint(os.path.join(node, "sp", "groups", f"g{g}", f"checkpoint_p{m}"))

    names = {}
    for gid in range(4):
        there = on_node(gid)
        here = latest_checkpoint(checkpoint_dir(exp, gid))
        assert there is not None and here is not None, gid
        assert os.path.basename(here) == os.path.basename(there), gid
        with open(here, "rb") as a, open(there, "rb") as b:
            assert a.read() == b.read(), f"member {gid}'s copy differs"
        names[gid] = os.path.basename(here)
    assert population["checkpoints_fetched_from_groups"]["files"] >= 4
    assert population["checkpoints_sent_to_groups"]["files"] == 0
    steps = population["env_steps"]
    assert min(steps) >= 18000

    shutil.rmtree(node)  # the nodes lost their disks: a re-run gets the checkpoints from here
    capsys.readouterr()
    assert train(parse_cfg(flags)) == 0
    out = capsys.readouterr().out
    for g in (0, 1):
        assert f"node group {g}: its node lacks the newest checkpoints" in out
    again = json.loads(read(os.path.join(exp, "population.json")))
    assert again["checkpoints_sent_to_groups"]["files"] == 4
    # every member resumed where it was, so its budget was already met: no training again
    for gid in range(4):
        there = on_node(gid)
        assert there is not None and os.path.basename(there) == names[gid], gid
    assert all(b >= a for a, b in zip(steps, again["env_steps"]))


def test_a_group_no_node_has_room_for_ends_the_run_in_one_line(
    cluster, tmp_path, monkeypatch, capsys
):
    """On the cluster of the tests above (1 CPU per node), a group asking for 2 CPUs is never
    placed: the run ends with status 1 and a line naming the flag, without waiting for it."""
    cfg = parse_cfg(
        [
            *FLAGS,
            f"--ray_address={cluster.address}",
            f"--train_dir={tmp_path}",
            "--experiment=big",
            "--ray_cpus_per_group=2",
            "--ray_group_timeout_s=3",
        ]
    )
    started = time.monotonic()
    assert train(cfg) == 1
    assert time.monotonic() - started < 60
    out = capsys.readouterr().out
    assert "node group(s) 0, 1 did not start within 3 s" in out, out
    assert "--ray_cpus_per_group=2" in out and "node group 1 never started" in out


def test_the_driver_ranks_games_of_every_group_under_global_names(tmp_path):
    """Games a group reports (its members by local id, its own snapshots by local name) are
    rated and scored for PBT under the population's names."""
    import envs  # noqa: F401  (registers the arena)
    from rl_pbt.distributed.driver import PopulationDriver

    cfg = parse_cfg(
        [
            "--env=arena_duel",
            "--num_policies=4",
            "--policies_per_node=2",
            "--with_pbt",
            "--pbt_target_objective=vs_snapshots",
            "--selfplay_snapshot_prob=0.5",
            "--ray_address=local",
            f"--train_dir={tmp_path}",
            "--experiment=d",
        ]
    )
    driver = PopulationDriver(cfg)
    driver.started_at[1] = 1.0  # group 1 (members 2 and 3) already seen
    poll = {
        "started_at": 1.0,
        "node_id": None,
        "waiting": False,
        "env_steps": [100, 100],
        "versions": [1, 1],
        "checkpoints": {},
        "episodes": [(0, 0.7, False)],  # not a game against snapshots: not ranked
        "copy_latencies": [],
        "snapshots": [],
        "matches": [
            *[([1], ["snap:0@500"], 1.0)] * 5,  # member 3 beat group 1's snapshot of member 2
            ([0], [1], 0.0),  # member 2 lost to member 3: live against live, not ranked
            ([0], ["snap:m1@900"], 0.5),  # member 2 drew with group 0's snapshot of member 1
        ],
        "copying": [1],  # member 3's copy in its group has not landed
        "finished": False,
        "status": None,
        "error": None,
    }
    driver._take_one(1, poll)
    assert driver.in_flight == {1: {3}}  # no source for the driver's next PBT step
    assert driver.pbt.objectives() == {0: None, 1: None, 2: 0.5, 3: 1.0}
    assert sorted(map(str, driver.elo.keys())) == ["2", "3", "snap:m1@900", "snap:m2@500"]
    assert driver.elo.games(3) == 6 and driver.elo.games(2) == 2
    assert driver.elo.rating(3) > driver.elo.rating(2)
    assert driver.recent[2] == [0.7]  # episodes still make the objectives shown
    # the population's summary.json and scalar log, global ids; PBT's best is the best member
    driver.env_steps = [100, 100, 100, 100]
    driver._write_summaries()
    summary = read_json(os.path.join(driver.exp_dir, "summary.json"))
    # 1.0 in 5 games against snapshots (member 2 has the best episode, one game: not ranked)
    assert summary["best_policy"] == 3
    assert summary["policies"]["2"]["mean_objective"] == 0.7
    assert summary["policies"]["3"]["node_group"] == 1
    with open(os.path.join(driver.exp_dir, "stats", "scalars.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    assert [r["policy"] for r in rows] == [0, 1, 2, 3]
    assert rows[2]["scalars"]["episode/true_objective"] == 0.7
    assert rows[3]["scalars"]["pbt/objective"] == 1.0
    driver._write_summaries()  # no new steps: no new rows
    with open(os.path.join(driver.exp_dir, "stats", "scalars.jsonl")) as f:
        assert len(f.readlines()) == 4
    driver.scalars.close()
    driver.run_lock.release()
    # a resume goes on from the recent objectives the summary holds
    assert PopulationDriver(cfg).recent == [[], [], [0.7], []]


class FakeRef:
    def __init__(self, value):
        self.value, self.ready = value, False


class FakeGroup:
    """A node group's actor as the driver calls it (held, start, read_checkpoint): what it was
    asked, in order; `held()` answers `held`, a read answers a reference to the name read."""

    def __init__(self, held=None):
        self.calls = []
        self._held = held
        self.held = self.start = self.read_checkpoint = self

    def remote(self, *args):
        if not args:
            return FakeRef(self._held)
        self.calls.append(args)
        return FakeRef(args[-1])


def driver_cfg(tmp_path, *extra):
    return parse_cfg(
        [
            "--env=CartPole-v1",
            "--num_policies=4",
            "--policies_per_node=2",
            "--ray_address=local",
            f"--train_dir={tmp_path}",
            "--experiment=n",
            *extra,
        ]
    )


def test_the_last_checkpoint_named_reaches_the_experiment_folder(tmp_path, monkeypatch):
    """A newer checkpoint named while an older one of the same member is still on its way (the
    last poll, after the group's final save) is fetched once the older one is in."""
    from rl_pbt.distributed.driver import PopulationDriver
    from rl_pbt.learning.checkpoints import encode_checkpoint

    driver = PopulationDriver(driver_cfg(tmp_path))
    group = FakeGroup()
    driver.actors = [FakeGroup(), group]
    monkeypatch.setattr(ray, "wait", lambda refs, timeout=None: ([r for r in refs if r.ready], []))
    monkeypatch.setattr(ray, "get", lambda ref, timeout=None: encode_checkpoint({"n": ref.value}))

    older, newer = "checkpoint_000000010_1000.pth", "checkpoint_000000020_2000.pth"
    driver._fetch(1, 0, older)
    driver._collect_fetched(block=False)  # not arrived yet: still on its way
    driver._fetch(1, 0, newer)  # the final poll names the newer one
    assert group.calls == [(0, older)]
    driver._collect_fetched(block=True)  # the end of the run
    assert group.calls == [(0, older), (0, newer)]
    assert latest_checkpoint(os.path.join(tmp_path, "n", "groups", "g1", "checkpoint_p0")).endswith(
        newer
    )
    assert driver.fetched["files"] == 2 and not driver.fetching and not driver.fetch_next
    driver.scalars.close()
    driver.run_lock.release()


@pytest.mark.parametrize("flag,fresh", [("resume", "restart"), ("overwrite", "overwrite")])
def test_a_new_run_sets_aside_what_a_node_kept_of_an_earlier_one(
    tmp_path, monkeypatch, flag, fresh
):
    """Groups keep their runs on their node (--ray_node_dir): a new run (here after
    --restart_behavior=overwrite, or with the experiment folder gone) starts each group on a
    node folder that is moved aside or deleted, not resumed; a restart within the run, and a
    resume, resume."""
    from rl_pbt.distributed.driver import PopulationDriver
    from rl_pbt.distributed.group import NodeGroup

    monkeypatch.setattr(ray, "get", lambda refs, timeout=None: [r.value for r in refs])
    monkeypatch.setattr(ray, "wait", lambda refs, num_returns=1, timeout=None: (list(refs), []))
    old = {0: "checkpoint_000000010_1000.pth", 1: None}
    driver = PopulationDriver(driver_cfg(tmp_path, f"--restart_behavior={flag}"))
    driver.actors = [FakeGroup(dict(old)), FakeGroup(dict(old))]
    driver._start_groups([0, 1])
    assert [a.calls for a in driver.actors] == [[({}, fresh)], [({}, fresh)]]
    driver._start_groups([1])  # Ray restarted group 1 in this run: it resumes
    assert driver.actors[1].calls[-1] == ({}, "resume")
    driver.scalars.close()
    driver.run_lock.release()
    again = PopulationDriver(driver_cfg(tmp_path))  # the same command again: a resume
    again.actors = [FakeGroup(dict(old)), FakeGroup(dict(old))]
    again._start_groups([0, 1])
    assert [a.calls for a in again.actors] == [[({}, "resume")], [({}, "resume")]]
    again.scalars.close()
    again.run_lock.release()

    # the group on its node: the earlier run's folder is moved aside (restart) or deleted
    import rl_pbt.runtime.runner as runner_module
    from rl_pbt.runtime.runner import prepare_experiment_dir

    class Runner:  # the group's run, up to its folder
        def __init__(self, cfg):
            self.folder, self.resuming = prepare_experiment_dir(cfg)
            self.stats = types.SimpleNamespace()  # the group names its members there

        def run(self):
            return 0

    monkeypatch.setattr(runner_module, "Runner", Runner)
    node = tmp_path / "node"
    cfg = driver_cfg(tmp_path, f"--ray_node_dir={node}").to_dict()
    group = NodeGroup(cfg, 0, [0, 1], 7, {})
    folder = node / "n" / "groups" / "g0"
    (folder / "checkpoint_p0").mkdir(parents=True)
    (folder / "checkpoint_p0" / old[0]).write_bytes(b"old weights")
    (folder / "config.json").write_text("{}")
    (folder / ".rl_pbt_experiment").write_text("")
    assert group.held() == old
    group.start({}, fresh)
    group.thread.join(10)
    assert not group.runner.resuming and group.held() == {0: None, 1: None}
    kept = [p.name for p in (node / "n" / "groups").iterdir() if p.name.startswith("g0_old_")]
    assert len(kept) == (1 if fresh == "restart" else 0), kept


def test_a_population_of_a_one_agent_env_writes_no_elo_table(tmp_path, monkeypatch):
    """A PBT copy rates nobody where no games are played: no elo.json, from which
    rl-pbt-report would suggest rl-pbt-match (which needs a multi-agent env)."""
    from rl_pbt.distributed.driver import PopulationDriver

    monkeypatch.setattr(ray, "get", lambda ref, timeout=None: ref.value)
    driver = PopulationDriver(driver_cfg(tmp_path, "--with_pbt"))
    group = FakeGroup()
    group.apply = group
    driver.actors = [group, FakeGroup()]
    copy = types.SimpleNamespace(
        policy_id=1, source_id=0, hparams={}, shaping=None, log_line="PBT: p1 copies p0"
    )
    driver.pbt.update = lambda steps, ratings=None, copying=(), no_source=(): [copy]
    driver._pbt_step()
    assert group.calls == [(1, 0, {}, None)]  # p1 took p0's weights, in group 0
    driver.env_steps = [100, 100, 100, 100]
    driver._write_summaries()
    assert os.path.isfile(os.path.join(driver.exp_dir, "summary.json"))
    assert not os.path.exists(os.path.join(driver.exp_dir, "elo.json"))
    driver.scalars.close()
    driver.run_lock.release()


def test_a_resumed_driver_goes_on_from_the_counts_of_the_run_before(tmp_path):
    from rl_pbt.distributed.driver import PopulationDriver

    first = PopulationDriver(driver_cfg(tmp_path))
    first.env_steps = [1000, 2000, 3000, 4000]
    first._failed_copies, first.shared_snapshots = 2, 5
    first.fetched = {"files": 3, "bytes": 300, "seconds": [0.1, 0.2, 0.3]}
    first.sent = {"files": 1, "bytes": 100}
    first._save_population([0, 0])
    first.scalars.close()
    first.run_lock.release()
    again = PopulationDriver(driver_cfg(tmp_path))
    # until the groups report: where the members were, not 0 (summary.json, the status line)
    assert again.env_steps == [1000, 2000, 3000, 4000]
    assert again._summary()["policies"]["3"]["env_steps"] == 4000
    assert (again._failed_copies, again.shared_snapshots) == (2, 5)
    assert again.fetched["files"] == 3 and again.sent == {"files": 1, "bytes": 100}
    again.scalars.close()
    again.run_lock.release()
    fresh = PopulationDriver(driver_cfg(tmp_path, "--restart_behavior=overwrite"))
    assert fresh.env_steps == [0, 0, 0, 0] and fresh.fetched["files"] == 0
    fresh.scalars.close()
    fresh.run_lock.release()


def test_members_of_a_group_that_finished_are_no_pbt_source(tmp_path):
    """A node group that trained its budget has stopped (slower groups may train on): its
    members are still ranked, but PBT takes no copy from them, which could not be exported."""
    from rl_pbt.distributed.driver import PopulationDriver

    driver = PopulationDriver(driver_cfg(tmp_path, "--with_pbt"))
    asked = {}

    def update(steps, ratings=None, copying=(), no_source=()):
        asked.update(steps=steps, copying=set(copying), no_source=set(no_source))
        return []

    driver.pbt.update = update
    driver.finished = {0: None, 1: 0}  # group 1 (members 2 and 3) finished its budget
    driver.in_flight = {0: {1}}
    driver._pbt_step()
    assert asked["no_source"] == {2, 3} and asked["copying"] == {1}
    driver.scalars.close()
    driver.run_lock.release()


def driver_clock(monkeypatch) -> list[float]:
    """The driver's monotonic clock made a list the test moves by hand: clock[0] seconds."""
    import types

    import rl_pbt.distributed.driver as driver_module

    clock = [1000.0]
    monkeypatch.setattr(
        driver_module,
        "time",
        types.SimpleNamespace(monotonic=lambda: clock[0], time=time.time, strftime=time.strftime),
    )
    return clock


def wait_for_ready_refs(monkeypatch) -> None:
    """ray.wait on FakeRefs: those marked ready have answered, at once."""
    monkeypatch.setattr(
        ray,
        "wait",
        lambda refs, num_returns=1, timeout=None: (
            [r for r in refs if r.ready],
            [r for r in refs if not r.ready],
        ),
    )


class Polled:
    """A node group's actor as the driver polls it: each poll answers at once, or not until
    `answers` is set."""

    def __init__(self, answers, value=None):
        self.answers, self.asked, self.refs = answers, 0, []
        self.value = {"finished": False, "status": None, "error": None} if value is None else value
        self.poll = self

    def remote(self):
        self.asked += 1
        ref = FakeRef(self.value)
        ref.ready = self.answers
        self.refs.append(ref)
        return ref


def test_a_group_that_does_not_answer_holds_up_neither_the_others_nor_pbt(
    tmp_path, monkeypatch, capsys
):
    """A group whose actor does not answer (Ray restarting it, or no node with room for it) is
    asked once and waited for in the background: the others' answers are taken every round,
    PBT leaves its members alone, its silence is logged once a minute, and past
    --ray_group_timeout_s the driver names it."""
    from rl_pbt.distributed.driver import PopulationDriver

    clock = driver_clock(monkeypatch)
    wait_for_ready_refs(monkeypatch)
    monkeypatch.setattr(ray, "get", lambda ref, timeout=None: ref.value)
    driver = PopulationDriver(driver_cfg(tmp_path, "--with_pbt", "--ray_group_timeout_s=100"))
    answering, silent = Polled(True), Polled(False)
    driver.actors = [answering, silent]
    taken = []
    driver._take_one = lambda g, poll, final=False: taken.append(g)
    asked = {}
    driver.pbt.update = lambda steps, ratings=None, copying=(), no_source=(): (
        asked.update(copying=set(copying)) or []
    )

    polls = driver._poll_groups()
    assert taken == [0] and polls[1] == {"finished": False, "status": None, "error": None}
    clock[0] += 5
    driver._poll_groups()
    assert taken == [0, 0] and (answering.asked, silent.asked) == (2, 1)  # asked once only
    driver._pbt_step()
    assert asked["copying"] == {2, 3}  # group 1's members: neither judged nor copied
    assert "has not answered" not in capsys.readouterr().out
    clock[0] += 60
    driver._poll_groups()
    driver._poll_groups()  # once a minute
    out = capsys.readouterr().out
    assert out.count("node group 1 has not answered for 65 s") == 1, out
    assert "--ray_group_timeout_s" in out and driver._silent_too_long() is None
    clock[0] += 40
    assert driver._silent_too_long() == 1
    silent.refs[0].ready = True  # back (Ray restarted it)
    driver._poll_groups()
    assert taken[-1] == 1 and silent.asked == 1 and not driver._silent_members()
    assert "node group 1 answers again after 105 s" in capsys.readouterr().out
    driver._poll_groups()
    assert silent.asked == 2 and driver._silent_too_long() is None
    before = answering.asked
    driver.finished = {0: 0}  # group 0 trained its budget: its last answer holds
    assert driver._poll_groups()[0] == answering.value and answering.asked == before
    driver.scalars.close()
    driver.run_lock.release()


class Stoppable:
    """A node group's actor at the stop: poll and stop answer at once, or not until
    `answers` is set."""

    def __init__(self, answers):
        self.poll, self.stop = Polled(answers), Polled(answers, 0)


def test_the_stop_waits_for_slow_groups_and_not_for_silent_ones(tmp_path, monkeypatch, capsys):
    """At the stop every group that answers is stopped (one that was only slow to answer the
    last round included) and its last answer taken; a group that does not answer is not waited
    for, nor are its checkpoints on their way; a group that finished keeps its status."""
    from rl_pbt.distributed.driver import PopulationDriver

    clock = driver_clock(monkeypatch)
    wait_for_ready_refs(monkeypatch)
    monkeypatch.setattr(ray, "get", lambda ref, timeout=None: ref.value)
    driver = PopulationDriver(
        driver_cfg(tmp_path, "--num_policies=6", "--policies_per_node=2", "--with_pbt")
    )
    slow, silent, done = Stoppable(False), Stoppable(False), Stoppable(True)
    driver.actors = [slow, silent, done]
    driver.heard = {0, 1, 2}
    taken = []
    driver._take_one = lambda g, poll, final=False: taken.append((g, final))
    driver.finished = {2: 0}
    driver._poll_groups()
    assert taken == [] and done.poll.asked == 0
    driver.fetching[(1, 0)] = ("checkpoint_000000010_1000.pth", FakeRef(None), clock[0])
    clock[0] += 70  # group 1 silent for over a minute; group 0 answers just now
    slow.poll.refs[0].ready = slow.poll.answers = slow.stop.answers = True
    assert driver._stop_groups() == [0, None, 0]
    assert taken == [(0, False), (0, True)] and slow.stop.asked == 1
    assert silent.stop.asked == 0 and done.stop.asked == 0 and not driver.fetching
    out = capsys.readouterr().out
    assert "node group 1 is not answering: not waited for at the stop" in out
    assert "checkpoint_000000010_1000.pth of node group 1 not fetched" in out
    driver.scalars.close()
    driver.run_lock.release()


def test_a_snapshot_is_not_sent_to_a_group_that_does_not_answer(tmp_path, monkeypatch):
    from rl_pbt.distributed.driver import PopulationDriver

    monkeypatch.setattr(ray, "get", lambda refs, timeout=None: [r.value for r in refs])
    driver = PopulationDriver(driver_cfg(tmp_path, "--num_policies=6", "--policies_per_node=2"))
    groups = [FakeGroup(), FakeGroup(), FakeGroup()]
    for a in groups:
        a.export_snapshot = a.add_snapshot = a
    driver.actors = groups
    driver.polling = {1: (FakeRef(None), time.monotonic() - 10)}  # group 1 silent for 10 s
    driver._share_snapshot(0, "snap:p0@1000", 0, 1000)
    assert groups[1].calls == [] and len(groups[2].calls) == 1 and driver.shared_snapshots == 1
    driver.scalars.close()
    driver.run_lock.release()


def group_poll(started_at: float, node_id=None, node_ip=None) -> dict:
    """A node group's answer to a poll, running, with nothing new."""
    return {
        "started_at": started_at,
        "node_id": node_id,
        "node_ip": node_ip,
        "waiting": False,
        "env_steps": [100, 100],
        "versions": [1, 1],
        "checkpoints": {},
        "episodes": [],
        "copy_latencies": [],
        "snapshots": [],
        "matches": [],
        "copying": [],
        "finished": False,
        "status": None,
        "error": None,
    }


def test_a_group_ray_restarted_gets_the_other_groups_snapshots_again(tmp_path, monkeypatch):
    """Frozen snapshots live in each group's memory: a group Ray restarts starts with an empty
    pool, and gets the other groups' newest snapshots (the pool's size of them) again."""
    from rl_pbt.distributed.driver import PopulationDriver

    monkeypatch.setattr(
        ray,
        "get",
        lambda refs, timeout=None: [r.value for r in refs] if isinstance(refs, list) else None,
    )
    driver = PopulationDriver(
        driver_cfg(tmp_path, "--num_policies=6", "--selfplay_snapshot_pool_size=2")
    )
    groups = [FakeGroup(), FakeGroup(), FakeGroup()]
    for a in groups:
        a.export_snapshot = a.add_snapshot = a
    driver.actors = groups
    driver._share_snapshot(0, "p0@1000", 0, 1000)
    driver._share_snapshot(2, "p1@1000", 5, 1000)
    driver._share_snapshot(1, "p0@2000", 2, 2000)  # the oldest leaves the pool of 2
    assert list(driver.shared_pool) == ["snap:m5@1000", "snap:m2@2000"]
    driver._take_one(1, group_poll(started_at=1.0))
    before = list(groups[1].calls)
    driver._take_one(1, group_poll(started_at=2.0))  # a new actor: Ray restarted the group
    again = groups[1].calls[len(before) :]
    assert [name for name, _ in again] == ["snap:m5@1000"]  # the others' only, oldest first
    assert again[0][1] is driver.shared_pool["snap:m5@1000"][1]  # the weights exported once
    driver.scalars.close()
    driver.run_lock.release()


def test_a_group_on_another_machine_is_named_and_a_new_local_ray_is_not(tmp_path, capsys):
    """A re-run with --ray_address=local starts a new Ray: every node id is new, on the same
    machine. Only a group whose machine (address) changed is named."""
    from rl_pbt.distributed.driver import PopulationDriver

    first = PopulationDriver(driver_cfg(tmp_path))
    first._take_one(0, group_poll(1.0, "aaaa", "10.0.0.1"))
    first._take_one(1, group_poll(1.0, "bbbb", "10.0.0.2"))
    first._save_population([0, 0])
    first.scalars.close()
    first.run_lock.release()
    again = PopulationDriver(driver_cfg(tmp_path))
    assert again.group_hosts == {"0": "10.0.0.1", "1": "10.0.0.2"}
    again._take_one(0, group_poll(2.0, "cccc", "10.0.0.1"))  # a new Ray on the same machine
    again._take_one(1, group_poll(2.0, "dddd", "10.0.0.3"))  # another machine
    out = capsys.readouterr().out
    assert "node group 0 now runs" not in out
    assert "node group 1 now runs on 10.0.0.3, not on 10.0.0.2" in out, out
    assert again.group_nodes == {"0": "cccc", "1": "dddd"}
    again.scalars.close()
    again.run_lock.release()


def test_groups_take_a_seed_only_from_a_seeded_run():
    """Without --seed every start of a group draws its own (a resume then finds the same flag
    as the run before, not a changed seed); with one, each group gets its own derived seed."""
    from rl_pbt.distributed.group import group_cfg

    unseeded = parse_cfg(["--env=CartPole-v1"]).to_dict()
    assert group_cfg(unseeded, 0, [0, 1], 123).seed is None
    seeded = parse_cfg(["--env=CartPole-v1", "--seed=7"]).to_dict()
    seeds = {group_cfg(seeded, g, [0, 1], 7).seed for g in range(3)}
    assert len(seeds) == 3 and None not in seeds
    assert group_cfg(seeded, 1, [0, 1], 7).seed == group_cfg(seeded, 1, [0, 1], 7).seed


def test_groups_ray_cannot_place_are_named_and_not_waited_for(tmp_path, monkeypatch):
    """Ray has no room for a group's actor (its --ray_cpus_per_group or --ray_gpus_per_group
    are more than any node has free): the start names it and the flags, and the stop does not
    wait for it."""
    from rl_pbt.distributed.driver import GroupsNotPlaced, PopulationDriver

    wait_for_ready_refs(monkeypatch)
    driver = PopulationDriver(driver_cfg(tmp_path, "--ray_gpus_per_group=2"))
    placed, unplaced = FakeGroup(), FakeGroup()
    placed.held, unplaced.held = Polled(True, {0: None, 1: None}), Polled(False, {0: None, 1: None})
    driver.actors = [placed, unplaced]
    with pytest.raises(
        GroupsNotPlaced, match=r"node group\(s\) 1 did not start.*--ray_gpus_per_group=2"
    ):
        driver._start_groups([0, 1])
    assert driver.heard == {0} and placed.calls == [] and unplaced.calls == []
    driver.scalars.close()
    driver.run_lock.release()


def test_the_status_line_gives_the_rate_and_the_time_left(tmp_path, monkeypatch, capsys):
    from rl_pbt.distributed.driver import PopulationDriver

    clock = driver_clock(monkeypatch)
    driver = PopulationDriver(driver_cfg(tmp_path, "--train_for_env_steps=100000"))
    driver.env_steps = [10_000, 20_000, 30_000, 40_000]
    assert "100,000 env steps in all, 10% of the budget (slowest member 10,000), ETA ?" in (
        driver._status_line(5.0)
    )
    clock[0] += 10
    driver.env_steps = [15_000, 25_000, 35_000, 45_000]  # 2,000 env steps/s, 500 the slowest
    line = driver._status_line(15.0)
    assert "120,000 env steps in all (2,000/s), 15% of the budget" in line, line
    assert "ETA 2m50s" in line, line  # 85,000 env steps left for the slowest at 500/s
    driver.scalars.close()
    driver.run_lock.release()
    limited = PopulationDriver(driver_cfg(tmp_path, "--train_for_seconds=60"))
    assert "ETA <=55s (time limit)" in limited._status_line(5.0)
    limited.scalars.close()
    limited.run_lock.release()


def test_ray_address_without_ray_is_one_line_naming_the_extra(tmp_path, monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a)
    )
    code = train_cli.main(
        ["--env=CartPole-v1", "--ray_address=auto", f"--train_dir={tmp_path}", "--experiment=x"]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "--ray_address=auto needs Ray" in err and '"rl_pbt[ray]"' in err
    assert not os.path.exists(os.path.join(tmp_path, "x"))


def test_a_run_without_ray_address_does_not_import_ray(tmp_path):
    code = (
        "import sys, envs\n"
        "from rl_pbt import parse_cfg, train\n"
        f"cfg = parse_cfg(['--env=CartPole-v1', '--serial_mode', '--train_for_env_steps=300', "
        f"'--train_dir={tmp_path}', '--experiment=plain'])\n"
        "assert train(cfg) == 0\n"
        "assert 'ray' not in sys.modules, 'ray was imported'\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_group_that_ended_before_its_pbt_values_came_is_not_a_problem(
    tmp_path, monkeypatch, capsys
):
    """A re-run with nothing left to train: the groups end at once, and the PBT values the
    driver sends them reach a run that has ended. Not worth a line (the poll says how each
    ended); any other failure to take them is."""
    from rl_pbt.distributed.driver import PopulationDriver
    from rl_pbt.runtime.control import GroupControl, RunEnded

    control = GroupControl()  # the group's side: a command its ended run never served
    reply = control.submit("apply")
    control.fail_all("the node group's run ended")
    with pytest.raises(RunEnded, match="run ended"):
        reply.wait(1.0)

    driver = PopulationDriver(driver_cfg(tmp_path, "--with_pbt"))
    group = FakeGroup()
    group.apply = group
    driver.actors = [group, group]
    for error in (RunEnded("node group 0 has stopped (status 0)"), RuntimeError("disk full")):

        def get(refs, timeout=None, error=error):
            raise error

        monkeypatch.setattr(ray, "get", get)
        driver._send_values(0)
    out = capsys.readouterr().out
    assert "has stopped" not in out
    assert "node group 0 did not take its PBT values: disk full" in out, out
    driver.scalars.close()
    driver.run_lock.release()


def test_with_wandb_the_driver_logs_the_populations_scalars_and_pbt(tmp_path, monkeypatch):
    """--with_wandb over Ray: the driver logs each member's scalars and the PBT events (the
    node groups log nothing to W&B; nothing was sent at all)."""
    from types import SimpleNamespace

    from rl_pbt.distributed import driver as driver_module
    from rl_pbt.logging import wandb_log

    logged, finished = [], []
    run = SimpleNamespace(
        id="abc123",
        define_metric=lambda *a, **k: None,
        log=logged.append,
        finish=lambda: finished.append(True),
    )
    fake = SimpleNamespace(init=lambda **k: run, Table=lambda **k: ("table", k), Image=str)
    monkeypatch.setattr(wandb_log, "_import_wandb", lambda: fake)
    driver = driver_module.PopulationDriver(driver_cfg(tmp_path, "--with_pbt", "--with_wandb"))
    driver.env_steps = [1000, 2000, 3000, 4000]
    driver.recent = [[0.5], [0.25], [], [1.0]]
    driver._write_summaries()
    assert logged[-1]["p1/env_steps"] == 2000 and logged[-1]["p1/episode/true_objective"] == 0.25
    assert logged[-1]["p3/population/node_group"] == 1.0
    decision = SimpleNamespace(policy_id=2, source_id=0, hparams={}, shaping=None, log_line="x")
    driver.pbt.update = lambda *a, **k: [decision]
    driver.actors = [FakeGroup(), FakeGroup()]
    driver._copy_across = lambda d, target: None
    driver._pbt_step()
    assert logged[-1] == {"p2/env_steps": 3000, "p2/pbt/copied_from": 0}
    driver.wandb.close()
    assert finished == [True] and logged[-1]["pbt/events"][0] == "table"
    driver.scalars.close()
    driver.run_lock.release()


def test_returns_of_an_env_without_objective_are_logged_as_returns(tmp_path):
    """A group reports an episode's return where its env gives no true_objective (CartPole):
    the population's scalar log names it a return, as a run on one machine does (it was logged
    as the true objective, and the report titled its plot so)."""
    from rl_pbt.distributed.driver import PopulationDriver

    driver = PopulationDriver(driver_cfg(tmp_path))
    driver.started_at[1] = 1.0
    poll = group_poll(started_at=1.0)
    poll["episodes"] = [(0, 21.0, True), (1, 0.5, False)]
    driver._take_one(1, poll)
    assert driver._scalars_of(2)["episode/reward"] == 21.0
    assert "episode/true_objective" not in driver._scalars_of(2)
    assert driver._scalars_of(3)["episode/true_objective"] == 0.5
    driver.scalars.close()
    driver.run_lock.release()


class ApplyingGroup:
    """A node group's actor as far as `apply` goes: the values each member was sent."""

    def __init__(self):
        self.applied = []
        self.apply = self

    def remote(self, member, source, hparams, shaping):
        self.applied.append((member, source, hparams, shaping))
        return FakeRef(None)


def test_members_without_pbt_get_their_values_over_ray(tmp_path, monkeypatch):
    """--policy_values without --with_pbt reached no member over Ray (each trained with the
    defaults; on one machine each gets its own); a PBT run resumed without --with_pbt lost the
    shaping PBT had given its members (on one machine they keep it)."""
    from rl_pbt.distributed.driver import PopulationDriver
    from rl_pbt.logging.files import policy_shaping_path

    monkeypatch.setattr(ray, "get", lambda refs, timeout=None: [r.value for r in refs])
    values = tmp_path / "values.json"
    values.write_text('[{}, {"learning_rate": 0.01}, {}, {"rew.kill": 2.0}]')
    arena = ["--env=arena_duel", "--experiment=v"]
    driver = PopulationDriver(driver_cfg(tmp_path, *arena, f"--policy_values={values}"))
    driver.actors = [ApplyingGroup(), ApplyingGroup()]
    for g in (0, 1):
        driver._take_one(g, group_poll(1.0))
    assert driver.actors[0].applied == [(1, None, {"learning_rate": 0.01}, None)]
    ((member, _, hparams, shaping),) = driver.actors[1].applied
    assert member == 1 and hparams == {} and shaping["kill"] == 2.0
    driver.scalars.close()
    driver.run_lock.release()

    pbt = PopulationDriver(driver_cfg(tmp_path, *arena, "--with_pbt", "--experiment=p"))
    pbt.scalars.close()
    pbt.run_lock.release()
    path = policy_shaping_path(str(tmp_path / "p"), 3)
    given = json.loads(open(path).read())
    given["kill"] = 3.0  # what PBT gave member 3
    open(path, "w").write(json.dumps(given))
    again = PopulationDriver(driver_cfg(tmp_path, *arena, "--experiment=p"))  # no PBT now
    again.actors = [ApplyingGroup(), ApplyingGroup()]
    again._take_one(1, group_poll(1.0))
    sent = {m: shaping for m, _, _, shaping in again.actors[1].applied}
    member2 = json.loads(open(policy_shaping_path(str(tmp_path / "p"), 2)).read())
    assert sent[1]["kill"] == 3.0 and sent[0] == member2
    again.scalars.close()
    again.run_lock.release()


def test_the_driver_counts_what_a_restarted_group_resumed_from(tmp_path, monkeypatch):
    """After Ray restarted a group from older checkpoints the driver kept the higher counts
    (summary.json, the status line, PBT's periods) its members no longer had."""
    from rl_pbt.distributed.driver import PopulationDriver

    monkeypatch.setattr(ray, "get", lambda refs, timeout=None: [r.value for r in refs])
    driver = PopulationDriver(driver_cfg(tmp_path))
    driver.actors = [ApplyingGroup(), ApplyingGroup()]
    poll = group_poll(1.0)
    poll["env_steps"] = [5000, 5000]
    driver._take_one(0, poll)
    restarted = group_poll(2.0)
    restarted["env_steps"] = [0, 0]  # its learners have not loaded their checkpoints yet
    driver._take_one(0, restarted)
    assert driver.env_steps[:2] == [5000, 5000]
    restarted["env_steps"] = [3100, 3200]
    driver._take_one(0, restarted)
    assert driver.env_steps[:2] == [3100, 3200]
    assert driver._summary()["policies"]["0"]["env_steps"] == 3100
    driver.scalars.close()
    driver.run_lock.release()


def test_a_member_copied_in_its_group_sends_no_result_of_its_old_weights(tmp_path):
    """The driver clears a member's window at its copy decision; the results its group had
    not yet handed over, and (for a copy from another group) those until the copy lands, were
    its old weights' and filled the fresh window (22 of 24 values in a run on two groups)."""
    import time

    from rl_pbt.runtime.control import Apply, GroupControl, Import
    from rl_pbt.runtime.runner import Runner

    runner = Runner(
        parse_cfg(["--env=CartPole-v1", "--serial_mode", "--num_policies=3", "--num_workers=1",
                   "--num_envs_per_worker=2", "--rollout=8", "--batch_size=16",
                   "--encoder_mlp_layers", "8", f"--train_dir={tmp_path}", "--experiment=g"])
    )  # fmt: skip
    runner.control = control = GroupControl()
    for p in range(3):
        control.record_episode(p, 10.0 + p)
    control.record_match([1], [2], 1.0)
    control.record_match([0], [2], 0.0)
    control.submit(Apply(1, 0, {}, None))  # a copy inside the group: 0 -> 1
    state = runner.params.read_flat(0)[0]  # any state of the right size will do here
    control.submit(Import(2, state, {}, None, time.time()))  # a copy from another group
    runner._serve_control()
    records = control.take_records()
    assert records.episodes == [(0, 10.0, False)]
    assert records.matches == []  # both games had a copied member in them
    assert {1, 2} <= set(runner.copying)  # their results wait for the copies to land
    assert runner._counts_for_pbt(0) and not runner._counts_for_pbt(2)
    runner.stats.close()
    runner.run_lock.release()


def test_a_copy_that_fails_is_taken_back(tmp_path, monkeypatch):
    """A copy across groups whose target group died in the middle was kept as made: the
    lineage said "replace", the member's window was emptied and, once its group was back, it
    was sent the source's values to train with on its own weights."""
    from rl_pbt.distributed.driver import PopulationDriver
    from rl_pbt.pbt.lineage import read_events

    class Ref:
        def __init__(self, value=None, error=None):
            self.value, self.error = value, error

    class Method:
        def __init__(self, fn):
            self.remote = fn

    class Actor:
        def __init__(self, dead=False, error=None):
            self.sent = []
            self.apply = Method(lambda *a: (self.sent.append(a), Ref())[1])
            self.export = Method(lambda m: Ref(("state", m)))
            error = error or ray.exceptions.RayActorError()
            self.import_state = Method(lambda *a: Ref(error=error) if dead else Ref((True, 0.0)))

    def get(ref, timeout=None):
        if isinstance(ref, list):
            return [get(r) for r in ref]
        if ref.error is not None:
            raise ref.error
        return ref.value

    monkeypatch.setattr(ray, "get", get)
    driver = PopulationDriver(
        driver_cfg(tmp_path, "--with_pbt", "--pbt_period_env_steps=1000", "--pbt_start_mutation=0",
                   "--pbt_replace_fraction=0.25", "--pbt_replace_reward_gap=0",
                   "--pbt_mutation_rate=0", "--seed=1", "--learning_rate=1e-4")
    )  # fmt: skip
    driver.actors = [Actor(), Actor(dead=True)]
    driver.pbt.hparams[0]["learning_rate"] = 5e-4
    for member, objective in ((0, 1.0), (1, 0.9), (2, 0.8), (3, 0.0)):
        for _ in range(10):
            driver.pbt.record_episode(member, objective)
    before = [e for e in read_events(driver.pbt.lineage_path) if e["policy"] == 3]
    driver.env_steps = [2000] * 4
    driver._pbt_step()
    assert driver._failed_copies == 1  # p3 <- p0 was decided, and its group was gone
    assert [e for e in read_events(driver.pbt.lineage_path) if e["policy"] == 3] == before
    assert driver.pbt.hparams[3]["learning_rate"] == 1e-4
    assert list(driver.pbt._windows[3]) == [0.0] * 10
    driver.actors[1] = Actor()  # back, restarted by Ray: it gets its own values
    driver._send_values(1)
    assert [(m, hparams["learning_rate"]) for m, _, hparams, _ in driver.actors[1].sent] == [
        (0, 1e-4),
        (1, 1e-4),
    ]
    # no answer in time from a live group: it may still carry the copy out, which stands
    driver.actors[1] = Actor(dead=True, error=ray.exceptions.GetTimeoutError("busy"))
    for _ in range(10):
        driver.pbt.record_episode(3, 0.0)
    driver.env_steps = [3000] * 4
    driver._pbt_step()
    replaced = [e for e in read_events(driver.pbt.lineage_path) if e["action"] == "replace"]
    assert [e["policy"] for e in replaced] == [3] and driver._failed_copies == 2
    driver.scalars.close()
    driver.run_lock.release()
