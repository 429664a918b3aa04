"""Serial mode: rollout -> learner through the real components, in one process."""

import json

import numpy as np
import pytest

from rl_pbt import parse_cfg, register_env
from rl_pbt.learning.learner import Learner
from rl_pbt.learning.learner_process import LearnerHost
from rl_pbt.runtime.messages import SetRewardShaping, WorkerReport, drain
from rl_pbt.runtime.runner import Runner, _MergedQueue
from tests.scripted_envs import TaggedBatch, TaggedMultiAgentEnv

ENVS: dict[int, TaggedMultiAgentEnv] = {}


def make_tagged(name, cfg, env_config, render_mode=None):
    env = TaggedMultiAgentEnv(env_config["env_id"])
    if env_config["worker_index"] >= 0:  # not the runner's probe
        ENVS[env_config["env_id"]] = env
    return env


def make_tagged_batch(name, cfg, env_configs):
    return TaggedBatch([make_tagged(name, cfg, c) for c in env_configs])


register_env("tagged_ma", make_tagged)
register_env("tagged_ma_batch", make_tagged, make_batch_func=make_tagged_batch)


def build(tmp_path, extra=(), env="tagged_ma"):
    cfg = parse_cfg(
        [
            f"--env={env}",
            "--serial_mode",
            "--num_policies=3",
            "--num_workers=2",
            "--num_envs_per_worker=2",
            "--rollout=8",
            "--batch_size=16",
            "--encoder_mlp_layers",
            "16",
            f"--train_dir={tmp_path}",
            "--experiment=pipe",
            "--normalize_input=False",
            "--seed=3",
            *extra,
        ]
    )
    runner = Runner(cfg)
    received: dict[int, list] = {p: [] for p in range(cfg.num_policies)}

    class RecordingLearner(Learner):
        def add(self, slots):
            super().add(slots)
            b = self.buffers
            for s in slots:
                valid = b.valid[s].numpy()
                received[self.policy_id].append(
                    (
                        b.obs["obs"][s, :-1].numpy()[valid],
                        b.policy_id[s].numpy()[valid],
                        b.rewards[s].numpy(),
                        b.log_probs[s].numpy(),
                        b.values[s].numpy(),
                    )
                )

    learners = {
        p: RecordingLearner(
            cfg,
            p,
            runner.make_model(),
            runner.buffers,
            runner.pool,
            runner.params,
            "cpu",
            runner.exp_dir,
        )
        for p in range(cfg.num_policies)
    }
    host = LearnerHost(
        learners, _MergedQueue(runner.learner_queues), runner.learner_queues, runner.report_queue
    )
    host.start(resume=False)
    runner.serve_in_process(learners)
    seats_log: dict[tuple[int, int], list] = {}
    workers = []
    for w in range(cfg.num_workers):
        worker = runner._worker_factory(w, lambda: False, blocking=False)
        original = worker._assign_seats

        def logged(e, worker=worker, original=original):
            original(e)
            env = ENVS[worker.idx * cfg.num_envs_per_worker + e]
            n = worker.num_agents
            seats_log[(env.env_id, env.episode)] = worker.seat[e * n : (e + 1) * n]

        worker._assign_seats = logged
        for e in range(len(worker.envs)):  # seats of the first episodes were drawn in __init__
            env = ENVS[worker.idx * cfg.num_envs_per_worker + e]
            seats_log[(env.env_id, env.episode)] = worker.seat[e * 3 : (e + 1) * 3]
        workers.append(worker)
    return cfg, runner, host, workers, received, seats_log


@pytest.mark.parametrize("inference", ["local", "device"])
@pytest.mark.parametrize("env", ["tagged_ma", "tagged_ma_batch"])
def test_every_sample_reaches_the_learner_of_its_own_policy(tmp_path, env, inference):
    ENVS.clear()
    cfg, runner, host, workers, received, seats_log = build(
        tmp_path, env=env, extra=[f"--inference={inference}"]
    )
    assert (workers[0].batch is not None) == (env == "tagged_ma_batch")
    # the inference server's envs step in two groups (one env each); a batched env in one
    assert workers[0].splits == (2 if inference == "device" and env == "tagged_ma" else 1)
    for _ in range(400):
        for worker in workers:
            worker.step()
        host.poll(timeout=0.0)
    counts = {p: 0 for p in range(cfg.num_policies)}
    for p, items in received.items():
        for obs, pids, rewards, logp, values in items:
            assert (pids == p).all()
            # finite data wherever it is read: no sentinel survived
            assert np.isfinite(rewards).all() and np.isfinite(logp).all()
            assert np.isfinite(values).all()
            for env_id, episode, agent, _ in obs.astype(int):
                assert seats_log[(env_id, episode)][agent] == p
            counts[p] += len(obs)
    assert all(c > 0 for c in counts.values()), counts
    # what the envs emitted per policy = what learners received + what is still in flight
    emitted = {p: 0 for p in range(cfg.num_policies)}
    for env in ENVS.values():
        for (episode, agent), n in env.emitted.items():
            emitted[seats_log[(env.env_id, episode)][agent]] += n
    in_flight = {p: 0 for p in range(cfg.num_policies)}
    for worker in workers:
        for i, seat in enumerate(worker.seat):
            in_flight[seat] += int(worker.t[i])
        for i in worker.pending_bootstrap:
            in_flight[worker.seat[i]] += cfg.rollout
        for p, parked in worker.parked.items():  # partial trajectories waiting to be continued
            in_flight[p] += sum(t for _, t in parked)
    for p in emitted:
        assert emitted[p] == counts[p] + in_flight[p], (p, emitted, counts, in_flight)
    # every episode names the weights it began on, as PBT and Elo read them (with the
    # inference server they were all -1, "unknown", so games of replaced weights counted)
    reports = [m for m in drain(runner.report_queue) if isinstance(m, WorkerReport)]
    versions = [ep.policy_version for r in reports for ep in r.episodes]
    versions += [v for r in reports for match in r.matches for v in match.versions]
    assert len(versions) > 20 and min(versions) >= 0 and max(versions) > 0, versions


