import json
import os

import pytest

from rl_pbt import ConfigError, parse_cfg
from rl_pbt.config.flags import FLAGS, FOREIGN_FLAGS, HELP_GROUPS
from rl_pbt.config.parse import CONFIGS_DIR, help_text, list_presets


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
        (
            ["--env=CartPole-v1", "--num_envs_per_worker=3", "--inference=device"],
            ["--num_envs_per_worker=3", "splits"],
        ),
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


def test_a_flag_of_another_env_says_whose_it_is(tmp_path, monkeypatch):
    from rl_pbt.config.flags import Flag
    from rl_pbt.envs import registry
    from rl_pbt.envs.registry import register_env

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # undone after
    make = lambda *a, **k: None  # noqa: E731 (never called: parsing only)
    register_env("owner_env", make, extra_flags=[Flag("owner_only", int, 1, "a flag of its own")])
    with pytest.raises(ConfigError) as err:
        parse_cfg(["--env=CartPole-v1", "--owner_only=2"])
    message = str(err.value)
    assert message.startswith("--owner_only in the command line is a flag of the env owner_env")
    assert "not of --env=CartPole-v1" in message and "--help --env=NAME" in message
    preset = tmp_path / "p.json"
    preset.write_text(json.dumps({"env": "CartPole-v1", "owner_only": 3}))
    with pytest.raises(ConfigError, match=r"--owner_only in preset .* is a flag of the env"):
        parse_cfg([f"--preset={preset}"])
    assert parse_cfg(["--env=owner_env", "--owner_only=2"]).owner_only == 2


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


# --- strict, friendly command line ---------------------------------------------------------

BASE = ["--env=CartPole-v1"]


@pytest.mark.parametrize(
    "arg, full",
    [
        ("--num_env=4", "--num_envs_per_worker"),
        ("--num_pol=2", "--num_policies"),
        ("--learning", "--learning_rate"),
        ("--with_pb", "--with_pbt"),
    ],
)
def test_abbreviations_are_refused_with_the_full_name(arg, full):
    with pytest.raises(ConfigError) as err:
        parse_cfg(BASE + [arg])
    text = str(err.value)
    assert f"unknown flag --{arg[2:].split('=')[0]} " in text and f"did you mean {full}" in text
    assert "never abbreviated" in text and "\n" not in text


def test_sample_factory_names_are_accepted_with_a_note(capsys):
    cfg = parse_cfg(BASE + ["--algo=APPO", "--rnn_type", "GRU", "--async_rl", "--wandb_user=me"])
    err = capsys.readouterr().err
    assert "--algo=APPO" in err and "always APPO" in err and "--rnn_type=GRU" in err
    assert "--async_rl" in err and "--wandb_user" in err and "--wandb_entity" in err
    assert cfg.wandb_entity == "me"
    assert not any(hasattr(cfg, f.name) for f in FOREIGN_FLAGS)  # nothing foreign is kept
    assert len(err.strip().splitlines()) == 5  # one line each
    assert "--wandb_entity: no effect without --with_wandb" in err  # set by --wandb_user


@pytest.mark.parametrize(
    "arg, words",
    [
        ("--algo=PPO", ["--algo='PPO'", "APPO"]),
        ("--rnn_type=lstm", ["--rnn_type='lstm'", "GRU", "gru"]),
        ("--async_rl=False", ["--async_rl='False'", "True"]),
        ("--rnn_num_layers=2", ["--rnn_num_layers='2'", "1"]),
        ("--wide_aspect_ratio=True", ["--wide_aspect_ratio='True'", "--doom_resolution"]),
        ("--res_w=256", ["--res_w='256'", "--doom_resolution", "128"]),
    ],
)
def test_sample_factory_values_this_trainer_does_not_honour_are_refused(arg, words):
    with pytest.raises(ConfigError) as err:
        parse_cfg(BASE + [arg])
    for w in words:
        assert w in str(err.value)


def test_sample_factorys_doom_command_line_runs_here(capsys):
    """The VizDoom example command of Sample Factory's docs, its values at the defaults here."""
    argv = ["--env=doom_basic", "--algo=APPO", "--env_frameskip=4", "--use_rnn=True"]
    argv += ["--batch_size=2048", "--wide_aspect_ratio=False", "--res_w=128", "--res_h=72"]
    cfg = parse_cfg(argv)
    err = capsys.readouterr().err
    assert cfg.batch_size == 2048 and "--wide_aspect_ratio=False" in err and "--res_h=72" in err


def test_foreign_names_do_not_shadow_real_flags():
    import envs  # noqa: F401  (the built-in envs' own flags)
    from rl_pbt.envs.registry import env_extra_flags, registered_envs

    real = {f.name for f in FLAGS}
    assert not real & {f.name for f in FOREIGN_FLAGS}
    of_envs = {f.name for name in registered_envs() for f in env_extra_flags(name)}
    for f in FOREIGN_FLAGS:
        assert f.renamed_to is None or f.renamed_to in real | of_envs


