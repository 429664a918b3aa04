"""PBTManager: when policies update, replacement and mutation, files, lineage and resume."""

import json
import os

import numpy as np
import pytest

from rl_pbt.config.flags import FLAGS
from rl_pbt.config.parse import Cfg
from rl_pbt.logging.files import policy_cfg_path, policy_shaping_path, read_json
from rl_pbt.pbt.lineage import lineage_path, read_events, schedule_for
from rl_pbt.pbt.manager import PBTDecision, PBTManager, elo_objectives

HPARAMS = {
    "learning_rate": 1e-4,
    "exploration_loss_coeff": 0.003,
    "value_loss_coeff": 0.5,
    "max_grad_norm": 4.0,
    "ppo_clip_ratio": 0.1,
    "ppo_clip_value": 1.0,
    "gamma": 0.99,
}
SHAPING = {"pickup": 0.05, "death": -0.25, "group": {"x": 1.0}, "t": (0.1, 0.2)}
N = 6


def make_cfg(**overrides):
    values = {f.name: f.default for f in FLAGS}
    values.update(
        with_pbt=True,
        num_policies=N,
        pbt_period_env_steps=1000,
        pbt_start_mutation=2000,
        pbt_mutation_rate=0.5,
        seed=1,
    )
    values.update(overrides)
    return Cfg(values)


def make(tmp_path, shaping=SHAPING, n=N, initial_values=None, **overrides):
    cfg = make_cfg(num_policies=n, **overrides)
    return PBTManager(
        cfg, n, dict(HPARAMS), shaping, str(tmp_path), seed=cfg.seed, initial_values=initial_values
    )


def feed(mgr, means, episodes=20, seed=0):
    rng = np.random.default_rng(seed)
    for p, m in enumerate(means):
        if m is None:
            continue
        for _ in range(episodes):
            mgr.record_episode(p, float(m + 0.01 * rng.standard_normal()))


GOOD_TO_BAD = [1.0, 0.9, 0.8, 0.3, 0.2, 0.1]


def test_init_writes_files_and_lineage(tmp_path):
    mgr = make(tmp_path)
    assert mgr.hparams == [HPARAMS] * N
    assert mgr.shaping == [SHAPING] * N and isinstance(mgr.shaping[3]["t"], tuple)
    for p in range(N):
        assert read_json(policy_cfg_path(str(tmp_path), p)) == HPARAMS
        assert read_json(policy_shaping_path(str(tmp_path), p))["group"] == {"x": 1.0}
    events = read_events(lineage_path(str(tmp_path)))
    assert [(e["policy"], e["action"], e["source"]) for e in events] == [
        (p, "init", None) for p in range(N)
    ]
    assert events[0]["changes"]["rew.t[1]"] == [None, 0.2]
    assert os.path.isfile(os.path.join(tmp_path, "pbt", "state.json"))
    assert mgr.objectives() == {p: None for p in range(N)}


def test_no_decisions_before_start_or_period(tmp_path):
    mgr = make(tmp_path)
    feed(mgr, GOOD_TO_BAD)
    assert mgr.update([0] * N) == []
    assert mgr.update([1900] * N) == []  # past the period but not past the start
    assert mgr.update([5000, 5000, 5000, 5000, 5000, 1999]) == []  # one policy lags behind
    decisions = mgr.update([5000] * N)
    assert decisions
    assert mgr.update([5500] * N) == []  # less than a period since the last update
    assert mgr.last_update == [5000] * N


