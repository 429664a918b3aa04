"""A PBT copy: the target takes the source's weights, optimiser and normalisers, then its
own new hyperparameters; experience from before the copy is masked out."""

import time

import pytest
import torch

from rl_pbt import parse_cfg
from rl_pbt.learning.checkpoints import latest_checkpoint, read_checkpoint
from rl_pbt.learning.learner_process import LearnerHost
from rl_pbt.memory.buffers import FREE
from rl_pbt.runtime.messages import ApplyPBT, ExportState, LearnerEvent, drain
from rl_pbt.runtime.runner import Runner, _MergedQueue
from rl_pbt.sampling.matchmaking import LeastServedMatchmaker


def _serial_setup(tmp_path, *extra: str):
    """Two CartPole policies in serial mode: (cfg, runner, learners, learner host, worker)."""
    cfg = parse_cfg(
        [
            "--env=CartPole-v1",
            "--serial_mode",
            "--num_policies=2",
            "--num_workers=1",
            "--num_envs_per_worker=4",
            "--rollout=8",
            "--batch_size=32",
            "--encoder_mlp_layers",
            "16",
            f"--train_dir={tmp_path}",
            "--experiment=copy",
            "--max_policy_lag=50",
            "--seed=0",
            *extra,
        ]
    )
    runner = Runner(cfg)
    learners = {p: runner._learner_factory(p) for p in range(2)}
    host = LearnerHost(
        learners, _MergedQueue(runner.learner_queues), runner.learner_queues, runner.report_queue
    )
    host.start(resume=False)
    worker = runner._worker_factory(0, lambda: False, blocking=False)
    return cfg, runner, learners, host, worker


def test_copy_then_own_hparams(tmp_path):
    cfg, runner, learners, host, worker = _serial_setup(tmp_path)
    for _ in range(150):
        worker.step()
        host.poll(timeout=0.0)
    src, dst = learners[0], learners[1]
    for _ in range(500):  # until the target holds experience from its old weights, untrained
        if dst.pending:
            break
        worker.step()
        host.poll(timeout=0.0)
    assert dst.pending
    assert src.version > 0 and dst.version > 0
    assert any(
        not torch.equal(a, b)
        for a, b in zip(src.model.state_dict().values(), dst.model.state_dict().values())
    )
    src_state = {k: v.clone() for k, v in src.model.state_dict().items()}
    src_moments = [src.optimizer.state[p]["exp_avg"].clone() for p in src.model.parameters()]
    old_dst_version = dst.version
    new_hp = dict(src.hp, learning_rate=0.0123, exploration_loss_coeff=0.042)

    decided = time.time()
    host.handle(ExportState(0, ApplyPBT(1, 0, new_hp, decided_at=decided)))
    for msg in drain(runner.learner_queues[1]):  # the forwarded ApplyPBT
        host.handle(msg)

    for k, v in dst.model.state_dict().items():
        torch.testing.assert_close(v, src_state[k], rtol=0, atol=0)
    for p, m in zip(dst.model.parameters(), src_moments):
        torch.testing.assert_close(dst.optimizer.state[p]["exp_avg"], m, rtol=0, atol=0)
    assert dst.hp["learning_rate"] == 0.0123 and dst.hp["exploration_loss_coeff"] == 0.042
    assert all(g["lr"] == 0.0123 for g in dst.optimizer.param_groups)
    # every sample produced before the copy is now older than max_policy_lag
    assert dst.version > old_dst_version + cfg.max_policy_lag
    # and the published weights are the copied ones
    assert runner.params.current_version(1) == dst.version
    # and saved at once: PBT's state file holds the copy, so a restart must find its weights
    saved = read_checkpoint(latest_checkpoint(dst.checkpoint_folder()))
    assert saved["version"] == dst.version and saved["hparams"]["learning_rate"] == 0.0123
    for k, v in saved["model"].items():
        torch.testing.assert_close(v, src_state[k], rtol=0, atol=0)
    events = [m for m in drain(runner.report_queue) if isinstance(m, LearnerEvent)]
    assert any(e.kind == "pbt_applied" and e.policy_id == 1 for e in events)
    # a second copy decided before the target's first update replaces the first: the latency
    # reported counts from its own decision, which travels with the copy (the runner kept one
    # decision time per member: a decision made before it read the report of the member's
    # last copy took that copy's place, whose latencies then came out as 0.0 s)
    decided = time.time()
    host.handle(ExportState(0, ApplyPBT(1, 0, new_hp, decided_at=decided)))
    for msg in drain(runner.learner_queues[1]):
        host.handle(msg)

    # Trajectories from before the copy are released untrained (their steps still counted);
    # the first update after the copy is on fresh experience.
    for _ in range(20):  # until experience from before the copy reaches the target
        if dst.pending:
            break
        worker.step()
        for msg in drain(runner.learner_queues[1]):
            host.handle(msg)
    b = runner.buffers

    def fresh(s):  # a sample the target may train on: its own, within max_policy_lag
        own = (b.policy_id[s] == 1) & b.valid[s]
        return bool((own & (dst.version - b.policy_version[s] <= cfg.max_policy_lag)).any())

    stale = [s for s in dst.pending if not fresh(s)]
    kept = [s for s in dst.pending if fresh(s)]  # begun before the copy, finished after it
    assert stale, "no trajectory from before the copy reached the target"
    own = sum(int(((b.policy_id[s] == 1) & b.valid[s]).sum()) for s in stale)
    steps_before, version_before = dst.env_steps, dst.version
    dst._drop_stale()
    assert dst.pending == kept and dst.version == version_before
    assert dst.env_steps == steps_before + own * cfg.env_frameskip
    assert all(int(runner.buffers.owner[s]) == FREE for s in stale)
    for _ in range(300):
        worker.step()
        host.poll(timeout=0.0)
        if dst.version > version_before:
            break
    assert dst.version > version_before and dst.copied_at is None
    trained = [
        m for m in drain(runner.report_queue) if isinstance(m, LearnerEvent) and m.policy_id == 1
    ]
    timing = [e.data for e in trained if e.kind == "copy_trained"]
    assert len(timing) == 1
    # decided, copied, then the first trajectory from the copied weights, then the first
    # update on it
    assert timing[0]["decided"] == decided
    assert decided <= timing[0]["copied"] <= timing[0]["fresh"] <= timing[0]["trained"]