def test_a_renamed_sample_factory_flag_of_another_env_is_named_as_typed():
    """--num_bots is Sample Factory's --doom_num_bots: on an env without it, the error named
    --doom_num_bots, which the user never typed."""
    with pytest.raises(ConfigError) as err:
        parse_cfg(["--env=CartPole-v1", "--num_bots=3"])
    text = str(err.value)
    want = "--num_bots (Sample Factory's --doom_num_bots) in the command line is a flag of the envs"
    assert text.startswith(want), text


def test_wandb_flags(tmp_path):
    cfg = parse_cfg(BASE)
    assert (cfg.with_wandb, cfg.wandb_project, cfg.wandb_entity) == (False, "rl_pbt", None)
    assert cfg.wandb_group is None and cfg.wandb_tags == []
    comma = parse_cfg(BASE + ["--wandb_tags=pbt, arena", "--wandb_group=g", "--wandb_entity=lab"])
    spaced = parse_cfg(BASE + ["--wandb_tags", "pbt", "arena"])
    assert comma.wandb_tags == spaced.wandb_tags == ["pbt", "arena"]
    assert (comma.wandb_group, comma.wandb_entity) == ("g", "lab")
    preset = tmp_path / "p.json"
    preset.write_text(json.dumps({"env": "CartPole-v1", "wandb_tags": "a,b", "with_wandb": True}))
    from_preset = parse_cfg([f"--preset={preset}"])
    assert from_preset.wandb_tags == ["a", "b"] and from_preset.with_wandb is True
    assert parse_cfg(BASE).wandb_tags is not parse_cfg(BASE).wandb_tags  # no shared default


def test_step_counts_may_be_written_in_scientific_notation():
    cfg = parse_cfg(BASE + ["--train_for_env_steps=2e6", "--encoder_mlp_layers=64,32"])
    assert cfg.train_for_env_steps == 2_000_000 and isinstance(cfg.train_for_env_steps, int)
    assert cfg.encoder_mlp_layers == [64, 32]
    with pytest.raises(ConfigError, match=r"--train_for_env_steps='2.5e0': expected an integer"):
        parse_cfg(BASE + ["--train_for_env_steps=2.5e0"])


def test_every_flag_with_a_value_has_a_check():
    """bool flags are checked by their conversion; every other flag has a check or choices."""
    for f in FLAGS:
        assert f.type is bool or f.check is not None or f.choices is not None, f.name
        assert f.group in HELP_GROUPS, f.name


# --- presets -------------------------------------------------------------------------------
def test_only_real_presets_are_listed():
    presets = list_presets()
    assert {"arena_pbt_demo", "cartpole_benchmark", "lure_pbt"} <= set(presets)
    for other in ("arena_hunter_start", "shaping_only", "pbt_search_space_example"):
        assert other not in presets


@pytest.mark.parametrize("name", list_presets())
def test_every_listed_preset_parses(name, tmp_path):
    import envs  # noqa: F401  (the presets name built-in envs)

    cfg = parse_cfg([f"--preset={name}", f"--train_dir={tmp_path}"])
    assert cfg.env and cfg.preset == name


@pytest.mark.parametrize(
    "name, flag",
    [("arena_hunter_start", "--policy_values="), ("shaping_only", "--pbt_search_space=")],
)
def test_files_that_are_not_presets_say_what_they_are(name, flag):
    with pytest.raises(ConfigError) as err:
        parse_cfg([f"--preset={name}"])
    text = str(err.value)
    assert f"--preset={name}" in text and "not a preset" in text
    assert flag + str(CONFIGS_DIR / f"{name}.json") in text


def test_unknown_preset_lists_real_presets_with_a_suggestion():
    with pytest.raises(ConfigError) as err:
        parse_cfg(BASE + ["--preset=lure_pb"])
    text = str(err.value)
    assert "did you mean lure_pbt?" in text and "cartpole_benchmark" in text
    assert "shaping_only" not in text and "arena_hunter_start" not in text


def test_comment_keys_in_a_preset_are_ignored(tmp_path):
    preset = tmp_path / "p.json"
    preset.write_text(json.dumps({"_comment": "a note", "env": "CartPole-v1", "rollout": 16}))
    assert parse_cfg([f"--preset={preset}", "--batch_size=64"]).rollout == 16


# --- help ----------------------------------------------------------------------------------
def run_help(argv, capsys):
    with pytest.raises(SystemExit) as done:
        parse_cfg(argv)
    assert done.value.code == 0
    return capsys.readouterr().out