def test_bad_policies_copy_good_ones_and_mutate(tmp_path):
    mgr = make(tmp_path)
    feed(mgr, GOOD_TO_BAD)
    mgr.update([0] * N)
    decisions = mgr.update([3000 + 10 * q for q in range(N)])  # each member's own count
    by_policy = {d.policy_id: d for d in decisions}
    assert 0 not in by_policy  # the reference policy is left alone
    # k = ceil(0.3 * 6) = 2: p4, p5 copy p0 or p1; p0, p1 (top) untouched; p2, p3 only mutate
    for p in (4, 5):
        d = by_policy[p]
        assert isinstance(d, PBTDecision) and d.source_id in (0, 1)
        assert d.log_line.startswith(f"PBT p{p} <- p{d.source_id} (obj ")
        assert set(d.hparams) == set(HPARAMS)
        assert isinstance(d.shaping["t"], tuple)
        assert mgr.objectives()[p] is None  # window restarts after a copy
    assert 1 not in by_policy
    for p in (2, 3):
        if p in by_policy:
            assert by_policy[p].source_id is None
            assert " mutate " in by_policy[p].log_line
    assert mgr.objectives()[2] is not None
    # files and lineage follow
    for d in decisions:
        assert read_json(policy_cfg_path(str(tmp_path), d.policy_id)) == d.hparams
        assert read_json(policy_shaping_path(str(tmp_path), d.policy_id))["t"] == list(
            d.shaping["t"]
        )
        assert mgr.hparams[d.policy_id] == d.hparams
    events = read_events(lineage_path(str(tmp_path)))[N:]
    assert [(e["policy"], e["source"]) for e in events] == [
        (d.policy_id, d.source_id) for d in decisions
    ]
    replace = events[[e["action"] for e in events].index("replace")]
    assert replace["env_steps"] == 3000 + 10 * replace["policy"]
    assert replace["source_env_steps"] == 3000 + 10 * replace["source"]  # the copied weights'
    assert replace["objectives"]["0"] == pytest.approx(1.0, 0.1)
    # the copy's schedule starts with its source's history
    sched = schedule_for(read_events(lineage_path(str(tmp_path))), decisions[-1].policy_id)
    assert sched[-1][1] == decisions[-1].hparams


def test_mutations_respect_sign_and_bounds_over_many_rounds(tmp_path):
    mgr = make(tmp_path, pbt_mutation_rate=1.0, pbt_resample_probability=0.2)
    mgr.update([0] * N)
    for r in range(1, 40):
        feed(mgr, GOOD_TO_BAD, episodes=3, seed=r)
        mgr.update([2000 + 1000 * r] * N)
    assert mgr.hparams[0] == HPARAMS and mgr.shaping[0] == SHAPING
    for p in range(1, N):
        h, s = mgr.hparams[p], mgr.shaping[p]
        assert 1e-6 <= h["learning_rate"] <= 1e-2
        assert h["gamma"] == 0.99  # gamma is only tuned with --pbt_optimize_gamma
        assert s["pickup"] > 0 and s["death"] < 0 and s["group"]["x"] > 0
        assert all(v > 0 for v in s["t"]) and isinstance(s["t"], tuple)
    assert any(mgr.hparams[p] != HPARAMS for p in range(1, N))


def test_mutate_reference_policy_flag(tmp_path):
    mgr = make(tmp_path, pbt_mutate_reference_policy=True, pbt_mutation_rate=1.0)
    feed(mgr, [0.0, 1.0, 0.9, 0.8, 0.7, 0.6])
    mgr.update([0] * N)
    decisions = mgr.update([3000] * N)
    d0 = [d for d in decisions if d.policy_id == 0]
    assert d0 and d0[0].source_id in (1, 2)


def test_optimize_gamma_stays_in_unit_interval(tmp_path):
    mgr = make(tmp_path, pbt_optimize_gamma=True, pbt_mutation_rate=1.0)
    feed(mgr, [0.5] * N)  # all equal: every member explores
    mgr.update([0] * N)
    for r in range(1, 20):
        mgr.update([2000 + 1000 * r] * N)
    gammas = [h["gamma"] for h in mgr.hparams[1:]]
    assert all(0.9 <= g <= 0.9999 for g in gammas) and any(g != 0.99 for g in gammas)


def test_no_shaping(tmp_path):
    mgr = make(tmp_path, shaping=None)
    feed(mgr, GOOD_TO_BAD)
    mgr.update([0] * N)
    decisions = mgr.update([3000] * N)
    assert decisions and all(d.shaping is None for d in decisions)
    assert mgr.shaping == [None] * N
    assert not os.path.exists(policy_shaping_path(str(tmp_path), 1))
    assert all(
        not k.startswith("rew.")
        for e in read_events(lineage_path(str(tmp_path)))
        for k in e["changes"]
    )


def test_elo_ratings_rank(tmp_path):
    mgr = make(tmp_path, pbt_target_objective="elo", pbt_exploit="ttest")
    mgr.update([0] * N, ratings=[1200.0] * N)
    ratings = [1500.0, 1400.0, 1300.0, 1000.0, 900.0, 800.0]
    decisions = mgr.update([3000] * N, ratings=ratings)  # no episodes at all: ratings rank
    assert any(d.source_id is not None for d in decisions)
    with pytest.raises(ValueError):
        mgr.update([9000] * N)