def test_copy_into_an_unseated_policy_is_noticed_at_once(tmp_path):
    """With policy focus, a worker may play none of a policy's episodes for a long time. A
    PBT copy into such a policy must still reach the matchmaker on the next step, so that the
    target's learner soon gets experience from its new weights."""
    # the first focus policy keeps every env
    cfg, runner, learners, host, worker = _serial_setup(
        tmp_path, "--policy_focus_env_steps=1000000"
    )
    # the parallel runner's matchmaker for single-agent envs (serial mode uses a uniform one)
    mm = LeastServedMatchmaker([0, 1], focus_steps=cfg.policy_focus_env_steps)
    worker.matchmaker, worker.prefer, worker.count_steps = mm, mm.prefer, mm.record_steps
    for _ in range(2000):  # until every episode has restarted with the focus policy
        worker.step()
        host.poll(timeout=0.0)
        if mm.focus is not None and all(s == mm.focus for s in worker.seat):
            break
    focus = mm.focus
    other = 1 - focus
    assert all(s == focus for s in worker.seat) and worker.model_seq[other] >= 0
    assert not mm.preferred

    host.handle(ExportState(focus, ApplyPBT(other, focus, dict(learners[focus].hp))))
    for msg in drain(runner.learner_queues[other]):
        host.handle(msg)
    worker.step()
    assert other in mm.preferred  # noticed while it was unseated
    for _ in range(3):  # noticed once: no repeated preference as it gets seated
        worker.step()
    until = mm.preferred.get(other)
    worker.step()
    assert mm.preferred.get(other) in (until, None)