def test_help_is_grouped_and_shows_defaults(capsys):
    out = run_help(["--help"], capsys)
    titles = [f"{title} (--help={key}):" for key, title in HELP_GROUPS.items()]
    positions = [out.index(t) for t in titles]
    assert positions == sorted(positions)  # in topic order
    assert "--learning_rate FLOAT" in out and "(default: 0.0001)" in out
    assert "--wandb_project STR" in out and "(default: rl_pbt)" in out
    assert "--help=env --env=NAME" in out  # how to see env flags
    assert "--algo=APPO" in out  # the Sample Factory names


@pytest.mark.parametrize("argv", [["--help=pbt"], ["--help", "pbt"], ["-h", "PBT"]])
def test_help_for_one_topic(argv, capsys):
    out = run_help(argv, capsys)
    assert "--pbt_mutation_rate" in out and "--with_pbt" in out
    assert "--learning_rate" not in out and "--num_workers" not in out


def test_help_with_an_env_shows_its_flags(capsys):
    import envs  # noqa: F401

    out = run_help(["--help", "--env=arena_duel"], capsys)
    assert "flags of --env=arena_duel" in out and "--arena_episode_steps INT" in out
    assert "encoder_mlp_layers=128,128" in out  # the defaults the env changes
    assert "--arena_episode_steps" not in run_help(["--help"], capsys)


def test_help_with_an_unknown_topic_lists_the_topics():
    with pytest.raises(ConfigError) as err:
        parse_cfg(["--help=ppo"])
    text = str(err.value)
    assert "--help=ppo" in text and "\n" not in text
    for key in HELP_GROUPS:
        assert key in text


def test_help_ends_with_a_newline_and_keeps_lines_short():
    for line in help_text("all").splitlines():
        assert len(line) <= 100, line


# --- console scripts -----------------------------------------------------------------------
def test_console_scripts_resolve_to_functions_taking_argv():
    import ast
    import importlib
    import inspect
    from pathlib import Path

    tree = ast.parse((Path(__file__).resolve().parents[2] / "setup.py").read_text())
    strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)]
    scripts = [s for s in strings if isinstance(s, str) and "=launch." in s]
    names = {s.split("=")[0] for s in scripts}
    assert {"rl-pbt-train", "rl-pbt-report", "rl-pbt-replay"} <= names
    for script in scripts:
        module, func = script.split("=")[1].split(":")
        main = getattr(importlib.import_module(module), func)
        assert "argv" in inspect.signature(main).parameters, script


def test_report_and_replay_take_argv_and_fail_cleanly(tmp_path, capsys):
    from launch.replay import main as replay
    from launch.report import main as report

    assert report(["--experiment=nope", f"--train_dir={tmp_path}"]) == 2
    assert replay(["--from_experiment=nope", "--policy=0", f"--train_dir={tmp_path}"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and all("nope" in line for line in lines)


def test_a_file_flag_names_a_file_shipped_in_configs_as_a_preset_does(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no shaping_only.json here
    cfg = parse_cfg(["--env=CartPole-v1", "--pbt_search_space=shaping_only.json"])
    assert cfg.pbt_search_space == str(CONFIGS_DIR / "shaping_only.json")
    assert parse_cfg(["--env=CartPole-v1", "--pbt_search_space=shaping_only"]).pbt_search_space == (
        str(CONFIGS_DIR / "shaping_only.json")
    )
    (tmp_path / "shaping_only.json").write_text("{}")  # a file of the user's wins
    cfg = parse_cfg(["--env=CartPole-v1", "--pbt_search_space=shaping_only.json"])
    assert cfg.pbt_search_space == "shaping_only.json"


def test_flags_that_change_nothing_get_a_note(capsys):
    import envs  # noqa: F401  (connect four has a mirror)

    parse_cfg(
        ["--env=CartPole-v1", "--wandb_project=x", "--pbt_exploit=ttest"]
        + ["--pbt_period_env_steps=1000", "--mirror_symmetry=True"]
    )
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "note: --wandb_project: no effect without --with_wandb",
        "note: --pbt_exploit, --pbt_period_env_steps: no effect without --with_pbt",
        "note: --mirror_symmetry: no effect, env CartPole-v1 has no mirror",
    ]
    parse_cfg(["--env=connect_four", "--mirror_symmetry=True"])
    # a target that picks the games or the logged objective works without PBT
    parse_cfg(["--env=connect_four", "--pbt_target_objective=vs_scripted:alphabeta"]
              + ["--selfplay_scripted_prob=0.2"])  # fmt: skip
    parse_cfg(["--env=CartPole-v1", "--num_policies=2", "--with_pbt", "--pbt_period_env_steps=9"])
    assert capsys.readouterr().err == ""
