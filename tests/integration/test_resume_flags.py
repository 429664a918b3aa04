"""A resume that changes a learning flag: without PBT every policy trains with the new value
from the resume on (it kept its checkpoint's before, while config.json claimed the new one);
with PBT each member keeps PBT's value; both are said at the start."""

from rl_pbt import parse_cfg, train
from rl_pbt.learning.checkpoints import latest_checkpoint, read_checkpoint

BASE = ["--env=CartPole-v1", "--serial_mode", "--num_workers=1", "--num_envs_per_worker=4",
        "--rollout=16", "--batch_size=64", "--encoder_mlp_layers", "16", "--seed=3"]  # fmt: skip


def _lr(tmp_path, exp, policy=0):
    state = read_checkpoint(latest_checkpoint(str(tmp_path / exp / f"checkpoint_p{policy}")))
    return state["hparams"]["learning_rate"], state["env_steps"]


def test_a_changed_learning_rate_applies_at_the_resume_and_is_said(tmp_path, capsys):
    run = BASE + [f"--train_dir={tmp_path}", "--experiment=lr"]
    assert train(parse_cfg(run + ["--learning_rate=1e-4", "--train_for_env_steps=2000"])) == 0
    lr, steps = _lr(tmp_path, "lr")
    assert lr == 1e-4 and steps >= 2000
    capsys.readouterr()
    assert train(parse_cfg(run + ["--learning_rate=1e-2", "--train_for_env_steps=4000"])) == 0
    out = capsys.readouterr().out
    assert "--learning_rate=0.01 (the run had 0.0001)" in out
    assert "every policy trains with the new learning_rate=0.01 from here on" in out
    lr, steps = _lr(tmp_path, "lr")
    assert lr == 1e-2 and steps >= 4000


def test_a_pbt_run_keeps_each_members_value_and_says_so(tmp_path, capsys):
    run = BASE + ["--num_policies=2", "--with_pbt", f"--train_dir={tmp_path}", "--experiment=p"]
    assert train(parse_cfg(run + ["--learning_rate=1e-4", "--train_for_env_steps=2000"])) == 0
    capsys.readouterr()
    assert train(parse_cfg(run + ["--learning_rate=1e-2", "--train_for_env_steps=3000"])) == 0
    out = capsys.readouterr().out
    assert "--learning_rate: each member keeps the value its checkpoint holds (PBT's)" in out
    assert [_lr(tmp_path, "p", p)[0] for p in (0, 1)] == [1e-4, 1e-4]
    # and without --with_pbt: PBT stops, said so, the values stay
    plain = [a for a in run if a != "--with_pbt"] + ["--train_for_env_steps=4000"]
    assert train(parse_cfg(plain + ["--learning_rate=1e-3"])) == 0
    out = capsys.readouterr().out
    assert "the run trained with --with_pbt and this resume has none: PBT stops" in out
    assert [_lr(tmp_path, "p", p)[0] for p in (0, 1)] == [1e-4, 1e-4]


def test_a_pbt_run_resumed_without_pbt_keeps_each_members_shaping(tmp_path):
    """The shaping PBT gave each member is what its rollouts use after a resume without
    --with_pbt (they went back to the env's defaults), as the learning values do."""
    from rl_pbt.logging.files import policy_shaping_path, read_json
    from rl_pbt.pbt.search_space import flatten_shaping
    from rl_pbt.runtime.runner import Runner

    run = ["--env=lure", "--serial_mode", "--num_workers=1", "--num_envs_per_worker=4",
           "--rollout=16", "--batch_size=64", "--encoder_mlp_layers", "16", "--seed=3",
           "--num_policies=2", f"--train_dir={tmp_path}", "--experiment=s"]  # fmt: skip
    values = tmp_path / "values.json"
    values.write_text('[{"rew.lure": 1.5}, {"rew.lure": 0.5}]')
    pbt = ["--with_pbt", f"--policy_values={values}", "--train_for_env_steps=1000"]
    assert train(parse_cfg(run + pbt)) == 0
    exp = str(tmp_path / "s")
    runner = Runner(parse_cfg(run + ["--train_for_env_steps=2000"]))
    for p, lure in ((0, 1.5), (1, 0.5)):
        given = flatten_shaping(read_json(policy_shaping_path(exp, p)))
        assert given["rew.lure"] == lure  # what PBT started member p from
        assert flatten_shaping(runner._policy_shaping(p)) == given


def test_the_starting_values_are_not_laid_again_over_pbts_at_a_resume_without_pbt(tmp_path):
    """With the run's --policy_values still on the command line, a resume without --with_pbt
    put every member back on those starting values (learning rate and shaping) while its note
    said each member keeps the values it has."""
    import json

    from rl_pbt.logging.files import policy_shaping_path
    from rl_pbt.pbt.search_space import flatten_shaping
    from rl_pbt.runtime.runner import Runner

    run = ["--env=lure", "--serial_mode", "--num_workers=1", "--num_envs_per_worker=4",
           "--rollout=16", "--batch_size=64", "--encoder_mlp_layers", "16", "--seed=3",
           "--num_policies=2", f"--train_dir={tmp_path}", "--experiment=v"]  # fmt: skip
    values = tmp_path / "values.json"
    values.write_text('[{"rew.lure": 1.5, "learning_rate": 5e-4}, {"rew.lure": 0.5}]')
    start = [f"--policy_values={values}", "--train_for_env_steps=1000"]
    assert train(parse_cfg(run + ["--with_pbt"] + start)) == 0
    exp = tmp_path / "v"
    # what PBT would have made of member 0 by now
    path = policy_shaping_path(str(exp), 0)
    shaping = json.loads(open(path).read())
    shaping["lure"] = 2.5
    open(path, "w").write(json.dumps(shaping))
    runner = Runner(parse_cfg(run + start))
    assert flatten_shaping(runner._policy_shaping(0))["rew.lure"] == 2.5
    assert flatten_shaping(runner._policy_shaping(1))["rew.lure"] == 0.5
    runner._initial_messages()  # the checkpoints' learning values stand: nothing sent
    assert sum(runner.pbt_unapplied.values()) == 0
    runner.stats.close()
    runner.run_lock.release()


def test_changed_adam_flags_apply_at_the_resume(tmp_path):
    """Loading the optimiser's state brought back the first run's eps and betas, for good,
    while the note listed the change and config.json recorded it."""
    import torch

    run = BASE + [f"--train_dir={tmp_path}", "--experiment=adam"]
    assert train(parse_cfg(run + ["--train_for_env_steps=1000"])) == 0
    adam = ["--adam_eps=0.01", "--adam_beta1=0.5", "--adam_beta2=0.9"]
    assert train(parse_cfg(run + adam + ["--train_for_env_steps=2000"])) == 0
    path = latest_checkpoint(str(tmp_path / "adam" / "checkpoint_p0"))
    state = read_checkpoint(path)
    assert state["env_steps"] >= 2000
    group = state["optimizer"]["param_groups"][0]
    assert group["eps"] == 0.01 and tuple(group["betas"]) == (0.5, 0.9)
    assert any(
        torch.is_tensor(v) for st in state["optimizer"]["state"].values() for v in st.values()
    )
