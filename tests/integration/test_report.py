"""launch.report: figures and the offline HTML page from a run's scalar log, lineage, policy
files and ratings; synthetic runs written here, then one short real PBT run."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from launch import report
from rl_pbt.logging.files import policy_cfg_path, policy_shaping_path, scalars_path
from rl_pbt.pbt.lineage import append_event, lineage_path, make_event, read_events

pytest.importorskip("matplotlib")
from matplotlib.image import imread  # noqa: E402
from matplotlib.patches import FancyArrowPatch  # noqa: E402

from rl_pbt.logging import report_figures  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MEMBERS = 8
PERIOD = 2000


# ------------------------------------------------------------------ synthetic runs


def write_scalars(exp, members, periods, pbt=True, torn=False, resume_at=None, elo=False):
    """A scalar log as the runner writes it: one record per member and summary period."""
    path = scalars_path(str(exp))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    rng = np.random.default_rng(0)
    lines = []

    def period(k, p):
        scalars = {
            "episode/true_objective": float(0.1 * p + k / periods + rng.normal(0, 0.02)),
            "episode/reward": float(10 * k + rng.normal()),
            "perf/fps": 5000.0,
            "train/velocity": 1.0,  # not an Elo rating, though its name holds "elo"
        }
        if elo:
            scalars["selfplay/elo"] = 1200.0 + 5.0 * k * (p - 1)
        if pbt:
            scalars.update(
                {"pbt/objective": scalars["episode/true_objective"], "pbt/learning_rate": 1e-3}
            )
        return {"policy": p, "env_steps": k * PERIOD, "time": 1e9 + k, "scalars": scalars}

    for k in range(periods):
        lines += [json.dumps(period(k, p)) for p in range(members)]
    if resume_at is not None:  # a resume from an earlier checkpoint logs those steps again
        for p in range(members):  # logged before the learners report their restored steps
            lines.append(json.dumps({**period(0, p), "env_steps": 0}))
        for k in range(resume_at, periods + 3):
            lines += [json.dumps(period(k, p)) for p in range(members)]
    text = "\n".join(lines) + "\n"
    if torn:
        text += '{"policy": 0, "env_steps": 99999, "sca'
    with open(path, "w") as f:
        f.write(text)


def write_lineage(exp, members, periods):
    """Init events, then per period a copy (bottom from top) and a mutation; returns the
    number of copies."""
    path = lineage_path(str(exp))
    values = {
        "learning_rate": 1e-3,
        "exploration_loss_coeff": 3e-3,
        "rew.goal": 1.0,
        "rew.lure": 0.5,
        "entropy_target": 1e-4,
        "gamma": 0.99,
    }
    current = {p: dict(values) for p in range(members)}
    for p in range(members):
        append_event(path, make_event(p, "init", 0, {k: [None, v] for k, v in values.items()}))
    rng = np.random.default_rng(1)
    copies = 0
    for k in range(2, periods, 3):
        target, source = int(rng.integers(1, members)), int(rng.integers(0, members))
        if target == source:
            continue
        new = dict(current[source])
        new["learning_rate"] *= float(rng.choice([0.8, 1.25]))
        new["rew.goal"] *= 1.2
        new["entropy_target"] *= 10.0 ** float(rng.uniform(-1.5, 1.5))
        changes = {n: [current[target][n], v] for n, v in new.items() if v != current[target][n]}
        objectives = {q: 0.1 * q for q in range(members)}
        append_event(path, make_event(target, "replace", k * PERIOD, changes, source, objectives))
        current[target] = new
        copies += 1
        mutant = int(rng.integers(1, members))
        old = current[mutant]["rew.lure"]
        append_event(
            path, make_event(mutant, "mutate", k * PERIOD + 500, {"rew.lure": [old, old * 0.7]})
        )
        current[mutant]["rew.lure"] = old * 0.7
    for p in range(members):
        hp = {k: v for k, v in current[p].items() if not k.startswith("rew.")}
        with open(policy_cfg_path(str(exp), p), "w") as f:
            json.dump(hp, f)
        with open(policy_shaping_path(str(exp), p), "w") as f:
            json.dump({"goal": current[p]["rew.goal"], "lure": current[p]["rew.lure"]}, f)
    return copies


def make_run(tmp_path, name="syn", pbt=True, members=MEMBERS, periods=40, **scalars_kw):
    exp = tmp_path / name
    exp.mkdir()
    with open(exp / "config.json", "w") as f:
        json.dump({"with_pbt": pbt, "num_policies": members, "pbt_search_space": None}, f)
    write_scalars(exp, members, periods, pbt=pbt, **scalars_kw)
    copies = write_lineage(exp, members, periods) if pbt else 0
    return exp, copies


def assert_real_image(path, min_side=200):
    image = imread(str(path))
    assert image.shape[0] > min_side and image.shape[1] > min_side, image.shape
    assert float(np.std(image[..., :3])) > 0.02, f"{path} looks blank"


def run_report(tmp_path, name, capsys):
    code = report.main([f"--experiment={name}", f"--train_dir={tmp_path}"])
    out = capsys.readouterr().out
    assert code == 0, out
    return out


# ------------------------------------------------------------------ synthetic tests


def test_report_of_a_pbt_run_writes_page_and_figures(tmp_path, capsys):
    exp, copies = make_run(tmp_path, torn=True)
    assert copies >= 5
    out = run_report(tmp_path, "syn", capsys)
    index = exp / "report" / "index.html"
    assert out.strip().splitlines()[-1] == str(index.resolve())
    page = index.read_text()
    for png in ("objective.png", "schedules.png", "family_tree.png"):
        assert_real_image(exp / "report" / png)
    assert page.count("data:image/png;base64,") == page.count("<img") == 3  # opens offline
    assert "skipped 1 unreadable line" in page  # the torn line of a running run
    assert "<table>" in page and page.count("<tr") == MEMBERS + 1
    assert "no rated self-play matches" in out


def test_family_tree_draws_one_arrow_per_copy(tmp_path):
    exp, copies = make_run(tmp_path)
    events = read_events(lineage_path(str(exp)))
    replaced = sum(e["action"] == "replace" for e in events)
    assert replaced == copies
    fig, drawn = report_figures.family_tree_figure(events, {p: 80_000 for p in range(MEMBERS)})
    arrows = [a for a in fig.axes[0].patches if isinstance(a, FancyArrowPatch)]
    assert drawn == len(arrows) == replaced
    # lineage lines of one member: a mutation adds no segment, a copy starts a new one
    assert f"{replaced} weight copies" in fig.axes[0].get_title()


def test_schedule_axes_follow_the_search_space(tmp_path):
    exp, _ = make_run(tmp_path)
    events = read_events(lineage_path(str(exp)))
    schedules = report.value_schedules(events)
    names = ["learning_rate", "rew.goal", "entropy_target", "rew.lure"]
    kinds = report.value_kinds({}, names, [])
    assert kinds["learning_rate"] == "log_float" and kinds["entropy_target"] is None
    fig, scales = report_figures.schedules_figure(
        {n: schedules[n] for n in names}, {p: 80_000 for p in range(MEMBERS)}, kinds
    )
    lr_values = [v for _, vals in schedules["learning_rate"].values() for v in vals]
    assert max(lr_values) / min(lr_values) < 100  # log because the search space says so
    assert scales == {
        "learning_rate": "log",
        "rew.goal": "linear",
        "entropy_target": "log",
        "rew.lure": "linear",
    }
    by_title = {ax.get_title().split(" ")[0]: ax.get_yscale() for ax in fig.axes}
    assert by_title == scales
    # not known: log only when positive and wider than two decades
    assert report_figures.choose_log_scale([1e-4, 1e-1]) is True
    assert report_figures.choose_log_scale([1e-2, 1e-1]) is False
    assert report_figures.choose_log_scale([-1.0, 1e3]) is False
    assert report_figures.choose_log_scale([0.5, 0.6], "log_float") is True


def test_run_without_pbt_gets_objective_curves_only(tmp_path, capsys):
    exp, _ = make_run(tmp_path, name="plain", pbt=False, members=2)
    out = run_report(tmp_path, "plain", capsys)
    assert report.NO_PBT in out
    assert "PBT events" not in out  # no lineage: no text family tree either
    assert sorted(os.listdir(exp / "report")) == ["index.html", "objective.png"]
    assert_real_image(exp / "report" / "objective.png")
    assert report.NO_PBT in (exp / "report" / "index.html").read_text()


def test_resumed_run_keeps_the_newer_records(tmp_path):
    exp, _ = make_run(tmp_path, name="resumed", members=2, periods=10, resume_at=6, torn=True)
    records, skipped = report.read_scalars(scalars_path(str(exp)))
    assert skipped == 1
    timelines, superseded = report.member_timelines(records)
    assert superseded == 2 * 3  # periods 7..9 of both members were lost; 6 is logged again
    for rows in timelines.values():
        steps = [r["env_steps"] for r in rows]
        assert steps == sorted(set(steps)) and steps[-1] == 12 * PERIOD


def test_selfplay_run_draws_elo_and_cross_play(tmp_path, capsys):
    exp, _ = make_run(tmp_path, name="duel", members=3, periods=12)
    with open(exp / "elo.json", "w") as f:
        json.dump(
            {
                "initial": 1200,
                "k": 16,
                "entries": [
                    [0, 1260.0, 40],
                    [1, 1190.0, 38],
                    [2, 1150.0, 30],
                    ["p0@8000", 1200, 9],
                ],
            },
            f,
        )
    out = run_report(tmp_path, "duel", capsys)
    assert_real_image(exp / "report" / "elo.png")
    assert "no cross-play win rates on disk" in out and "no Elo curves over time" in out
    with open(exp / "cross_play.json", "w") as f:
        json.dump(
            {
                "players": ["p0", "p1", "p2"],
                "win_rate": [[None, 0.7, 0.9], [0.3, None, 0.6], [0.1, 0.4, None]],
            },
            f,
        )
    write_scalars(exp, 3, 12, elo=True)
    out = run_report(tmp_path, "duel", capsys)
    assert_real_image(exp / "report" / "cross_play.png")
    assert_real_image(exp / "report" / "elo.png")
    assert "cross-play" not in out and "Elo" not in out
    page = (exp / "report" / "index.html").read_text()
    assert "selfplay/elo per member over env steps" in page


def test_bad_input_is_one_line_and_status_2(tmp_path, capsys):
    assert report.main(["--experiment=nope", f"--train_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--experiment=nope" in err[0] and "no experiment folder" in err[0]
    assert report.main(["--experiment=../up", f"--train_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--experiment='../up' is a path" in err[0]
    (tmp_path / "stray").mkdir()
    assert report.main(["--experiment=stray", f"--train_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not an experiment folder" in err[0]
    assert not (tmp_path / "stray" / "report").exists()


def test_without_matplotlib_the_import_works_and_the_report_names_the_extra(tmp_path):
    make_run(tmp_path, members=2, periods=4)
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"  # as if it were not installed
        "import launch.report\n"
        f"sys.exit(launch.report.main(['--experiment=syn', '--train_dir={tmp_path}']))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and 'pip install "rl_pbt[report]"' in err[0], done.stderr
    assert not (tmp_path / "syn" / "report").exists()


# ------------------------------------------------------------------ a real short run


def test_report_of_a_short_pbt_run(short_pbt_run, capsys):
    """The report of the real run of tests/integration/conftest.py, written into its folder."""
    exp = short_pbt_run.exp
    out = run_report(short_pbt_run.train_dir, short_pbt_run.experiment, capsys)
    assert out.strip().splitlines()[-1] == str((exp / "report" / "index.html").resolve())
    copies = sum(e["action"] == "replace" for e in read_events(lineage_path(str(exp))))
    assert copies >= 1
    for png in ("schedules.png", "family_tree.png"):
        assert_real_image(exp / "report" / png)
    page = (exp / "report" / "index.html").read_text()
    assert f"{copies} weight copies" in page
    assert os.path.isfile(scalars_path(str(exp)))
    assert_real_image(exp / "report" / "objective.png")
    assert page.count("data:image/png;base64,") == 3