def test_elo_ranking_does_not_depend_on_the_rating_offset(tmp_path):
    ratings = [1300.0, 1280.0, 1250.0, 1100.0, 1090.0, 1240.0]  # 200 points: a clear gap
    chosen = []
    for offset in (0.0, 2000.0):
        mgr = make(tmp_path / str(offset), pbt_target_objective="elo")
        mgr.update([0] * N, ratings=[1200.0 + offset] * N)
        decisions = mgr.update([3000] * N, ratings=[r + offset for r in ratings])
        chosen.append({d.policy_id: d.source_id for d in decisions})
    assert chosen[0] == chosen[1]
    # the bottom two (p3, p4) copy one of the top two
    assert chosen[0][3] in (0, 1) and chosen[0][4] in (0, 1)


def test_elo_objectives_are_expected_scores_against_the_mean():
    scores = elo_objectives([1400.0, 1200.0, 1000.0])
    assert scores[1] == pytest.approx(0.5)
    assert scores[0] == pytest.approx(1 / (1 + 10 ** (-0.5)))
    assert scores[0] + scores[2] == pytest.approx(1.0)
    assert elo_objectives([3400.0, 3200.0, 3000.0]) == pytest.approx(scores)


def test_resume_restores_everything_and_does_not_fire(tmp_path):
    mgr = make(tmp_path)
    feed(mgr, GOOD_TO_BAD)
    mgr.update([0] * N)
    first = mgr.update([3000] * N)
    assert first
    feed(mgr, [0.5, 0.4, 0.3, 0.9, 0.2, 0.1], episodes=5, seed=9)
    mgr.save()
    n_events = len(read_events(lineage_path(str(tmp_path))))

    again = make(tmp_path)
    assert again.hparams == mgr.hparams
    assert again.shaping == mgr.shaping and isinstance(again.shaping[4]["t"], tuple)
    assert again.last_update == mgr.last_update
    assert again.objectives() == mgr.objectives()
    assert again.update([3000] * N) == []
    assert again.update([3999] * N) == []
    assert len(read_events(lineage_path(str(tmp_path)))) == n_events  # no new init events
    # identical state, identical future (the rng comes back too)
    a = mgr.update([4000] * N)
    b = again.update([4000] * N)
    assert [(d.policy_id, d.source_id, d.hparams, d.shaping) for d in a] == [
        (d.policy_id, d.source_id, d.hparams, d.shaping) for d in b
    ]


def test_a_member_past_its_budget_is_not_due(tmp_path):
    """A member that trained its whole budget gets no decision, however far past its last
    update it is: a re-run with nothing left to train leaves the state as it was."""
    mgr = make(tmp_path, train_for_env_steps=6000)
    feed(mgr, GOOD_TO_BAD)
    mgr.update([0] * N)
    assert mgr.update([3000] * N)
    at_end = [6000, 5999, 6100, 4100, 6000, 7000]  # only p1 and p3 have budget left
    decisions = mgr.update(at_end)
    assert mgr.last_update == [3000, 5999, 3000, 4100, 3000, 3000]
    assert {d.policy_id for d in decisions} <= {1, 3}
    mgr.save()
    with open(mgr.state_path) as f:
        state = f.read()
    again = make(tmp_path, train_for_env_steps=6000)
    assert again.update([6000, 6000, 6100, 6000, 6000, 7000]) == []
    again.save()
    with open(again.state_path) as f:
        assert f.read() == state


def test_fresh_run_counts_from_zero(tmp_path):
    mgr = make(tmp_path, pbt_start_mutation=0)
    assert mgr.last_update == [0] * N
    assert mgr.update([999] * N) == []
    feed(mgr, [0.5] * N)  # all equal: no copy, every member explores
    assert mgr.update([1000] * N) != []
    assert mgr.last_update == [1000] * N
    again = make(tmp_path, pbt_start_mutation=0)
    assert again.last_update == [1000] * N
    assert again.update([0] * N) == []  # a restarted runner reports zeros until learners load


