"""The trainer's console output and scalar log: ETA, the compact status block, the PBT digest,
stats/scalars.jsonl and the end-of-run hints."""

import json
import math
import random
import time
from types import SimpleNamespace

import pytest

from rl_pbt.logging import progress
from rl_pbt.logging.files import scalars_path
from rl_pbt.logging.progress import (
    Eta,
    PolicyStatus,
    end_of_run_text,
    estimate_eta,
    fmt_duration,
    fmt_num,
    pbt_digest,
    pbt_line,
    status_block,
)
from rl_pbt.logging.stats import PopulationStats
from rl_pbt.runtime.messages import EpisodeStats


def fake_cfg(**over):
    values = dict(
        stats_avg=10,
        status_interval=5.0,
        experiment_summaries_interval=10,
        train_for_env_steps=1_000_000,
        train_for_seconds=10**10,
        with_pbt=True,
        pbt_start_mutation=200_000,
        pbt_target_objective="true_objective",
    )
    values.update(over)
    return SimpleNamespace(**values)


# --- numbers and durations --------------------------------------------------------------------
def test_short_numbers_and_durations():
    values = (None, 0, 0.8123, -0.0686, 12.345, -795.4, 1049, 4.5e5, 1.23e6)
    assert [fmt_num(v) for v in values] == [
        "-", "0", "0.812", "-0.069", "12.3", "-795", "1.05k", "450k", "1.23M"
    ]  # fmt: skip
    assert fmt_num(999.7) == "1k"  # rounding up moves to the next unit, never "1e+03"
    assert fmt_num(float("nan")) == "nan"
    assert [fmt_duration(s) for s in (None, 7.4, 187, 7500, 3 * 86400 + 4 * 3600)] == [
        "?", "7s", "3m07s", "2h05m", "3d04h"
    ]  # fmt: skip


# --- ETA --------------------------------------------------------------------------------------
def constant_rate_samples(rate, seconds, start_steps=0, jitter=0.0, seed=0):
    """(time, steps) once a second of a run progressing at `rate` steps/s, with optional noise
    on each sample's step count."""
    rng = random.Random(seed)
    return [
        (float(t), start_steps + rate * t * (1 + rng.uniform(-jitter, jitter)))
        for t in range(seconds + 1)
    ]


def test_eta_of_a_constant_rate_run_is_within_20_percent():
    rate, target = 2500.0, 1_000_000
    samples = constant_rate_samples(rate, 90, jitter=0.05)
    eta = estimate_eta(samples, target)
    truth = (target - rate * 90) / rate
    assert eta.by == "steps" and not eta.upper_bound
    assert abs(eta.seconds - truth) <= 0.2 * truth


def test_eta_follows_the_recent_rate_not_the_average():
    # 30 s at 1000 steps/s, then 90 s at 4000/s: the last minute says 4000/s
    samples = [(float(t), 1000.0 * t) for t in range(31)]
    samples += [(30.0 + t, 30_000 + 4000.0 * t) for t in range(1, 91)]
    eta = estimate_eta(samples, 1_000_000, window_s=60.0)
    truth = (1_000_000 - samples[-1][1]) / 4000.0
    assert abs(eta.seconds - truth) <= 0.05 * truth


def test_eta_is_unknown_before_enough_data():
    assert estimate_eta([], 1000).seconds is None
    assert estimate_eta([(0.0, 10.0), (1.0, 20.0)], 1000, min_span_s=4.0).seconds is None
    assert estimate_eta([(0.0, 10.0), (1.0, 20.0)], 1000, min_span_s=4.0).text() == "ETA ?"
    stalled = [(float(t), 500.0) for t in range(20)]
    assert estimate_eta(stalled, 1000).seconds is None
    assert estimate_eta([(0.0, 1000.0)], 1000).seconds == 0.0  # already there
    assert estimate_eta([(0.0, 1000.0)], 1000).text() == "done"


