"""Resuming an experiment with another env, population or network stops with one line naming
the flags, before anything in the experiment folder changes (its checkpoints could not load,
and the old config.json and summary.json would be overwritten by a run that then fails)."""

from pathlib import Path

import pytest

from launch.train import main
from rl_pbt.config.parse import Cfg, resume_mismatches
from tests.small_run import SERIAL_CARTPOLE


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A finished 2-policy run (serial, CartPole, a 32-unit MLP) to resume."""
    train_dir = tmp_path_factory.mktemp("runs")
    argv = [*SERIAL_CARTPOLE, "--train_for_env_steps=600", f"--train_dir={train_dir}",
            "--experiment=e"]  # fmt: skip
    assert main(argv) == 0
    return train_dir


@pytest.mark.parametrize(
    "change, words",
    [
        (["--env=Acrobot-v1"], ["--env=Acrobot-v1 (the run has CartPole-v1)"]),
        (["--encoder_mlp_layers", "64", "64"], ["--encoder_mlp_layers=64,64 (the run has 32)"]),
        (["--num_policies=1"], ["--num_policies=1 (the run has 2)"]),
        (["--use_rnn"], ["--use_rnn=True (the run has False)"]),
        (["--nonlinearity=tanh", "--normalize_input=False"],
         ["--nonlinearity=tanh (the run has elu)", "--normalize_input=False"]),
    ],
)  # fmt: skip
def test_resuming_with_another_env_or_network_is_refused(run, change, words, capsys):
    before = files_of(run)
    argv = [*SERIAL_CARTPOLE, "--train_for_env_steps=1200", f"--train_dir={run}",
            "--experiment=e", *change]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for word in [*words, "cannot resume", "--restart_behavior=restart"]:
        assert word in err, (word, err)
    assert files_of(run) == before  # config.json, summary.json, checkpoints untouched


def test_the_same_flags_resume_and_a_new_run_may_change_them(run, capsys):
    argv = [*SERIAL_CARTPOLE, f"--train_dir={run}", "--experiment=e"]
    assert main([*argv, "--train_for_env_steps=1200", "--learning_rate=3e-4"]) == 0
    assert "resumed at version" in capsys.readouterr().out
    # another network is fine once the old run is moved aside
    assert main([*argv, "--train_for_env_steps=600", "--encoder_mlp_layers", "16",
                 "--restart_behavior=restart"]) == 0  # fmt: skip
    assert len(list(run.glob("e_old_*"))) == 1


def test_a_config_json_that_is_not_an_object_is_named(tmp_path, capsys):
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "config.json").write_text("[1, 2]")
    argv = [*SERIAL_CARTPOLE, f"--train_dir={tmp_path}", "--experiment=e"]
    assert main([*argv, "--train_for_env_steps=600"]) == 2
    err = capsys.readouterr().err
    assert "config.json is unreadable" in err and "expected a JSON object" in err, err
    assert (tmp_path / "e" / "config.json").read_text() == "[1, 2]"


def test_a_train_dir_that_cannot_be_made_is_one_line(capsys):
    argv = ["--env=CartPole-v1", "--serial_mode", "--train_dir=/proc/no_such/runs"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--train_dir='/proc/no_such/runs': cannot make" in err and "Traceback" not in err


def test_mismatches_compare_values_not_types():
    cfg = Cfg({"env": "a", "num_policies": 2, "encoder_mlp_layers": (32, 32),
               "use_rnn": False, "rnn_size": 64})  # fmt: skip
    saved = {"env": "a", "num_policies": 2, "encoder_mlp_layers": [32, 32], "use_rnn": False,
             "rnn_size": 512, "nonlinearity": "elu"}  # fmt: skip
    assert resume_mismatches(cfg, saved) == []  # rnn_size is unused without an RNN
    assert resume_mismatches(Cfg({**cfg.to_dict(), "use_rnn": True}), saved) == [
        "--use_rnn=True (the run has False)",
        "--rnn_size=64 (the run has 512)",
    ]


def test_a_folder_of_someone_elses_files_is_not_taken_over(tmp_path, capsys):
    """Marking it as a run would let a later --restart_behavior=overwrite delete the files."""
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "precious.txt").write_text("keep")
    (tmp_path / "empty").mkdir()
    base = [*SERIAL_CARTPOLE, f"--train_dir={tmp_path}", "--train_for_env_steps=300"]
    for behavior in ("resume", "overwrite"):
        argv = [*base, "--experiment=mine", f"--restart_behavior={behavior}"]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "already holds files this trainer did not write" in err, err
    assert files_of(tmp_path / "mine") == {"precious.txt": b"keep"}
    assert main([*base, "--experiment=empty"]) == 0  # an empty folder made beforehand is fine


def test_a_policy_whose_checkpoints_are_all_unreadable_is_not_restarted_from_scratch(
    tmp_path, capsys
):
    """Training it anew would rotate its old (perhaps recoverable) checkpoints out."""
    argv = [*SERIAL_CARTPOLE, f"--train_dir={tmp_path}", "--experiment=e",
            "--train_for_env_steps=600", "--keep_checkpoints=3"]  # fmt: skip
    assert main(argv) == 0
    for path in (tmp_path / "e" / "checkpoint_p1").glob("checkpoint_*.pth"):
        path.write_bytes(path.read_bytes()[:100])  # truncated, as by a full disk
    before = files_of(tmp_path / "e")
    assert main([*argv[:-2], "--train_for_env_steps=1200"]) == 2
    err = capsys.readouterr().err
    assert "checkpoints of policy 1" in err and "can be read" in err and "Traceback" not in err
    assert files_of(tmp_path / "e") == before
    # with one readable checkpoint left, the policy resumes from it
    good = sorted((tmp_path / "e" / "checkpoint_p0").glob("checkpoint_*.pth"))[-1]
    newest_p1 = sorted((tmp_path / "e" / "checkpoint_p1").glob("checkpoint_*.pth"))[-1]
    newest_p1.write_bytes(good.read_bytes())
    assert main([*argv[:-2], "--train_for_env_steps=1200"]) == 0


@pytest.mark.parametrize("loss", ["files", "folder"])
def test_a_policy_whose_checkpoints_are_gone_is_not_restarted_from_scratch(tmp_path, capsys, loss):
    """The run recorded env steps of it: resumed from random weights, it would carry on under
    the old step count."""
    argv = [*SERIAL_CARTPOLE, f"--train_dir={tmp_path}", "--experiment=e"]
    assert main([*argv, "--train_for_env_steps=600"]) == 0
    folder = tmp_path / "e" / "checkpoint_p0"
    for path in folder.glob("checkpoint_*.pth"):
        path.unlink()
    if loss == "folder":
        folder.rmdir()
    before = files_of(tmp_path / "e")
    capsys.readouterr()
    assert main([*argv, "--train_for_env_steps=1200"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for word in ["cannot resume", "policy 0 has trained", str(folder), "holds no checkpoint",
                 "restore its checkpoints", "--restart_behavior=overwrite"]:  # fmt: skip
        assert word in err, (word, err)
    assert files_of(tmp_path / "e") == before


def test_a_run_stopped_before_its_first_checkpoint_still_resumes(tmp_path, capsys):
    """No env steps recorded for the policy (no summary.json: the run ended before writing
    one): it starts anew, as before."""
    argv = [*SERIAL_CARTPOLE, f"--train_dir={tmp_path}", "--experiment=e"]
    assert main([*argv, "--train_for_env_steps=600"]) == 0
    for path in (tmp_path / "e" / "checkpoint_p0").glob("checkpoint_*.pth"):
        path.unlink()
    (tmp_path / "e" / "summary.json").unlink()
    assert main([*argv, "--train_for_env_steps=1200"]) == 0
    assert "(resuming)" in capsys.readouterr().out
