import json
import os

import pytest

from rl_pbt import ConfigError, parse_cfg
from rl_pbt.config.flags import FLAGS


def test_bool_flags_both_forms():
    a = parse_cfg(["--env=CartPole-v1", "--with_pbt", "--num_policies=2"])
    b = parse_cfg(["--env=CartPole-v1", "--with_pbt=True", "--num_policies=2"])
    c = parse_cfg(["--env=CartPole-v1", "--with_pbt=False"])
    assert a.with_pbt is True and b.with_pbt is True and c.with_pbt is False


def test_sample_factory_pbt_defaults():
    cfg = parse_cfg(["--env=CartPole-v1"])
    assert cfg.pbt_period_env_steps == 5_000_000
    assert cfg.pbt_start_mutation == 20_000_000
    assert cfg.pbt_replace_fraction == 0.3
    assert cfg.pbt_mutation_rate == 0.15
    assert cfg.pbt_replace_reward_gap == 0.1
    assert cfg.pbt_replace_reward_gap_absolute == 1e-6
    assert cfg.pbt_optimize_gamma is False
    assert cfg.pbt_target_objective == "true_objective"
    assert (cfg.pbt_perturb_min, cfg.pbt_perturb_max) == (1.1, 1.5)
    assert cfg.pbt_mix_policies_in_one_env is True


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--env=CartPole-v1", "--learning_rate=-0.1"], ["--learning_rate", "-0.1", "> 0"]),
        (["--env=CartPole-v1", "--batch_size=500"], ["--batch_size=500", "--rollout=32"]),
        (["--env=CartPole-v1", "--num_envs_per_worker=3"], ["--num_envs_per_worker=3", "splits"]),
        (["--env=CartPol-v1"], ["--env", "CartPol-v1", "CartPole-v1"]),
        (["--env=CartPole-v1", "--bogus=1"], ["--bogus"]),
        (["--env=CartPole-v1", "--device=tpu"], ["--device", "tpu"]),
        (["--env=CartPole-v1", "--with_pbt"], ["--num_policies", ">= 2"]),
        (["--env=CartPole-v1", "--gamma=1.5"], ["--gamma", "1.5"]),
    ],
)
def test_bad_values_name_flag_and_value(argv, words):
    with pytest.raises(ConfigError) as e:
        parse_cfg(argv)
    for w in words:
        assert w in str(e.value)


def test_preset_then_flags_override(tmp_path):
    preset = tmp_path / "p.json"
    preset.write_text(json.dumps({"learning_rate": 0.005, "rollout": 16, "batch_size": 64}))
    cfg = parse_cfg(["--env=CartPole-v1", f"--preset={preset}", "--rollout=8"])
    assert cfg.learning_rate == 0.005 and cfg.rollout == 8 and cfg.batch_size == 64


def test_env_named_by_preset_gets_its_flags_and_defaults(tmp_path):
    import envs  # noqa: F401  (registers the arena)
    from rl_pbt.envs.registry import env_default_overrides

    preset = tmp_path / "p.json"
    preset.write_text(json.dumps({"env": "arena_duel", "arena_episode_steps": 100}))
    cfg = parse_cfg([f"--preset={preset}", "--learning_rate=0.001"])
    defaults = env_default_overrides("arena_duel")
    assert cfg.encoder_mlp_layers == defaults["encoder_mlp_layers"]  # env default applied
    assert cfg.batch_size == defaults["batch_size"]
    assert cfg.arena_episode_steps == 100  # an env flag set by the preset
    assert cfg.learning_rate == 0.001  # the command line still wins
    same = parse_cfg(["--env=arena_duel", "--arena_episode_steps=100", "--learning_rate=0.001"])
    assert dict(vars(same)) == {**dict(vars(cfg)), "preset": same.preset}