def test_eta_honours_the_time_limit_when_it_comes_first():
    samples = constant_rate_samples(100.0, 30)  # 1M steps would take ~2.8 hours
    eta = estimate_eta(samples, 1_000_000, elapsed=100.0, time_limit=160.0)
    assert (eta.seconds, eta.by) == (60.0, "time limit")
    assert eta.text() == "ETA 1m00s (time limit)"
    eta = estimate_eta(samples, 4000, elapsed=100.0, time_limit=10_000.0)
    assert eta.by == "steps" and eta.seconds == pytest.approx(10.0)
    # no rate yet: the time limit is an upper bound
    eta = estimate_eta([], 1_000_000, elapsed=10.0, time_limit=70.0)
    assert eta.upper_bound and eta.text() == "ETA <=1m00s (time limit)"


def test_stats_rate_ignores_the_jump_of_a_resumed_run(monkeypatch):
    """A resumed run's first reports jump to the restored counts: the ETA samples begin once
    every policy has reported, so the jump is not taken for speed."""
    clock = [1000.0]
    monkeypatch.setattr("rl_pbt.logging.stats.time.time", lambda: clock[0])
    stats = PopulationStats(fake_cfg(status_interval=1e9), "/nonexistent", 2)
    stats.status_line([500_000, 0], [0, 0], 0.0)  # p1 not restored yet
    assert not stats.progress_samples
    for t in range(1, 31):  # then 1000 steps/s each
        clock[0] = 1000.0 + t
        stats.status_line([500_000 + 1000 * t, 500_000 + 1000 * t], [0, 0], float(t))
    eta = stats.eta(30.0)
    truth = (1_000_000 - 530_000) / 1000.0
    assert abs(eta.seconds - truth) <= 0.2 * truth


def test_a_node_groups_status_block_shows_the_populations_ids(capsys):
    """A node group over Ray trains members 2 and 3 of the population as its 0 and 1: its
    block names them p2 and p3, as the driver's lines do."""
    from types import SimpleNamespace

    stats = PopulationStats(fake_cfg(with_pbt=False), "/nonexistent", 2)
    stats.display_ids = [2, 3]
    for p, ret in ((0, 5.0), (1, 9.0)):
        stats.add_episode(SimpleNamespace(policy_id=p, episode_return=ret, length=10,
                                          objective=None, extra={}))  # fmt: skip
    text = stats.status_line([2000, 1000], [1, 1], 10.0, force=True)
    assert "p2 ret 5" in text and "p3 ret 9" in text and "best p3" in text
    assert "p0" not in text and "p1" not in text
    assert stats.best_policy() == 1  # the group's own id, for the code that acts on it


# --- the status block -------------------------------------------------------------------------
def eight_policies(seed=0, scale=1.0):
    rng = random.Random(seed)
    return [
        PolicyStatus(
            p,
            env_steps=1_234_567 + 9_876 * p,
            ret=rng.uniform(-1.0, 1.0) * scale,
            obj=rng.uniform(-1.0, 1.0),
            lag=rng.uniform(0.0, 3.0),
        )
        for p in range(8)
    ]


def block(policies, events=((2, 5), (7, 1), (0, 5), (1, None), (4, None), (6, None))):
    return status_block(
        elapsed=3725.0,
        frames=98_765_432,
        fps=41_234.5,
        progress=min(s.env_steps for s in policies),
        target=20_000_000,
        eta=Eta(4567.0),
        policies=policies,
        pbt=pbt_line(list(events)),
    )


@pytest.mark.parametrize("scale", [1.0, 150.0, 25_000.0, -3e6])
def test_status_block_of_eight_policies_is_compact(scale):
    policies = eight_policies(scale=scale)
    lines = block(policies)
    assert all(len(line) <= 120 for line in lines), [len(line) for line in lines]
    assert len(lines) <= 1 + 2 + 1  # headline, 2 lines of 4 policies, the PBT line
    text = "\n".join(lines)
    for p in range(8):
        assert f"p{p} ret" in text
    head = lines[0]
    assert "[1h02m]" in head and "98.8M frames" in head and "41.2k fps" in head
    assert "6% of 20M steps (p0 1.23M slowest) ETA 1h16m" in head
    best = max(policies, key=lambda s: s.obj)
    assert f"best p{best.policy} obj {fmt_num(best.obj)}" in head
    assert lines[-1].strip().startswith("PBT: 3 copies")


def test_status_block_puts_four_typical_policies_on_a_line():
    for scale in (1.0, 50.0, 5000.0):
        lines = block(eight_policies(scale=scale))
        policy_rows = [line for line in lines if line.startswith("  p")]
        assert len(policy_rows) == 2
        assert all(line.count(" ret ") == 4 for line in policy_rows)