def test_resume_with_other_population_size_fails(tmp_path):
    make(tmp_path)
    with pytest.raises(ValueError, match="policies"):
        make(tmp_path, n=4)


def test_search_space_file_is_used(tmp_path):
    space = tmp_path / "space.json"
    space.write_text(
        '{"learning_rate": {"type": "log_float", "low": 5e-5, "high": 2e-4},'
        ' "rew.pickup": {"type": "float", "low": 0.01, "high": 0.1}}'
    )
    mgr = make(
        tmp_path / "exp",
        pbt_search_space=str(space),
        pbt_mutation_rate=1.0,
        pbt_resample_probability=0.5,
    )
    mgr.update([0] * N)
    for r in range(1, 30):
        mgr.update([2000 + 1000 * r] * N)
    assert all(5e-5 <= h["learning_rate"] <= 2e-4 for h in mgr.hparams)
    assert all(0.01 <= s["pickup"] <= 0.1 for s in mgr.shaping)


def test_tune_false_keeps_a_parameter_out_of_the_search(tmp_path):
    space = tmp_path / "space.json"
    space.write_text('{"learning_rate": {"tune": false}, "rew.pickup": {"tune": false}}')
    mgr = make(
        tmp_path / "exp",
        pbt_search_space=str(space),
        pbt_init_random=True,
        pbt_mutation_rate=1.0,
        pbt_resample_probability=0.5,
    )
    assert "learning_rate" not in mgr.space and "rew.pickup" not in mgr.space
    assert "value_loss_coeff" in mgr.space and "rew.death" in mgr.space
    for r in range(30):
        feed(mgr, GOOD_TO_BAD, seed=r)
        mgr.update([2000 + 1000 * r] * N)
    assert all(h["learning_rate"] == HPARAMS["learning_rate"] for h in mgr.hparams)
    assert all(s["pickup"] == SHAPING["pickup"] for s in mgr.shaping)
    # the tuned ones did move
    assert len({h["value_loss_coeff"] for h in mgr.hparams}) > 1
    assert len({s["death"] for s in mgr.shaping}) > 1


def test_resume_fills_in_parameters_the_state_lacks(tmp_path):
    make(tmp_path)
    cfg = make_cfg()
    again = PBTManager(
        cfg, N, {**HPARAMS, "new_coeff": 2.0}, {**SHAPING, "bonus": 0.5}, str(tmp_path), seed=1
    )
    assert all(h["new_coeff"] == 2.0 for h in again.hparams)
    assert all(s["bonus"] == 0.5 and s["pickup"] == 0.05 for s in again.shaping)
    gone = PBTManager(cfg, N, dict(HPARAMS), None, str(tmp_path), seed=1)
    assert gone.shaping == [None] * N


def test_init_random_spreads_members_within_bounds(tmp_path):
    m = make(tmp_path, shaping={"lure": 0.3, "goal": 1.0}, n=4, pbt_init_random=True, seed=0)
    hp = HPARAMS
    assert m.hparams[0] == hp and m.shaping[0] == {"lure": 0.3, "goal": 1.0}
    assert len({m.hparams[p]["learning_rate"] for p in range(4)}) == 4
    for p in range(1, 4):
        for name, spec in m.space.items():
            v = m.hparams[p].get(name, (m.shaping[p] or {}).get(name.removeprefix("rew.")))
            if spec.low is not None:
                assert spec.low <= v <= spec.high
        assert m.shaping[p]["lure"] > 0 and m.shaping[p]["goal"] > 0


def test_init_random_draws_over_policy_values_but_keeps_the_untuned_and_the_reference(tmp_path):
    space = tmp_path / "space.json"
    lure = {"type": "log_float", "low": 0.001, "high": 0.1}
    off = {"tune": False}
    space.write_text(json.dumps({"learning_rate": off, "rew.goal": off, "rew.lure": lure}))
    start = [{"rew.lure": 0.05, "learning_rate": 3e-4}] * 4
    m = make(
        tmp_path / "e",
        shaping={"lure": 0.3, "goal": 1.0},
        n=4,
        initial_values=start,
        pbt_init_random=True,
        pbt_search_space=str(space),
        seed=0,
    )
    assert m.shaping[0]["lure"] == 0.05 and m.hparams[0]["learning_rate"] == 3e-4
    drawn = [m.shaping[p]["lure"] for p in range(1, 4)]
    assert all(0.001 <= v <= 0.1 for v in drawn) and len(set(drawn + [0.05])) == 4
    assert all(m.hparams[p]["learning_rate"] == 3e-4 for p in range(4))  # not tuned: kept
    assert all(m.shaping[p]["goal"] == 1.0 for p in range(4))  # not tuned, not in --policy_values