def test_preset_search_space_path_is_relative_to_the_preset(tmp_path, monkeypatch):
    import envs  # noqa: F401  (registers lure)

    (tmp_path / "presets").mkdir()
    (tmp_path / "presets" / "space.json").write_text('{"learning_rate": {"tune": false}}')
    preset = tmp_path / "presets" / "p.json"
    preset.write_text(
        json.dumps(
            {"env": "lure", "with_pbt": True, "num_policies": 2, "pbt_search_space": "space.json"}
        )
    )
    monkeypatch.chdir(tmp_path)  # not the preset's folder
    cfg = parse_cfg([f"--preset={preset}"])
    assert cfg.pbt_search_space == str(tmp_path / "presets" / "space.json")
    shipped = parse_cfg(["--preset=lure_pbt"])  # the shipped preset finds its file from anywhere
    assert os.path.isfile(shipped.pbt_search_space) and shipped.pbt_mutation_rate == 1.0


def test_preset_unknown_key_rejected(tmp_path):
    preset = tmp_path / "p.json"
    preset.write_text(json.dumps({"learning_rat": 0.005}))
    with pytest.raises(ConfigError, match="learning_rat") as err:
        parse_cfg(["--env=CartPole-v1", f"--preset={preset}"])
    assert "did you mean --learning_rate?" in str(err.value) and "p.json" in str(err.value)


@pytest.mark.parametrize(
    "arg, suggestion",
    [("--lerning_rate=1e-3", "--learning_rate"), ("--num_polices", "--num_policies")],
)
def test_misspelt_flag_gets_a_suggestion(arg, suggestion):
    with pytest.raises(ConfigError, match="command line") as err:
        parse_cfg(["--env=CartPole-v1", arg])
    assert f"did you mean {suggestion}" in str(err.value)


def test_unknown_flag_without_close_name_and_stray_words():
    with pytest.raises(ConfigError) as err:
        parse_cfg(["--env=CartPole-v1", "--zzzzzz=1"])
    assert "unknown flag --zzzzzz" in str(err.value) and "did you mean" not in str(err.value)
    with pytest.raises(ConfigError, match="unrecognized arguments: stray"):
        parse_cfg(["--env=CartPole-v1", "stray"])


def test_every_flag_has_help_and_typed_default():
    for f in FLAGS:
        assert f.help
        if f.default is not None:
            assert isinstance(f.default, f.type) or (f.type is float and isinstance(f.default, int))


def test_pbt_extension_flags_parse():
    cfg = parse_cfg(
        [
            "--env=CartPole-v1",
            "--with_pbt",
            "--num_policies=2",
            "--pbt_init_random",
            "--pbt_exploit=ttest",
            "--fused_inference=False",
        ]
    )
    assert cfg.pbt_init_random is True and cfg.pbt_exploit == "ttest"
    assert cfg.fused_inference is False


def test_search_space_entries_are_checked_at_parse_time(tmp_path):
    base = ["--env=CartPole-v1", "--with_pbt", "--num_policies=2"]
    untunable = tmp_path / "a.json"
    untunable.write_text(json.dumps({"gae_lambda": {"type": "float", "low": 0.9, "high": 0.99}}))
    with pytest.raises(ConfigError, match="'gae_lambda' cannot be tuned") as err:
        parse_cfg(base + [f"--pbt_search_space={untunable}"])
    assert "learning_rate" in str(err.value) and "rew.<key>" in str(err.value)
    broken = tmp_path / "b.json"
    broken.write_text('{"learning_rate": 3')
    with pytest.raises(ConfigError, match="--pbt_search_space="):
        parse_cfg(base + [f"--pbt_search_space={broken}"])
    fine = tmp_path / "c.json"  # tunable names, shaping leaves, and an untuned entry pass
    fine.write_text(
        json.dumps(
            {"gamma": {"low": 0.9, "high": 0.999}, "rew.x": {}, "gae_lambda": {"tune": False}}
        )
    )
    assert parse_cfg(base + [f"--pbt_search_space={fine}"]).pbt_search_space == str(fine)
