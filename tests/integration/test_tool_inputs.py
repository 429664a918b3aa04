"""Bad input to rl-pbt-enjoy, rl-pbt-match, rl-pbt-report and rl-pbt-replay, on small real
runs: each must end with exit status 2 and one line on stderr naming the flag or the file, the
value and what is allowed, without a traceback and without changing anything on disk.
Damaged optional files of a run (summary.json, elo.json, cross_play.json) do not stop the
report: its notes name them as unreadable.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import envs  # noqa: F401  (registers the built-in envs, as the commands do)
from launch import enjoy, match, replay, report

ROOT = Path(__file__).resolve().parents[2]
NO_FOLDER = "/proc/no_such_folder"  # a folder nobody can make, root included


def train(train_dir: Path, *flags: str) -> None:
    argv = [sys.executable, "-m", "launch.train", f"--train_dir={train_dir}", *flags]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """A short PBT run on CartPole (`pbt`: a lineage for members 0 and 1) and a short
    connect four run (`c4`), both with two policies."""
    td = tmp_path_factory.mktemp("runs")
    train(
        td,
        "--env=CartPole-v1",
        "--experiment=pbt",
        "--num_policies=2",
        "--with_pbt",
        "--pbt_period_env_steps=1000",
        "--pbt_start_mutation=1000",
        "--train_for_env_steps=3000",
    )
    train(
        td,
        "--env=connect_four",
        "--experiment=c4",
        "--num_policies=2",
        "--train_for_env_steps=2000",
    )
    return td


@pytest.fixture
def copy_of(runs, tmp_path):
    """copy_of(name) -> a fresh train_dir holding a copy of run `name`, free to damage."""

    def make(name: str) -> Path:
        shutil.copytree(runs / name, tmp_path / name)
        return tmp_path

    return make


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under `folder` (hidden ones included) with a hash of its bytes."""
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = str(path.relative_to(folder))
        out[rel] = hashlib.sha1(path.read_bytes()).hexdigest() if path.is_file() else "dir"
    return out


def fails(capsys, main, argv, *words: str) -> str:
    """Runs `main(argv)`: exit 2, one line on stderr holding every word, no traceback."""
    status = main(argv)
    out, err = capsys.readouterr()
    assert status == 2, (status, out[-1000:], err)
    assert "Traceback" not in out + err, err
    line = err.strip()
    assert line and "\n" not in line, err
    for word in words:
        assert word in line, (word, line)
    return line


# ---------------------------------------------------------------------------- replay


def test_replay_of_a_policy_without_lineage_writes_nothing(runs, capsys):
    before = snapshot(runs)
    source_cfg = (runs / "pbt" / "config.json").read_bytes()
    argv = [f"--train_dir={runs}", "--from_experiment=pbt", "--policy=9"]
    line = fails(capsys, replay.main, argv, "--policy=9", "lineage.jsonl", "members: 0, 1")
    assert "ValueError" not in line
    assert not (runs / "pbt_p9_replay").exists()
    assert (runs / "pbt" / "config.json").read_bytes() == source_cfg
    assert snapshot(runs) == before


def test_replay_into_its_own_source_or_another_run_is_refused(runs, capsys):
    before = snapshot(runs)
    source_cfg = (runs / "pbt" / "config.json").read_bytes()
    base = [f"--train_dir={runs}", "--from_experiment=pbt", "--policy=0"]
    fails(capsys, replay.main, base + ["--experiment=pbt"], "--experiment=pbt", "pbt_p0_replay")
    fails(capsys, replay.main, base + ["--experiment", "pbt"], "--experiment=pbt")
    fails(capsys, replay.main, base + ["--experiment=c4"], "--experiment=c4", "--restart_behavior")
    assert (runs / "pbt" / "config.json").read_bytes() == source_cfg
    assert snapshot(runs) == before


# ---------------------------------------------------------------------------- --save_video


def test_save_video_where_no_file_can_be_written(runs, tmp_path, capsys):
    enjoy_argv = [f"--train_dir={runs}", "--experiment=pbt", "--episodes=1"]
    fails(
        capsys,
        enjoy.main,
        enjoy_argv + [f"--save_video={NO_FOLDER}/v.mp4"],
        f"--save_video={NO_FOLDER}/v.",
        "cannot make the folder",
    )
    match_argv = [f"--train_dir={runs}", "--experiment=c4", "--players", "p0", "p1", "--games=2"]
    line = fails(
        capsys, match.main, match_argv + [f"--save_video={NO_FOLDER}/a.mp4"], "--save_video="
    )
    assert NO_FOLDER in line
    (tmp_path / "old.mp4").mkdir()
    fails(capsys, match.main, match_argv + [f"--save_video={tmp_path}/old.mp4"], "is a folder")
    # a command that fails for another reason leaves no folder made for its video behind
    fails(capsys, enjoy.main, enjoy_argv + ["--policy=7", f"--save_video={tmp_path}/a/b/v.gif"])
    assert os.listdir(tmp_path) == ["old.mp4"] and os.listdir(tmp_path / "old.mp4") == []