def test_large_population_shows_best_and_worst_within_width():
    policies = [PolicyStatus(p, 1000 * p, ret=float(p), obj=float(p)) for p in range(40)]
    lines = progress.policy_lines(policies)
    assert len(lines) <= progress.MAX_POLICY_LINES
    assert all(len(line) <= 120 for line in lines)
    text = "\n".join(lines)
    assert "p39 " in text and "p0 " in text  # the best and the worst
    assert "more policies" in lines[-1]


def test_no_policy_lines_before_the_first_episode():
    policies = [PolicyStatus(p, 0) for p in range(8)]
    lines = status_block(0.4, 0, 0.0, 0, 1000, Eta(None), policies)
    assert lines == ["[0s] 0 frames 0 fps | 0% of 1k steps (p0 0 slowest) ETA ?"]


def test_best_member_uses_the_return_without_objectives():
    policies = [PolicyStatus(0, 10, ret=1.0), PolicyStatus(1, 10, ret=5.0), PolicyStatus(2, 10)]
    assert progress.best_policy(policies) == 1
    head = progress.headline(1.0, 10, 1.0, 10, 100, Eta(None), policies)
    assert "best p1 ret 5" in head
    assert progress.best_policy([PolicyStatus(0, 0)]) is None


def test_progress_is_of_the_time_limit_where_that_is_nearer():
    policies = [PolicyStatus(0, 500)]
    head = progress.headline(30.0, 10, 1.0, 500, 10**10, Eta(None), policies, time_limit=40)
    assert "| 75% of 40s (500)" in head, head
    head = progress.headline(4.0, 10, 1.0, 500, 1000, Eta(None), policies, time_limit=40)
    assert "| 50% of 1k steps (500)" in head, head  # the steps' end is nearer


def test_best_member_is_pbts_best_where_pbt_ranks_on_games():
    # PBT ranks on the score against a scripted player; the objective says otherwise
    policies = [
        PolicyStatus(0, 10, ret=1.0, obj=0.9, rank=0.2),
        PolicyStatus(1, 10, ret=0.0, obj=0.1, rank=0.6),
        PolicyStatus(2, 10, ret=2.0, obj=0.5),  # no games yet
    ]
    assert progress.best_policy(policies) == 1
    head = progress.headline(1.0, 10, 1.0, 10, 100, Eta(None), policies, rank_name="vs_scripted")
    assert "best p1 vs_scripted 0.6" in head
    lines = status_block(1.0, 10, 1.0, 10, 100, Eta(None), policies, rank_name="elo")
    assert "best p1 elo 0.6" in lines[0]
    policies = [PolicyStatus(0, 10, obj=0.9), PolicyStatus(1, 10, obj=0.1)]
    assert progress.best_policy(policies) == 0  # without ranks: the objective


# --- PBT digest -------------------------------------------------------------------------------
def test_pbt_digest_sums_up_a_period():
    events = [(2, 5), (7, 1), (0, 5), (1, None), (4, None), (6, None)]
    assert pbt_digest(events) == (
        "PBT: 3 copies (p2<-p5, p7<-p1, p0<-p5), 3 mutations (p1, p4, p6)"
    )
    assert pbt_digest([(3, 1)]) == "PBT: 1 copy (p3<-p1)"
    assert pbt_digest([(3, None)]) == "PBT: 1 mutation (p3)"
    repeated = [(3, None), (2, None), (2, None), (3, None), (1, None)]
    assert pbt_digest(repeated) == "PBT: 5 mutations (p3 x2, p2 x2, p1)"


def test_pbt_digest_of_many_events_fits_one_line():
    events = [(p % 64, (p + 7) % 64) for p in range(40)] + [(p, None) for p in range(30)]
    line = pbt_digest(events, width=100)
    assert len(line) <= 100
    assert line.startswith("PBT: 40 copies (") and "30 mutations" in line
    assert "+" in line  # names that do not fit are counted


def test_pbt_line_between_events():
    assert pbt_line([], "p2<-p5", 41.0) == "PBT: no events this period (last: p2<-p5, 41s ago)"
    assert "200k" in pbt_line([], start_steps=200_000)
    # every member past the start: the line no longer says PBT waits for it
    past = pbt_line([], start_steps=200_000, past_start=True)
    assert "200k" not in past and "holds 5 results" in past