def test_learner_trains_and_publishes_new_versions(tmp_path):
    cfg, runner, host, workers, received, _ = build(tmp_path)
    for _ in range(200):
        for worker in workers:
            worker.step()
        host.poll(timeout=0.0)
    versions = [runner.params.current_version(p) for p in range(cfg.num_policies)]
    assert all(v > 0 for v in versions), versions
    # workers act with the published weights
    for worker in workers:
        for p in worker.models:
            v = worker.model_version[p]
            assert v > 0 and v <= runner.params.current_version(p)


@pytest.mark.parametrize("env", ["tagged_ma", "tagged_ma_batch"])
def test_reward_shaping_reaches_envs_before_next_episode(tmp_path, env):
    ENVS.clear()
    cfg, runner, host, workers, _, seats_log = build(tmp_path, env=env)
    for worker in workers:
        worker.handle(SetRewardShaping(1, {"bonus": 5.0}))
    for _ in range(120):  # every env finishes at least one episode (<= 40 steps)
        for worker in workers:
            worker.step()
        host.poll(timeout=0.0)
    seen = 0
    for env in ENVS.values():
        for shaping, _agent in env.shaping_calls:
            assert shaping in ({"bonus": 5.0}, {"bonus": 0.0})  # policy 1's, or the default
            seen += shaping == {"bonus": 5.0}
        # current episode: agents played by policy 1 carry the bonus, others do not
        seats = seats_log[(env.env_id, env.episode)]
        for agent, p in enumerate(seats):
            assert env.bonus[agent] == (5.0 if p == 1 else 0.0)
    assert seen > 0


def test_policy_values_reach_learners_and_envs_without_pbt(tmp_path):
    ENVS.clear()
    values = tmp_path / "values.json"
    values.write_text(json.dumps([{}, {"rew.bonus": 5.0}, {"learning_rate": 0.003, "gamma": 0.95}]))
    cfg, runner, host, workers, _, seats_log = build(tmp_path, [f"--policy_values={values}"])
    # the first episodes already play with the values: workers know them before any reset
    first = 0
    for env in ENVS.values():
        for agent, p in enumerate(seats_log[(env.env_id, 0)]):
            assert env.bonus[agent] == (5.0 if p == 1 else 0.0)
            first += p == 1
    assert first > 0
    runner._initial_messages()  # what _run_serial and _run_parallel send first
    for _ in range(120):  # every env finishes at least one episode (<= 40 steps)
        for w, worker in enumerate(workers):
            for msg in drain(runner.worker_queues[w]):
                worker.handle(msg)
            worker.step()
        host.poll(timeout=0.0)
    rates = [host.learners[p].hp["learning_rate"] for p in range(3)]
    assert rates == [cfg.learning_rate, cfg.learning_rate, 0.003]
    assert [host.learners[p].hp["gamma"] for p in range(3)] == [cfg.gamma, cfg.gamma, 0.95]
    assert host.learners[2].optimizer.param_groups[0]["lr"] == 0.003
    shaped = 0
    for env in ENVS.values():
        seats = seats_log[(env.env_id, env.episode)]
        for agent, p in enumerate(seats):
            assert env.bonus[agent] == (5.0 if p == 1 else 0.0)
            shaped += p == 1
    assert shaped > 0  # some seat of a current episode is policy 1's


def test_pbt_members_start_from_policy_values(tmp_path):
    ENVS.clear()
    values = tmp_path / "values.json"
    values.write_text(json.dumps([{}, {"rew.bonus": 2.0, "learning_rate": 0.002}, {}]))
    flags = [f"--policy_values={values}", "--with_pbt", "--pbt_start_mutation=1000000"]
    cfg, runner, host, workers, _, seats_log = build(tmp_path, flags)
    assert runner.pbt.hparams[1]["learning_rate"] == 0.002
    assert runner.pbt.shaping[1] == {"bonus": 2.0} and runner.pbt.shaping[2] == {"bonus": 0.0}
    for env in ENVS.values():  # the first episodes play with the starting shaping
        for agent, p in enumerate(seats_log[(env.env_id, 0)]):
            assert env.bonus[agent] == (2.0 if p == 1 else 0.0)
    runner._initial_messages()
    host.poll(timeout=0.0)
    assert host.learners[1].hp["learning_rate"] == 0.002


def test_a_rollout_worker_built_again_starts_from_zero_rnn_states(tmp_path):
    """With the inference server, a worker's RNN states live in a shared row that outlives it:
    one built again in its place (a restart) starts its episodes from zero states, as local
    acting does, not from its predecessor's."""
    ENVS.clear()
    cfg, runner, host, workers, _, _ = build(
        tmp_path, extra=["--inference=device", "--use_rnn", "--rnn_size=8"]
    )
    for _ in range(30):
        for worker in workers:
            worker.step()
        host.poll(timeout=0.0)
    assert workers[0].h.abs().sum() > 0
    again = runner._worker_factory(0, lambda: False, blocking=False)
    assert again.h.abs().sum() == 0