# ---------------------------------------------------------------------------- report --dot


def test_report_dot_path_that_cannot_be_written(runs, tmp_path, capsys):
    before = snapshot(runs)
    base = [f"--train_dir={runs}", "--experiment=pbt"]
    fails(capsys, report.main, base + [f"--dot={NO_FOLDER}/t.dot"], f"--dot={NO_FOLDER}/t.dot")
    fails(capsys, report.main, base + [f"--dot={tmp_path}"], f"--dot={tmp_path}", "folder")
    assert snapshot(runs) == before  # checked before the page is written


# ---------------------------------------------------------------------------- match flags


def test_batched_match_in_an_env_without_flat_observations(runs, capsys):
    argv = [f"--train_dir={runs}", "--experiment=c4", "--players", "p0", "p1", "--num_envs=4"]
    before = snapshot(runs)
    line = fails(capsys, match.main, argv, "--num_envs=4", "--num_envs=1", "connect_four")
    assert "Dict" in line and "ValueError" not in line
    assert snapshot(runs) == before  # refused before any game was played or written


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--games=0"], ["--games=0", "at least 1"]),
        (["--games=-3"], ["--games=-3", "at least 1"]),
        (["--max_steps=-5"], ["--max_steps=-5", "at least 1"]),
        (["--seed=-1"], ["--seed=-1", "2**63"]),
        (["--players", "p0", "p0"], ["--players", "'p0' twice"]),
        (["--players", "p0", "c4:p0"], ["--players", "'p0' and 'c4:p0'"]),
        (
            ["--players", "p0", "alphabeta:depth=abc"],
            ["'alphabeta:depth=abc'", "depth='abc'", "an integer", "takes: depth"],
        ),
        (
            ["--players", "p0", "alphabeta:dept=2"],
            ["'alphabeta:dept=2'", "'dept'", "takes: depth"],
        ),
        (["--players", "p0", "random:level=2"], ["'random:level=2'", "no parameters"]),
        # a misspelled scripted player: the env of the run (no --env given) names its players
        (["--players", "p0", "alphabta"], ["'alphabta'", "alphabeta", "for connect_four"]),
        # a player of a run of another env, no --env given: no advice to leave --env out
        (["--players", "p0", "pbt:p0"], ["'pbt:p0' was trained on CartPole-v1", "one env"]),
        (["--temperature=0"], ["--temperature=0.0", "above 0", "--deterministic"]),
        (["--temperature=inf"], ["--temperature=inf", "above 0"]),
        (["--temperature=0.5", "--deterministic"], ["--temperature=0.5", "give one of them"]),
    ],
)
def test_match_values_it_cannot_use(runs, capsys, flags, words):
    argv = [f"--train_dir={runs}", "--experiment=c4", "--players", "p0", "p1", *flags]
    line = fails(capsys, match.main, argv, *words)
    assert "nan" not in line and "make_alphabeta" not in line and "int()" not in line


@pytest.mark.parametrize(
    "flag", ["--episodes=0", "--episodes=-2", "--max_steps=-5", "--max_steps=0"]
)
def test_enjoy_values_it_cannot_use(runs, capsys, flag):
    argv = [f"--train_dir={runs}", "--experiment=pbt", flag]
    before = snapshot(runs)
    line = fails(capsys, enjoy.main, argv, flag, "at least 1")
    assert line.startswith("rl-pbt-enjoy: error: "), line
    assert snapshot(runs) == before


def test_enjoy_temperature_it_cannot_use(runs, capsys):
    argv = [f"--train_dir={runs}", "--experiment=pbt"]
    line = fails(capsys, enjoy.main, [*argv, "--temperature=-1"], "--temperature=-1.0", "above 0")
    assert line.startswith("rl-pbt-enjoy: error: "), line
    fails(capsys, enjoy.main, [*argv, "--temperature=2", "--deterministic"], "give one of them")


# ---------------------------------------------------------------------------- config.json