def test_status_line_prints_one_pbt_line_per_period(capsys, tmp_path):
    stats = PopulationStats(fake_cfg(), str(tmp_path), 8)
    for p in range(8):
        stats.add_episode(EpisodeStats(p, 10.0 * p, 100, 0.1 * p))
    for p, src in [(2, 5), (7, 1), (1, None)] * 10:  # 30 decisions in one period
        stats.pbt_event(SimpleNamespace(policy_id=p, source_id=src, log_line=f"PBT p{p} ..."))
    stats.status_line([300_000] * 8, [0] * 8, 12.0, force=True)
    stats.status_line([310_000] * 8, [0] * 8, 17.0, force=True)
    out = capsys.readouterr().out.splitlines()
    pbt = [line.strip() for line in out if "PBT" in line]
    assert len(pbt) == 2
    assert pbt[0].startswith("PBT: 20 copies (p2<-p5, p7<-p1") and "10 mutations" in pbt[0]
    assert pbt[1].startswith("PBT: no events this period (last: p1 mutated")
    assert all(len(line) <= 120 for line in out)
    assert len(out) == 2 * (1 + 2 + 1)
    assert "best p7 obj 0.7" in out[0]
    stats.close()


# --- stats/scalars.jsonl ----------------------------------------------------------------------
class RecordingWriter:
    def __init__(self):
        self.tags = []

    def add_scalar(self, tag, value, step):
        self.tags.append((tag, value, step))

    def add_text(self, *args):
        pass

    def close(self):
        pass


def scalar_stats(exp_dir, writers):
    stats = PopulationStats(fake_cfg(), exp_dir, 2)
    stats._writer = lambda p: writers.setdefault(p, RecordingWriter())
    return stats


def test_scalars_jsonl_gets_exactly_the_tensorboard_tags(tmp_path):
    exp_dir = str(tmp_path / "exp")
    writers = {}
    stats = scalar_stats(exp_dir, writers)
    stats.add_episode(EpisodeStats(0, 5.0, 50, 0.75, extra={"kills": 2.0}))
    stats.add_episode(EpisodeStats(1, -3.0, 40, None))
    stats.add_episode(EpisodeStats("p0@1000", 99.0, 40, None))  # a snapshot's: not counted
    stats.add_train(SimpleNamespace(policy_id=0, stats={"loss": float("nan"), "policy_lag": 1.5}))
    stats.maybe_write_summaries([1000, 2000], force=True)
    stats.maybe_write_summaries([1500, 2600], force=True)
    stats.close()

    rows = [json.loads(line) for line in open(scalars_path(exp_dir))]
    expected = [(0, 1000), (1, 2000), (0, 1500), (1, 2600)]
    assert [(r["policy"], r["env_steps"]) for r in rows] == expected
    for r in rows:
        written = {tag: v for tag, v, step in writers[r["policy"]].tags if step == r["env_steps"]}
        assert set(r["scalars"]) == set(written)
        assert isinstance(r["time"], float) and r["time"] > 1.6e9
    p0 = rows[0]["scalars"]
    assert p0["episode/reward"] == 5.0 and p0["episode/true_objective"] == 0.75
    assert p0["episode/kills"] == 2.0 and p0["train/policy_lag"] == 1.5
    assert p0["train/loss"] is None  # NaN is written as null
    assert "episode/true_objective" not in rows[1]["scalars"]
    assert rows[1]["scalars"]["episode/reward"] == -3.0


def test_a_resumed_run_shows_where_its_members_were_while_they_load(tmp_path, capsys):
    """While a resume loads its checkpoints the learners have not reported: the status line
    shows each member's env steps of the run before, not 0, until its learner reports."""
    exp_dir = str(tmp_path / "exp")
    first = scalar_stats(exp_dir, {})
    first.add_episode(EpisodeStats(0, 1.0, 10, 0.5))
    before = first.summary([40_960, 36_864])
    first.close()
    again = scalar_stats(exp_dir, {})
    again.restore(before)
    text = again.status_line([0, 0], [0, 0], 1.0, force=True)
    assert "(p1 36.9k slowest)" in text and again.env_steps == [40_960, 36_864], text
    text = again.status_line([0, 37_000], [0, 1], 2.0, force=True)  # p1 loaded and trained
    assert "(p1 37k slowest)" in text, text
    assert again.env_steps == [40_960, 37_000]
    again.close()
    new = scalar_stats(str(tmp_path / "new"), {})  # not a resume: 0 until they report
    assert "(p0 0 slowest)" in new.status_line([0, 0], [0, 0], 1.0, force=True)
    new.close()