def test_policy_replaced_in_an_update_is_not_a_source_in_the_same_update(tmp_path):
    # Elo ranking keeps a replaced member's rating for the whole update() call: without the
    # guard, a later member could copy it before its learner has imported the new weights.
    chains = 0
    copies = 0
    for seed in range(60):
        mgr = make(
            tmp_path / f"s{seed}",
            n=4,
            seed=seed,
            pbt_target_objective="elo",
            pbt_exploit="tournament",
            pbt_start_mutation=0,
            pbt_period_env_steps=100,
        )
        decisions = mgr.update([100] * 4, ratings=[1300.0, 1400.0, 1250.0, 1100.0])
        replaced = set()
        for d in decisions:
            if d.source_id is not None:
                copies += 1
                chains += d.source_id in replaced
                replaced.add(d.policy_id)
    assert copies >= 30  # the setting does copy often, so the check below means something
    assert chains == 0


def test_lineage_events_of_an_unsaved_step_are_dropped_on_resume(tmp_path):
    """The process died between a step's lineage lines and its state.json: the resumed run
    takes that step again, and the lineage holds it once, not twice."""
    mgr = make(tmp_path)
    feed(mgr, GOOD_TO_BAD)
    mgr.update([0] * N)
    assert mgr.update([3000] * N)
    committed = read_events(lineage_path(str(tmp_path)))
    with open(mgr.state_path) as f:
        state = f.read()
    feed(mgr, GOOD_TO_BAD, seed=3)
    assert mgr.update([4000] * N)
    assert len(read_events(lineage_path(str(tmp_path)))) > len(committed)
    with open(mgr.state_path, "w") as f:  # as if the step's state.json was never written
        f.write(state)

    again = make(tmp_path)
    assert read_events(lineage_path(str(tmp_path))) == committed
    assert again.last_update == [3000] * N
    feed(again, GOOD_TO_BAD, seed=3)
    redone = again.update([4000] * N)
    events = read_events(lineage_path(str(tmp_path)))
    assert len(events) == len(committed) + len(redone)
    assert [e["env_steps"] for e in events].count(4000) == len(redone)


def test_a_step_that_fails_to_save_leaves_the_state_it_found(tmp_path, monkeypatch):
    mgr = make(tmp_path)
    feed(mgr, GOOD_TO_BAD)
    mgr.update([0] * N)
    before = (
        [dict(h) for h in mgr.hparams],
        list(mgr.last_update),
        mgr.objectives(),
        mgr.lineage_events,
        mgr.rng.bit_generator.state,
    )

    def full_disk():
        raise OSError(28, "No space left on device")

    lineage_before = open(lineage_path(str(tmp_path))).read()
    files_before = [read_json(policy_cfg_path(str(tmp_path), p)) for p in range(N)]
    monkeypatch.setattr(mgr, "save", full_disk)
    with pytest.raises(OSError):
        mgr.update([3000] * N)
    after = (
        mgr.hparams,
        mgr.last_update,
        mgr.objectives(),
        mgr.lineage_events,
        mgr.rng.bit_generator.state,
    )
    assert after == before
    # on disk too: the failed step's lineage lines and policy files are gone
    assert open(lineage_path(str(tmp_path))).read() == lineage_before
    assert [read_json(policy_cfg_path(str(tmp_path), p)) for p in range(N)] == files_before
    monkeypatch.undo()
    decisions = mgr.update([3000] * N)  # the step is taken once the disk has room
    assert decisions
    events = read_events(lineage_path(str(tmp_path)))
    assert len(events) == mgr.lineage_events  # the file holds what the state accounts for
    assert {e["policy"] for e in events[-len(decisions) :]} == {d.policy_id for d in decisions}