@pytest.mark.parametrize(
    "text, words",
    [
        ("[1, 2, 3]", ["JSON object", "list"]),
        ("{}", ["no 'env'"]),
        ('{"env": 5}', ["'env' is 5"]),
        ("not json", ["not valid JSON"]),
    ],
)
def test_damaged_config_json_is_named(copy_of, capsys, text, words):
    td = copy_of("pbt")
    config = td / "pbt" / "config.json"
    config.write_text(text)
    fails(capsys, enjoy.main, [f"--train_dir={td}", "--experiment=pbt"], str(config), *words)
    argv = [f"--train_dir={td}", "--experiment=pbt", "--players", "p0", "p1"]
    fails(capsys, match.main, argv, str(config), *words)
    if not text.startswith("{"):  # the report needs little of the config: any object will do
        fails(capsys, report.main, [f"--train_dir={td}", "--experiment=pbt"], str(config))
        assert not (td / "pbt" / "report").exists()
    assert config.read_text() == text


def test_config_with_a_model_flag_of_the_wrong_type_is_named(copy_of, capsys):
    """A hand-edited config.json whose model flag is "x": enjoy and match ended in a TypeError
    traceback from torch (resume and replay named it)."""
    td = copy_of("pbt")
    config = td / "pbt" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "encoder_mlp_layers": "x"}))
    words = [str(config), "--encoder_mlp_layers='x' (in config.json): expected"]
    line = fails(capsys, enjoy.main, [f"--train_dir={td}", "--experiment=pbt"], *words)
    assert "is not a run's config" in line and "Traceback" not in line
    argv = [f"--train_dir={td}", "--experiment=pbt", "--players", "p0", "p1"]
    assert fails(capsys, match.main, argv, *words).startswith("rl-pbt-match: error: ")


def test_another_env_whose_model_lacks_the_runs_features_is_named_as_another_env(runs, capsys):
    """A connect four run (its model sees connect four's own features) played with
    --env=arena_duel: the line blamed --obs_features_set, a flag the user never gave."""
    argv = [f"--train_dir={runs}", "--experiment=c4", "--env=arena_duel"]
    line = fails(capsys, enjoy.main, argv, "disagrees with the run's env connect_four")
    assert "obs_features" not in line
    line = fails(capsys, match.main, [*argv, "--players", "p0", "p1"], "trained on connect_four")
    assert "obs_features" not in line


def test_an_unusable_checkpoint_played_in_another_env_is_named_as_such(copy_of, capsys):
    """Watching a CartPole-v1 run in CartPole-v0 (spaces alike) with its checkpoints damaged:
    the line said the envs differ."""
    td = copy_of("pbt")
    for path in (td / "pbt" / "checkpoint_p0").glob("*.pth"):
        path.write_bytes(path.read_bytes()[:100])
    argv = [f"--train_dir={td}", "--experiment=pbt", "--env=CartPole-v0"]
    line = fails(capsys, enjoy.main, argv, "checkpoint_p0", "usable")
    assert "disagrees" not in line


def test_enjoy_takes_a_sample_factory_enjoy_command_line(runs, capsys):
    """Sample Factory's enjoy takes the training flags (its model cards give --algo=APPO); it
    stopped at "unknown flag --algo". Training flags are dropped with a note, and Sample
    Factory's names of enjoy's own flags are taken. The bound of 600 steps is above
    CartPole-v1's time limit of 500: the episode ends within it however well the member
    balances (with 300, a member that balanced past 300 steps failed the test)."""
    argv = [f"--train_dir={runs}", "--experiment=pbt", "--algo=APPO", "--num_workers", "1",
            "--encoder_mlp_layers", "64", "64", "--device=cpu", "--max_num_episodes=1",
            "--no_render", "--max_num_frames=600", "--eval_deterministic"]  # fmt: skip
    assert enjoy.main(argv) == 0
    out, err = capsys.readouterr()
    assert "note: --algo, --num_workers, --encoder_mlp_layers, --device: training flags" in err
    assert enjoy.build_parser().parse_args(["--experiment=x", "--eval_deterministic",
                                            "--max_num_frames=300"]).deterministic  # fmt: skip


def test_config_naming_an_unregistered_env(copy_of, capsys):
    td = copy_of("c4")
    config = td / "c4" / "config.json"
    cfg = json.loads(config.read_text())
    config.write_text(json.dumps({**cfg, "env": "NoSuch-v9"}))
    words = [str(config), "'NoSuch-v9'", "not registered", "register_env"]
    line = fails(capsys, enjoy.main, [f"--train_dir={td}", "--experiment=c4"], *words)
    assert "--env='NoSuch-v9'" not in line and "--env=NoSuch-v9" not in line
    argv = [f"--train_dir={td}", "--experiment=c4", "--players", "p0", "p1"]
    line = fails(capsys, match.main, argv, *words)
    assert "--env='NoSuch-v9'" not in line and "--env=NoSuch-v9" not in line