def test_a_resumed_run_adds_to_the_summary_of_the_runs_before(tmp_path):
    """A re-run with nothing left to train wrote a summary of 0 episodes and no returns; a
    resume counted only its own episodes and frames. Rows of nothing new are not written."""
    exp_dir = str(tmp_path / "exp")
    first = scalar_stats(exp_dir, {})
    for r in (1.0, 3.0):
        first.add_episode(EpisodeStats(0, r, 10, 0.5))
    first.add_sampling(500)
    first.maybe_write_summaries([400, 400], force=True)
    before = first.summary([400, 400])
    first.close()

    idle = scalar_stats(exp_dir, {})  # resumed with nothing left to train
    idle.restore(before)
    idle.maybe_write_summaries([0, 0], force=True)  # learners not reported yet: no row
    idle.maybe_write_summaries([400, 400], force=True)  # nothing trained since: no row
    again = idle.summary([400, 400])
    idle.close()
    assert again["policies"]["0"] == before["policies"]["0"]
    assert again["frames"] == 500 and again["best_policy"] == before["best_policy"]

    more = scalar_stats(exp_dir, {})
    more.restore(again)
    more.add_episode(EpisodeStats(0, 5.0, 20, 1.0))
    more.add_sampling(100)
    more.maybe_write_summaries([600, 400], force=True)
    last = more.summary([600, 400])
    more.close()
    p0 = last["policies"]["0"]
    assert p0["episodes"] == 3 and p0["recent_returns"] == [1.0, 3.0, 5.0]
    assert p0["mean_length"] == pytest.approx(40 / 3) and last["frames"] == 600
    rows = [json.loads(line) for line in open(scalars_path(exp_dir))]
    # p1 trained nothing since its row at 400: no second row at that step
    assert [(r["policy"], r["env_steps"]) for r in rows] == [(0, 400), (1, 400), (0, 600)]


def test_scalars_jsonl_is_appended_by_a_resumed_run(tmp_path):
    exp_dir = str(tmp_path / "exp")
    for run in range(2):
        stats = scalar_stats(exp_dir, {})
        stats.maybe_write_summaries([100 * (run + 1)] * 2, force=True)
        stats.close()
    rows = [json.loads(line) for line in open(scalars_path(exp_dir))]
    assert [r["env_steps"] for r in rows] == [100, 100, 200, 200]


def test_scalars_include_pbt_values(tmp_path):
    pbt = SimpleNamespace(
        hparams=[{"learning_rate": 1e-3}, {"learning_rate": 2e-3}],
        objectives=lambda: {0: 0.5, 1: None},
        shaping=[{"kill": 1.0, "pos": (0.1, 0.2)}, None],
    )
    stats = scalar_stats(str(tmp_path), {})
    stats.maybe_write_summaries([10, 20], pbt=pbt, force=True)
    stats.close()
    rows = [json.loads(line) for line in open(scalars_path(str(tmp_path)))]
    assert rows[0]["scalars"]["pbt/learning_rate"] == 1e-3
    assert rows[0]["scalars"]["pbt/objective"] == 0.5
    assert rows[0]["scalars"]["pbt/rew.pos[1]"] == 0.2
    assert "pbt/objective" not in rows[1]["scalars"] and math.isclose(
        rows[1]["scalars"]["pbt/learning_rate"], 2e-3
    )