def test_a_rebuilt_state_waits_for_real_step_counts(tmp_path):
    """Rebuilt from the policy files (state.json lost), the last updates are unknown: the
    zeros a resumed runner holds before its learners report must not start the period, or
    every member past it would be due at once."""
    mgr = make(tmp_path, pbt_start_mutation=0)
    feed(mgr, GOOD_TO_BAD)
    mgr.update([0] * N)
    assert mgr.update([3000] * N)
    os.remove(mgr.state_path)
    again = make(tmp_path, pbt_start_mutation=0)
    assert again.rebuilt_note and again.last_update == [None] * N
    assert again.update([0] * N) == []
    assert again.last_update == [None] * N
    feed(again, GOOD_TO_BAD)
    assert again.update([3000] * N) == []  # the resumed counts: a period starts here
    assert again.last_update == [3000] * N
    assert again.update([3999] * N) == []
    assert again.update([4000] * N)


def test_a_member_with_too_few_episodes_waits_and_keeps_its_period(tmp_path):
    """Not judged on one lucky game: a member with fewer than MIN_EPISODES_TO_RANK episodes
    is neither ranked nor due; its period starts counting once it has them."""
    mgr = make(tmp_path, pbt_start_mutation=0)
    feed(mgr, [0.6, 0.7, None, 0.3, 0.5, 0.4])
    mgr.record_episode(2, 1.0)  # one game only
    for seed in range(20):
        mgr.rng = np.random.default_rng(seed)
        for d in mgr.update([1000 * (seed + 1)] * N):
            assert d.source_id != 2, d.log_line
    assert mgr.last_update[2] == 0  # waited all along
    feed(mgr, [None, None, 0.9, None, None, None], episodes=4)
    mgr.update([30_000] * N)
    assert mgr.last_update[2] == 30_000


def test_the_reference_holds_no_bottom_place(tmp_path):
    """Three members, the protected reference last: the bottom place goes to the worst of
    the others, who copies the best (the reference used to take it, and nobody copied)."""
    mgr = make(tmp_path, n=3, pbt_start_mutation=0, pbt_replace_fraction=0.3)
    feed(mgr, [0.1, 0.9, 0.5])
    decisions = mgr.update([1000] * 3)
    assert [(d.policy_id, d.source_id) for d in decisions] == [(2, 1)]


def test_tied_members_take_turns_at_the_top(tmp_path):
    """Equal objectives in a random order: the same ids are not always top (and never
    explore); when all are equal, every member explores."""
    mgr = make(tmp_path, n=8, pbt_start_mutation=0, pbt_mutation_rate=1.0)
    touched = {p: 0 for p in range(8)}
    for r in range(1, 31):
        for p, value in enumerate([1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]):
            mgr._windows[p].clear()  # exact ties every round (copies would change windows)
            for _ in range(10):
                mgr.record_episode(p, value)
        for d in mgr.update([1000 * r] * 8):
            touched[d.policy_id] += 1
    # k = 3 of four tied at the top: by id, p1 and p2 were always top and never changed
    assert touched[1] > 0 and touched[2] > 0, touched
    for p in range(8):
        mgr._windows[p].clear()
        for _ in range(10):
            mgr.record_episode(p, 0.5)
    assert {d.policy_id for d in mgr.update([40_000] * 8)} == set(range(1, 8))


def test_one_step_ranks_the_population_once(tmp_path):
    """The worst members have the lowest ids: each one replaced must not shrink the ranking
    the next ones see (it did: 7 of 8 members copied in one step where k = 3)."""
    mgr = make(tmp_path, n=8, pbt_start_mutation=0)
    feed(mgr, [0.9, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7])
    decisions = mgr.update([1000] * 8)
    copies = {d.policy_id: d.source_id for d in decisions if d.source_id is not None}
    assert sorted(copies) == [1, 2, 3]  # the bottom 3 of 8 (ceil(0.3 * 8))
    assert set(copies.values()) <= {0, 6, 7}  # from the top 3
    # with Elo ratings alike
    elo = make(tmp_path / "elo", n=8, pbt_start_mutation=0, pbt_target_objective="elo")
    ratings = [1600.0, 1000.0, 1050.0, 1100.0, 1150.0, 1200.0, 1250.0, 1300.0]
    decisions = elo.update([1000] * 8, ratings=ratings)
    assert sorted(d.policy_id for d in decisions if d.source_id is not None) == [1, 2, 3]