def test_pbt_counts_only_episodes_of_the_copied_weights(tmp_path):
    """After a copy is decided, the target's episodes stay out of its PBT record until the
    copied weights land, and then those begun on the replaced weights stay out too; the
    target's Elo rating follows the weights when they land. A member whose copy is on its
    way is no source for another."""
    from rl_pbt.runtime.messages import EpisodeStats, MatchResult, WorkerReport

    cfg, runner, learners, host, worker = _serial_setup(
        tmp_path, "--with_pbt", "--pbt_start_mutation=0", "--pbt_period_env_steps=100000"
    )
    for _ in range(60):  # episodes of the real worker carry the version they began with
        worker.step()
        host.poll(timeout=0.0)
    worker._maybe_report(force=True)
    reports = [m for m in drain(runner.report_queue) if isinstance(m, WorkerReport)]
    episodes = [ep for r in reports for ep in r.episodes]
    assert episodes and all(ep.policy_version >= 0 for ep in episodes)

    runner.elo.set_rating(0, 1500.0)
    runner.elo.set_rating(1, 1000.0)
    runner._apply_decision(1, 0, dict(learners[1].hp), None)
    assert runner.copying == {1: 0} and runner.elo.rating(1) == 1000.0

    def report(version, value):
        ep = EpisodeStats(1, value, 10, value, policy_version=version)
        runner.report_queue.put(WorkerReport(0, [ep], [], 10))
        runner._consume_reports()

    before = len(runner.pbt._windows[1])
    shown = list(runner.stats.returns[1])  # the status line's window of the old weights
    total = runner.stats.episodes_total[1]
    report(5, 0.25)  # while the copy is on its way
    assert len(runner.pbt._windows[1]) == before
    assert list(runner.stats.returns[1]) == shown
    assert runner.stats.episodes_total[1] == total + 1
    assert 1 not in {d.source_id for d in runner.pbt.update([10**6, 10**6], copying={1})}

    host.handle(drain(runner.learner_queues[0])[0])  # the source exports, forwards the copy
    for msg in drain(runner.learner_queues[1]):
        host.handle(msg)
    runner._consume_reports()
    landed = learners[1].version
    assert runner.copying == {} and runner.copied_version == {1: landed}
    assert runner.elo.rating(1) == 1500.0
    assert len(runner.stats.returns[1]) == 0 and len(runner.stats.objectives[1]) == 0
    report(landed - 1, 0.5)  # began on the replaced weights
    assert len(runner.pbt._windows[1]) == before
    assert len(runner.stats.returns[1]) == 0
    report(landed, 0.75)
    assert list(runner.pbt._windows[1])[-1] == 0.75
    # the status line and summary.json show the copy's own episodes only
    assert list(runner.stats.returns[1]) == [0.75] == list(runner.stats.objectives[1])
    assert runner.stats.episodes_total[1] == total + 3

    # games: one begun on the replaced weights rates nobody; one of the copy does
    def game(version):
        won = MatchResult([1, 0], [0, 1], [1.0, 0.0], versions=[version, 7])
        runner.report_queue.put(WorkerReport(0, [], [won], 10))
        runner._consume_reports()

    game(landed - 1)
    assert (runner.elo.rating(1), runner.elo.rating(0)) == (1500.0, 1500.0)
    game(landed)
    assert runner.elo.rating(1) > 1500.0 > runner.elo.rating(0)


@pytest.mark.parametrize("offset", [3, 7])
def test_a_recurrent_learner_after_a_copy_never_updates_on_nothing(tmp_path, offset):
    """A recurrent learner leaves out steps it replays through a step past --max_policy_lag
    (a chunk begun before a PBT copy). The slots it keeps for training must be judged by that
    same mask: kept by the lag alone, a slot could leave nothing to train on, and the update
    moved the copied weights on Adam's momentum alone."""
    from rl_pbt.learning.learner import replayed_from_stale

    cfg, runner, learners, host, worker = _serial_setup(
        tmp_path, "--use_rnn=True", "--rnn_size=16", "--num_batches_per_epoch=1",
        "--num_epochs=1", "--rollout=16", "--batch_size=16", "--num_envs_per_worker=1",
    )  # fmt: skip
    for _ in range(150 + offset):  # the trajectories in flight at the copy straddle it
        worker.step()
        host.poll(timeout=0.0)
    src, dst = learners[0], learners[1]
    host.handle(ExportState(0, ApplyPBT(1, 0, dict(src.hp), decided_at=time.time())))
    for msg in drain(runner.learner_queues[1]):
        host.handle(msg)
    trained = []
    update = dst._update

    def counting(staged):
        batch = staged.device
        valid = batch["valid"]
        fresh = dst.version - batch["policy_version"] <= cfg.max_policy_lag
        fresh = fresh & ~replayed_from_stale(valid & ~fresh, batch["dones"], dst.rec)
        trained.append(int((fresh & valid & (batch["policy_id"] == 1)).sum()))
        return update(staged)

    dst._update = counting
    for _ in range(400):
        worker.step()
        host.poll(timeout=0.0)
        if dst.copied_at is None:  # the first update with trained samples has happened
            break
    runner.run_lock.release()
    assert dst.copied_at is None and trained and min(trained) > 0, trained