# --- end of the run ---------------------------------------------------------------------------
def test_end_of_run_text_names_the_next_commands():
    cfg = SimpleNamespace(experiment="duel", train_dir="runs", env="arena_duel", num_policies=4)
    text = end_of_run_text("runs/duel", cfg, has_pbt=True, selfplay=True, best_policy=2)
    assert "Results in runs/duel" in text and "pbt/lineage.jsonl" in text
    where = "--experiment=duel --train_dir=runs"
    assert f"rl-pbt-report {where}\n" in text
    assert f"rl-pbt-enjoy --env=arena_duel {where} --policy=2\n" in text
    assert f"rl-pbt-match --env=arena_duel {where} " in text
    assert "--players p2 p0 p1 p3" in text
    assert "tensorboard --logdir runs/duel/.summary" in text and "pip install tensorboard" in text

    solo = SimpleNamespace(experiment="cp", train_dir="train_dir", env="CartPole", num_policies=1)
    text = end_of_run_text("train_dir/cp", solo, has_pbt=False, selfplay=False)
    assert "rl-pbt-report --experiment=cp\n" in text  # the default train_dir left out
    assert "--policy=0" in text
    assert "rl-pbt-match" not in text and "lineage" not in text
    assert "stopped" not in text

    failed = end_of_run_text("train_dir/cp", solo, has_pbt=False, selfplay=False, status=1)
    assert failed.startswith("The run stopped before its end (exit status 1;")
    assert "The same command resumes it" in failed and "Results in" not in failed
    assert "rl-pbt-report --experiment=cp\n" in failed  # what it saved can still be looked at
    stopped = end_of_run_text(
        "train_dir/cp", solo, has_pbt=False, selfplay=False, status=1, interrupted=True
    )
    assert stopped.startswith("The run was stopped (Ctrl-C or SIGTERM)")
    assert "the same command resumes it" in stopped and "cause" not in stopped


def test_end_of_run_text_quotes_paths_with_spaces():
    cfg = SimpleNamespace(experiment="a b", train_dir="/tmp/my runs", env="e", num_policies=2)
    text = end_of_run_text("/tmp/my runs/a b", cfg, has_pbt=False, selfplay=False)
    assert "--experiment='a b' --train_dir='/tmp/my runs'" in text
    assert "tensorboard --logdir '/tmp/my runs/a b/.summary'" in text


def test_end_of_run_text_for_an_env_of_the_users_own_script():
    """A new process knows nothing of an env the user's script registered: the hints to play
    it are calls to make in that script, after its register_env."""
    cfg = SimpleNamespace(experiment="my run", train_dir="runs", env="my_env", num_policies=2)
    text = end_of_run_text("runs/my run", cfg, has_pbt=False, selfplay=True, own_env=True)
    assert "in your script, after registering my_env" in text
    assert (
        "from launch import enjoy; enjoy.main(['--experiment=my run', '--train_dir=runs', "
        "'--policy=0'])" in text
    )
    assert "from launch import match; match.main(['--experiment=my run'" in text
    assert "rl-pbt-enjoy" not in text and "--env=my_env" not in text
    assert "rl-pbt-report --experiment='my run' --train_dir=runs" in text


def test_a_summary_of_another_shape_is_named_and_left_out(tmp_path, capsys):
    stats = scalar_stats(str(tmp_path / "exp"), {})
    stats.restore({"frames": 10, "policies": {"0": {"episodes": 3, "recent_returns": ["x"]}}})
    assert stats.frames_total == 0 and stats.episodes_total == [0, 0]  # nothing half taken
    assert "summary.json of the run before not carried on" in capsys.readouterr().out
    stats.close()


def test_a_pbt_note_in_tensorboard_sits_at_the_members_env_steps(tmp_path):
    """TensorBoard's x axis is env steps for every scalar: a PBT note goes there too (it was
    placed at the member's episode count, far to the left of where the copy happened)."""
    texts = []

    class TextWriter(RecordingWriter):
        def add_text(self, tag, text, step):
            texts.append((tag, text, step))

    stats = PopulationStats(fake_cfg(), str(tmp_path / "exp"), 2)
    stats._writer = lambda p: TextWriter()
    for _ in range(7):
        stats.add_episode(EpisodeStats(1, 1.0, 10, 0.5))
    stats.status_line([5000, 3025], [3, 2], 10.0)
    stats.pbt_event(SimpleNamespace(policy_id=1, source_id=0, log_line="PBT p1 <- p0"))
    assert texts == [("pbt", "PBT p1 <- p0", 3025)]
    stats.close()