def test_an_unregistered_env_given_with_env_says_to_register_it(runs, capsys):
    """The command a run of one's own env printed with --env (or a hand-typed one): the line
    says how to register the env first, as without --env."""
    words = ["--env='my_env'", "unknown env", "register_env('my_env', ...)"]
    argv = [f"--train_dir={runs}", "--experiment=c4", "--env=my_env"]
    players = ["--players", "p0", "p1"]
    for main, more, call in ((enjoy.main, [], "launch.enjoy.main"),
                             (match.main, players, "launch.match.main")):  # fmt: skip
        line = fails(capsys, main, argv + more)
        for word in [*words, call]:
            assert word in line, (word, line)


def test_replay_of_a_run_on_an_unregistered_env_says_to_register_it(copy_of, capsys):
    td = copy_of("pbt")
    config = td / "pbt" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "env": "my_env"}))
    argv = [f"--train_dir={td}", "--from_experiment=pbt", "--policy=1"]
    words = [str(config), "'my_env'", "register_env('my_env', ...)", "launch.replay.main"]
    fails(capsys, replay.main, argv, *words)
    assert not (td / "pbt_p1_replay").exists()


# ---------------------------------------------------------------------------- report notes


def test_report_names_unreadable_run_files(copy_of, capsys):
    td = copy_of("c4")
    exp = td / "c4"
    (exp / "summary.json").write_text('{"policies": ')
    (exp / "elo.json").write_text("not json")
    (exp / "cross_play.json").write_text('{"players": ["p0", "p1"]}')
    assert report.main([f"--train_dir={td}", "--experiment=c4"]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    for name in ("summary.json", "elo.json", "cross_play.json"):
        assert f"{exp / name} is unreadable" in out, (name, out)
    assert "not written yet" not in out and "no rated self-play" not in out
    assert "no cross-play win rates on disk" not in out
    page = (exp / "report" / "index.html").read_text()
    assert "summary.json is unreadable" in page


def test_report_skips_lineage_and_policy_files_of_the_wrong_shape(copy_of, capsys):
    """Valid JSON of the wrong shape (a hand-edited file) is skipped, never a traceback."""
    td = copy_of("pbt")
    exp = td / "pbt"
    with open(exp / "pbt" / "lineage.jsonl", "a") as f:
        f.write('{"policy": "zero", "action": "mutate", "env_steps": 5}\n')
        f.write('{"policy": 1, "action": "mutate", "env_steps": "later"}\n')
    (exp / "policy_00_cfg.json").write_text("[1]")
    assert report.main([f"--train_dir={td}", "--experiment=pbt"]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and (exp / "report" / "index.html").is_file()


def test_report_where_its_folder_cannot_be_made(copy_of, capsys):
    td = copy_of("pbt")
    (td / "pbt" / "report").write_text("a file where the report folder goes")
    argv = [f"--train_dir={td}", "--experiment=pbt"]
    line = fails(capsys, report.main, argv, "cannot write the report")
    assert line.startswith("rl-pbt-report: error: ") and str(td / "pbt" / "report") in line


# ---------------------------------------------------------------------------- games cut short


def test_match_says_when_max_steps_cut_games_short(runs, capsys):
    argv = [f"--train_dir={runs}", "--experiment=c4", "--players", "p0", "random"]
    assert match.main([*argv, "--games=4", "--max_steps=3"]) == 1  # no game of 4 moves ends
    out, err = capsys.readouterr()
    assert "no game ended within --max_steps=3 env steps" in err and "nan" not in out
    # a game takes 7 to 42 moves: each side's 10 games end 1 to 6 of them in 45 steps
    assert match.main([*argv, "--games=20", "--max_steps=45"]) == 0
    out, _ = capsys.readouterr()
    header = out.splitlines()[0]
    note = next(line for line in out.splitlines() if line.startswith("note: "))
    played = int(note.split()[1])
    assert 2 <= played <= 12 and f"({played} games each" in header, out
    assert "of the 20 games of p0 against random ended within --max_steps=45" in note


def test_a_member_past_the_population_is_named_so(runs, capsys):
    argv = [f"--train_dir={runs}", "--experiment=pbt", "--policy=5"]
    line = fails(capsys, enjoy.main, argv, "policy 5:")
    assert line.endswith("has 2 policies (0..1)") and "no checkpoint" not in line, line
    argv = [f"--train_dir={runs}", "--experiment=c4", "--players", "p7", "random", "--games=2"]
    line = fails(capsys, match.main, argv, "policy 7:")
    assert line.endswith("has 2 policies (0..1)") and "no checkpoint" not in line, line


def test_enjoy_says_when_no_episode_ended(runs, capsys):
    argv = [f"--train_dir={runs}", "--experiment=pbt", "--episodes=2", "--max_steps=1"]
    assert enjoy.main(argv) == 1
    out, _ = capsys.readouterr()
    assert "0 of 2 episodes ended within --max_steps=1 env steps; raise it" in out


def test_a_checkpoint_that_does_not_fit_its_own_config_is_named_so(copy_of, capsys):
    """config.json edited after training: the line says so, not that --env (not given)
    disagrees with the run's env."""
    for name in ("pbt", "c4"):
        td = copy_of(name)
        path = td / name / "config.json"
        cfg = json.loads(path.read_text())
        cfg["encoder_mlp_layers"] = [7]
        path.write_text(json.dumps(cfg))
    argv = [f"--train_dir={td}", "--experiment=pbt"]
    line = fails(capsys, enjoy.main, argv, "does not fit", "config.json describes")
    assert "disagrees" not in line
    argv = [f"--train_dir={td}", "--experiment=c4", "--players", "p0", "p1"]
    line = fails(capsys, match.main, argv, "does not fit", "config.json describes")
    assert "differ from --env" not in line


def test_enjoy_and_match_take_no_abbreviated_flags(runs, capsys):
    with pytest.raises(SystemExit):
        enjoy.main([f"--train_dir={runs}", "--exp=pbt"])
    with pytest.raises(SystemExit):
        match.main([f"--train_dir={runs}", "--exp=c4", "--players", "p0", "p1"])
    capsys.readouterr()


def test_replay_names_its_own_flag_when_one_is_misspelled(runs, capsys):
    argv = [f"--train_dir={runs}", "--from_experiment=pbt", "--policy=1", "--polcy=3"]
    line = fails(capsys, replay.main, argv, "unknown flag --polcy", "did you mean --policy?")
    assert line.startswith("rl-pbt-replay: error: ")
    assert not (runs / "pbt_p1_replay").exists()  # nothing was trained


def test_replay_mistakes_in_its_own_flags_are_one_line(capsys):
    """A value argparse refuses, or a missing flag: a usage block and the error before."""
    with pytest.raises(SystemExit) as done:
        replay.main(["--from_experiment=pbt", "--policy=abc"])
    err = capsys.readouterr().err
    assert done.value.code == 2
    assert err == "rl-pbt-replay: error: argument --policy: invalid integer value: 'abc'\n"
    with pytest.raises(SystemExit):
        replay.main([])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "required: --from_experiment, --policy" in err


def test_replay_says_what_it_sets_itself_and_what_a_source_lacks(runs, capsys):
    base = [f"--train_dir={runs}", "--policy=1"]
    line = fails(capsys, replay.main, base + ["--from_experiment=pbt", "--num_policies=3"],
                 "--num_policies: a replay trains one policy; leave it out")  # fmt: skip
    assert line.startswith("rl-pbt-replay: error: ")
    fails(capsys, replay.main, base + ["--from_experiment=pbt", "--with_pbt"], "--with_pbt")
    fails(capsys, replay.main, base + ["--from_experiment=nope"], "no run at", "nope")
    fails(capsys, replay.main, base + ["--from_experiment=c4"],
          "has no PBT lineage", "only a run trained with --with_pbt")  # fmt: skip
    # an error the trainer finds is labelled with the tool the user ran
    line = fails(capsys, replay.main, base + ["--from_experiment=pbt", "--batch_size=7"],
                 "--batch_size")  # fmt: skip
    assert line.startswith("rl-pbt-replay: error: ")
    assert not (runs / "pbt_p1_replay").exists()  # nothing was trained


def test_report_on_a_scalar_log_with_no_readable_line(copy_of, capsys):
    td = copy_of("pbt")
    (td / "pbt" / "stats" / "scalars.jsonl").write_text("{torn\nnot json\n")
    assert report.main([f"--train_dir={td}", "--experiment=pbt"]) == 0
    out = capsys.readouterr().out
    assert "skipped 2 unreadable line(s)" in out
    assert "holds no readable record" in out and "is missing" not in out