def test_ties_are_ordered_once_per_step(tmp_path):
    """Four members at 0.50 and four at 0.49, too close to copy: every step leaves exactly
    k = 3 members alone as top (with an order drawn per member, 1 to 4 of them)."""
    for seed in range(40):
        mgr = make(tmp_path / str(seed), n=8, seed=seed, pbt_start_mutation=0,
                   pbt_mutation_rate=1.0, pbt_mutate_reference_policy=True)  # fmt: skip
        for p, value in enumerate([0.5, 0.49] * 4):
            for _ in range(10):
                mgr.record_episode(p, value)
        decisions = mgr.update([1000] * 8)
        assert all(d.source_id is None for d in decisions)
        assert len(decisions) == 8 - 3, seed  # every member but the top 3 explores


def test_a_member_whose_copy_has_not_landed_is_not_due(tmp_path):
    """Its copy's values are still on their way to its learner: a newer decision sent now
    would land first and be overwritten by them."""
    mgr = make(tmp_path, n=4, pbt_target_objective="elo", pbt_exploit="tournament",
               pbt_start_mutation=0, pbt_period_env_steps=100, pbt_mutation_rate=1.0)  # fmt: skip
    ratings = [1300.0, 1400.0, 1250.0, 1100.0]
    copying: set = set()
    for seed_step in range(1, 40):
        decisions = mgr.update([100 * seed_step] * 4, ratings=ratings, copying=copying)
        assert not {d.policy_id for d in decisions} & copying
        copying = {d.policy_id for d in decisions if d.source_id is not None}
        if copying:
            later = mgr.update([100 * seed_step + 100] * 4, ratings=ratings, copying=copying)
            assert not {d.policy_id for d in later} & copying
            assert all(mgr.last_update[p] == 100 * seed_step for p in copying)  # not spent
            return
    pytest.fail("no copy in 39 steps")


def test_members_that_cannot_hand_over_their_weights_are_ranked_but_no_source(tmp_path):
    """`no_source` (over Ray: the members of a node group that finished and stopped): they
    keep their places in the ranking, so the bottom is the same, but the copies come from the
    other top members."""
    n = 8
    for seed in range(10):
        free = make(tmp_path / f"free{seed}", n=n, seed=seed, pbt_start_mutation=0)
        held = make(tmp_path / f"held{seed}", n=n, seed=seed, pbt_start_mutation=0)
        means = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.95, 1.0]
        feed(free, means, seed=seed)
        feed(held, means, seed=seed)
        copied = {d.policy_id: d.source_id for d in free.update([1000] * n) if d.source_id}
        kept = {
            d.policy_id: d.source_id
            for d in held.update([1000] * n, no_source={6, 7})
            if d.source_id is not None
        }
        assert copied and set(kept) == set(copied), (seed, copied, kept)  # the same bottom
        assert not set(kept.values()) & {6, 7}, (seed, kept)


def test_the_best_member_shown_is_one_pbt_can_rank(tmp_path):
    """Ranking on games against snapshots or a scripted player, the status line and the
    summary named as best a member with one game won (just after a copy, say): PBT itself
    ranks a member only once it has its minimum of episodes."""
    mgr = make(tmp_path, n=3)
    for _ in range(40):
        mgr.record_episode(0, 0.8)
        mgr.record_episode(1, 0.6)
    mgr.record_episode(2, 1.0)
    assert mgr.objectives()[2] == 1.0  # what is logged for it
    assert mgr.ranked_objectives() == {0: 0.8, 1: 0.6, 2: None}


def test_the_run_names_as_best_a_member_pbt_can_rank(tmp_path):
    import envs  # noqa: F401  (registers the arena)
    from rl_pbt import parse_cfg
    from rl_pbt.runtime.runner import Runner

    runner = Runner(
        parse_cfg(["--env=arena_duel", "--serial_mode", "--num_workers=1", "--num_policies=3",
                   "--with_pbt", "--pbt_target_objective=vs_snapshots",
                   "--selfplay_snapshot_prob=0.3", f"--train_dir={tmp_path}",
                   "--experiment=b"])
    )  # fmt: skip
    for _ in range(40):
        runner.pbt.record_episode(0, 0.8)
        runner.pbt.record_episode(1, 0.6)
    runner.pbt.record_episode(2, 1.0)
    assert runner.stats.best_policy() == 0
    runner.stats.close()
    runner.run_lock.release()