def tensorboard_events(folder) -> list:
    """Every event in a TensorBoard folder's files, in file order (the files are records of a
    length, its checksum, the serialised Event and its checksum)."""
    import glob
    import os
    import struct

    from tensorboardX.proto.event_pb2 import Event

    events = []
    for path in sorted(glob.glob(os.path.join(folder, "events.out.tfevents.*"))):
        with open(path, "rb") as f:
            data = f.read()
        at = 0
        while at < len(data):
            (length,) = struct.unpack("<Q", data[at : at + 8])
            event = Event()
            event.ParseFromString(data[at + 12 : at + 12 + length])
            events.append(event)
            at += 12 + length + 4
    return events


def test_a_resumed_run_purges_rows_past_its_checkpoint_and_repeats_no_step(tmp_path):
    """A run killed whole wrote rows past the checkpoint it resumes from: the resumed run's
    TensorBoard file tells readers to drop them (a purge at the checkpoint's next step), and
    the resumed run writes no row before it trains past its restored count (a row at that count
    repeated the last one, at 0 frames/s)."""
    from rl_pbt.logging.files import summary_dir

    exp_dir = str(tmp_path / "exp")
    first = PopulationStats(fake_cfg(), exp_dir, 2)
    for steps in (100, 200, 300):  # its checkpoint was at 150 when it was killed
        first.maybe_write_summaries([steps, steps], force=True)
    first.close()
    time.sleep(1.1)  # TensorBoard files are named by the second: the resumed run's is another

    resumed = PopulationStats(fake_cfg(), exp_dir, 2)
    resumed.resumed = True
    resumed.resumed_from(0, 150)
    resumed.resumed_from(1, 150)
    resumed.maybe_write_summaries([150, 150], force=True)  # nothing trained yet: no row
    resumed.maybe_write_summaries([250, 150], force=True)  # p0 only
    resumed.close()
    rows = [json.loads(line) for line in open(scalars_path(exp_dir))]
    assert [(r["policy"], r["env_steps"]) for r in rows][-1:] == [(0, 250)]
    assert len(rows) == 7
    events = tensorboard_events(summary_dir(exp_dir, 0))
    purges = [e.step for e in events if e.HasField("session_log") and e.session_log.status == 1]
    assert purges == [151]  # SessionLog.START: readers drop this file's earlier steps >= 151
    fps = [(e.step, v.simple_value) for e in events for v in e.summary.value if v.tag == "perf/fps"]
    assert [s for s, _ in fps] == [100, 200, 300, 250]
    p1 = tensorboard_events(summary_dir(exp_dir, 1))
    assert [e.step for e in p1 if e.HasField("session_log")] == []  # no row: no new writer


def test_a_resumed_run_names_the_last_pbt_decision_of_the_runs_before():
    stats = PopulationStats(fake_cfg(), "/nonexistent", 2)
    stats.restore_pbt_last(
        [
            {"action": "init", "policy": 0, "source": None, "time": 1.0},
            {"action": "replace", "policy": 1, "source": 0, "time": 5.0},
            {"action": "init", "policy": 1, "source": None, "time": 9.0},
        ]
    )
    assert stats.pbt_last == ("p1<-p0", 5.0)
    text = stats._pbt_text(65.0)
    assert "p1<-p0" in text and "no events yet" not in text
    odd = PopulationStats(fake_cfg(), "/nonexistent", 2)
    odd.restore_pbt_last([{"action": "mutate", "policy": "x", "time": 1.0}])
    assert odd.pbt_last is None and "no events yet" in odd._pbt_text(2.0)


def test_steps_a_checkpoint_holds_past_the_summary_count_as_frames(tmp_path):
    """A run killed whole: its learners saved after summary.json was last written. The steps
    between join the frames (they were sampled), else the resumed run ended with fewer frames
    than env steps trained; a checkpoint older than the summary takes nothing away."""
    stats = PopulationStats(fake_cfg(env_frameskip=4), str(tmp_path / "exp"), 2)
    stats.restore({"frames": 2000, "policies": {"0": {"env_steps": 400}, "1": {"env_steps": 400}}})
    stats.resumed_from(0, 500)
    stats.resumed_from(1, 300)
    assert stats.frames_total == 2000 + 100  # env steps count frames already (x frameskip)
    assert stats.fps() == 0.0  # the added frames are no rate
    fresh = PopulationStats(fake_cfg(), str(tmp_path / "other"), 2)  # no summary.json at all
    fresh.resumed = True
    fresh.resumed_from(0, 700)
    assert fresh.frames_total == 700
