"""One short 4-member PBT run in parallel mode, trained once for the tests that read it (PBT's
decisions reaching the envs and the replay of a member; the report of a real run)."""

import types

import pytest

from rl_pbt import parse_cfg, register_env, train
from tests.scripted_envs import ShapedCartPole
from tests.small_run import SHORT_PBT_PERIOD, SHORT_PBT_STEPS, SMALL_RUN


def make_shaped(name, cfg, env_config, render_mode=None):
    return ShapedCartPole(env_config["env_id"])


register_env("pbt_cartpole", make_shaped)


@pytest.fixture(scope="session")
def short_pbt_run(tmp_path_factory):
    """The run in train_dir/experiment; its envs logged each shaping they got in shaping_log
    (ShapedCartPole, through $RL_PBT_SHAPING_LOG). Tests read it and may add experiments of
    their own to train_dir, but change nothing of it."""
    train_dir = tmp_path_factory.mktemp("short_pbt")
    log_dir = train_dir / "shaping_log"
    log_dir.mkdir()
    flags = [
        "--env=pbt_cartpole",
        "--with_pbt",
        "--num_policies=4",
        *SMALL_RUN,
        f"--pbt_period_env_steps={SHORT_PBT_PERIOD}",
        f"--pbt_start_mutation={SHORT_PBT_PERIOD}",
        "--pbt_mutation_rate=0.5",
        "--pbt_objective_window=20",
        "--pbt_replace_reward_gap=0.05",
        f"--train_for_env_steps={SHORT_PBT_STEPS}",
        "--learning_rate=1e-3",
        "--experiment_summaries_interval=1",
        f"--train_dir={train_dir}",
        "--experiment=pbt",
        "--status_interval=30",
        "--seed=5",
    ]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RL_PBT_SHAPING_LOG", str(log_dir))
        assert train(parse_cfg(flags)) == 0
    return types.SimpleNamespace(
        train_dir=train_dir, experiment="pbt", exp=train_dir / "pbt", shaping_log=log_dir
    )
