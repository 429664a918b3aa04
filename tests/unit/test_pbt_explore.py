"""Explore (perturb / resample) and the typed search space, incl. reward-shaping keys."""

import json
import math
import re

import numpy as np
import pytest

from rl_pbt.config.parse import CONFIGS_DIR
from rl_pbt.pbt.explore import (
    ExploreSettings,
    explore,
    mutate_value,
    perturb_value,
    resample_value,
)
from rl_pbt.pbt.search_space import (
    DEFAULT_LEARNING_SPECS,
    GAMMA_SPEC,
    ParamSpec,
    build_search_space,
    flatten_shaping,
    fmt_value,
    load_search_space_file,
    unflatten_shaping,
)

ALWAYS = ExploreSettings(mutation_rate=1.0, perturb_min=1.1, perturb_max=1.5)
MIXED = ExploreSettings(
    mutation_rate=1.0, perturb_min=1.1, perturb_max=1.5, resample_probability=0.3
)


def walk(spec, value, settings, n=3000, seed=0):
    rng = np.random.default_rng(seed)
    seen = []
    for _ in range(n):
        value, _ = mutate_value(spec, value, rng, settings)
        seen.append(value)
    return seen


# ---------------------------------------------------------------- bounds


@pytest.mark.parametrize(
    "spec,start",
    [
        (ParamSpec("lr", "log_float", 1e-5, 1e-2), 3e-4),
        (ParamSpec("x", "float", -2.0, 3.0), 0.5),
        (ParamSpec("clip", "float", 0.05, 0.3), 0.1),
        (ParamSpec("n", "int", 1, 8), 4),
        (ParamSpec("neg", "log_float", -1.0, -0.01), -0.3),
        (GAMMA_SPEC, 0.99),
    ]
    + [(spec, 0.5 * (spec.low + spec.high)) for spec in DEFAULT_LEARNING_SPECS.values()],
)
@pytest.mark.parametrize("settings", [ALWAYS, MIXED])
def test_mutations_never_leave_bounds(spec, start, settings):
    values = walk(spec, start, settings)
    assert min(values) >= spec.low and max(values) <= spec.high
    assert len(set(values)) > 5  # it does move
    if spec.kind == "int":
        assert all(isinstance(v, int) for v in values)


def test_value_outside_bounds_is_clipped_in():
    spec = ParamSpec("lr", "log_float", 1e-5, 1e-3)
    value, _ = perturb_value(spec, 0.5, np.random.default_rng(0), ALWAYS)
    assert value == 1e-3


def test_resample_is_log_uniform_for_log_float():
    spec = ParamSpec("lr", "log_float", 1e-6, 1e-2)
    rng = np.random.default_rng(0)
    draws = np.array([resample_value(spec, 1e-4, rng, ALWAYS)[0] for _ in range(4000)])
    assert draws.min() >= 1e-6 and draws.max() <= 1e-2
    decades = np.histogram(np.log10(draws), bins=[-6, -5, -4, -3, -2])[0] / len(draws)
    assert np.all(np.abs(decades - 0.25) < 0.04)


def test_perturb_factor_and_direction():
    spec = ParamSpec("lr", "float")
    rng = np.random.default_rng(0)
    ratios = []
    for _ in range(2000):
        new, how = perturb_value(spec, 1.0, rng, ALWAYS)
        ratios.append(new)
        assert re.fullmatch(r"[*/]1\.\d+|[*/]1", how)
    ratios = np.array(ratios)
    up, down = ratios[ratios > 1], ratios[ratios < 1]
    assert up.min() >= 1.1 and up.max() <= 1.5
    assert down.min() >= 1 / 1.5 and down.max() <= 1 / 1.1
    assert 0.45 < len(up) / len(ratios) < 0.55


# ---------------------------------------------------------------- discount-like


def test_gamma_perturbs_one_minus_x():
    rng = np.random.default_rng(0)
    spec = ParamSpec("gamma", "float", discount_like=True)  # unbounded: stays inside (0, 1)
    for _ in range(1000):
        new, how = perturb_value(spec, 0.99, rng, ALWAYS)
        ratio = (1 - new) / (1 - 0.99)
        assert 1.1 - 1e-9 <= ratio <= 1.5 + 1e-9 or 1 / 1.5 - 1e-9 <= ratio <= 1 / 1.1 + 1e-9
        assert how.startswith("1-x")
    values = walk(spec, 0.99, MIXED, n=5000)
    assert all(0.0 < v < 1.0 for v in values)
    values = walk(GAMMA_SPEC, 0.99, MIXED, n=3000)
    assert all(GAMMA_SPEC.low <= v <= GAMMA_SPEC.high for v in values)


# ---------------------------------------------------------------- reward weights


@pytest.mark.parametrize("start", [0.05, -0.25, 1.0, -1e-3])
def test_reward_weights_keep_their_sign(start):
    spec = ParamSpec("rew.x", "float", keep_sign=True)
    values = walk(spec, start, MIXED, n=4000, seed=7)
    assert all(v != 0 and (v > 0) == (start > 0) for v in values)


def test_an_int_reward_weight_never_rounds_to_zero():
    """1 divided by 2 or more rounded to 0, where a multiplicative move keeps it forever."""
    spec = ParamSpec("rew.kill", "int", -5, 5, keep_sign=True)
    rng = np.random.default_rng(0)
    halving = ExploreSettings(1.0, 2.0, 3.0, 0.0)
    for start in (1, -1, 2):
        reached = {perturb_value(spec, start, rng, halving)[0] for _ in range(200)}
        assert 0 not in reached and all((v > 0) == (start > 0) for v in reached), reached
    wide = ParamSpec("rew.kill", "int", keep_sign=True)
    jumps = {resample_value(wide, 1, rng, ExploreSettings())[0] for _ in range(300)}
    assert jumps and min(jumps) >= 1, jumps


def test_bounded_reward_weight_resamples_on_its_side():
    spec = ParamSpec("rew.x", "float", -1.0, 1.0, keep_sign=True)
    values = walk(spec, 0.3, ExploreSettings(1.0, 1.1, 1.5, 1.0), n=2000)
    assert all(0 < v <= 1.0 for v in values)


def test_zero_weight_stays_zero_unless_bounded():
    """A multiplicative move cannot leave 0: an unbounded 0 stays (no prior to draw from); a
    bounded one is drawn from its bounds, else a weight named in the search space at 0 (as the
    log tells a user to do with a switched-off term) never moved."""
    rng = np.random.default_rng(0)
    spec = ParamSpec("rew.x", "float", keep_sign=True)
    assert all(perturb_value(spec, 0.0, rng, ALWAYS)[0] == 0.0 for _ in range(50))
    assert all(resample_value(spec, 0.0, rng, ALWAYS)[0] == 0.0 for _ in range(50))
    bounded = ParamSpec("rew.x", "float", 0.1, 1.0, keep_sign=True)
    drawn = [perturb_value(bounded, 0.0, rng, ALWAYS) for _ in range(200)]
    assert all(0.1 <= v <= 1.0 and how == "resample" for v, how in drawn)
    both_sides = ParamSpec("rew.x", "float", -1.0, 1.0, keep_sign=True)
    values = [perturb_value(both_sides, 0.0, rng, ALWAYS)[0] for _ in range(200)]
    assert min(values) < -0.5 and max(values) > 0.5
    # once off zero, a weight keeps its sign under perturbation, as any other
    assert all(perturb_value(both_sides, 0.3, rng, ALWAYS)[0] > 0 for _ in range(100))


# ---------------------------------------------------------------- int and categorical


def test_int_moves_at_least_one_step_and_rounds():
    spec = ParamSpec("n", "int", 1, 100)
    rng = np.random.default_rng(0)
    for _ in range(200):
        new, _ = perturb_value(spec, 2, rng, ALWAYS)
        assert isinstance(new, int) and new in (1, 3)
    assert perturb_value(ParamSpec("n", "int", 5, 5), 5, rng, ALWAYS)[0] == 5


def test_categorical_neighbour_and_resample():
    spec = ParamSpec("opt", "categorical", values=("a", "b", "c", "d"))
    rng = np.random.default_rng(0)
    for _ in range(100):
        assert perturb_value(spec, "b", rng, ALWAYS)[0] in ("a", "c")
        assert perturb_value(spec, "a", rng, ALWAYS)[0] == "b"
        assert resample_value(spec, "a", rng, ALWAYS)[0] in ("b", "c", "d")
    assert perturb_value(spec, "zzz", rng, ALWAYS)[0] in spec.values


# ---------------------------------------------------------------- explore()


def test_explore_rate_ops_and_determinism():
    space = {k: s for k, s in DEFAULT_LEARNING_SPECS.items()}
    values = {
        "learning_rate": 3e-4,
        "exploration_loss_coeff": 0.003,
        "value_loss_coeff": 0.5,
        "max_grad_norm": 4.0,
        "ppo_clip_ratio": 0.1,
        "ppo_clip_value": 1.0,
        "other": 7,
    }
    settings = ExploreSettings(mutation_rate=0.15)
    changed = 0
    rng = np.random.default_rng(0)
    for _ in range(2000):
        new, ops = explore(values, space, rng, settings)
        assert new["other"] == 7 and set(new) == set(values)
        diffs = [k for k in values if new[k] != values[k]]
        assert len(diffs) == len(ops)
        changed += len(diffs)
        for op in ops:
            name = op.split(" ")[0]
            assert re.fullmatch(rf"{name} \S+ -> \S+ \(.+\)", op)
    assert changed / (2000 * 6) == pytest.approx(0.15, abs=0.02)
    a = explore(values, space, np.random.default_rng(5), MIXED)
    b = explore(values, space, np.random.default_rng(5), MIXED)
    assert a == b


def test_op_text_example():
    new, ops = explore(
        {"learning_rate": 3e-4},
        {"learning_rate": ParamSpec("learning_rate")},
        np.random.default_rng(1),
        ALWAYS,
    )
    assert ops[0].startswith("learning_rate 3.0e-4 -> ")
    assert fmt_value(3.6e-4) == "3.6e-4" and fmt_value(0.99) == "0.99" and fmt_value(5) == "5"


# ---------------------------------------------------------------- search space


def test_default_space_and_zero_rule():
    hp = {
        "learning_rate": 1e-4,
        "exploration_loss_coeff": 0.003,
        "value_loss_coeff": 0.5,
        "max_grad_norm": 0.0,
        "ppo_clip_ratio": 0.1,
        "ppo_clip_value": 1.0,
        "gamma": 0.99,
    }
    shaping = {"pickup": 0.05, "idle": 0.0, "death": -0.25}
    space, notes = build_search_space(hp, flatten_shaping(shaping))
    assert "max_grad_norm" not in space and "gamma" not in space and "rew.idle" not in space
    assert {"learning_rate", "rew.pickup", "rew.death"} <= set(space)
    assert space["rew.death"].keep_sign and not space["rew.death"].bounded
    assert any("max_grad_norm" in n for n in notes)
    space, _ = build_search_space(hp, None, optimize_gamma=True)
    assert space["gamma"].discount_like
    # a user default outside the built-in bounds widens them
    space, _ = build_search_space({"learning_rate": 0.5}, None)
    assert space["learning_rate"].high == 0.5


def test_search_space_file(tmp_path):
    path = tmp_path / "space.json"
    path.write_text(
        json.dumps(
            {
                "_comment": "ignored",
                "learning_rate": {"type": "log_float", "low": 1e-5, "high": 1e-2},
                "rew.pickup": {"type": "float", "low": 0, "high": 1},
                "rew.idle": {"type": "float", "low": 0.01, "high": 0.1},
                "optimizer": {"type": "categorical", "values": ["adam", "sgd"], "default": "adam"},
            }
        )
    )
    overrides = load_search_space_file(str(path))
    space, _ = build_search_space(
        {"learning_rate": 1e-4}, {"rew.pickup": 0.05, "rew.idle": 0.0}, overrides=overrides
    )
    assert space["learning_rate"].low == 1e-5
    assert space["rew.pickup"].high == 1 and space["rew.pickup"].keep_sign
    assert "rew.idle" in space  # named in the file, so a zero weight is tuned
    assert space["optimizer"].kind == "categorical"
    assert load_search_space_file(None) == {}


@pytest.mark.parametrize(
    "entry",
    [
        {"type": "gaussian"},
        {"type": "float", "low": 2, "high": 1},
        {"type": "log_float", "low": 0, "high": 1},
        {"type": "categorical"},
        {"type": "float", "lo": 1},
        {"tune": "no"},
    ],
)
def test_bad_search_space_entries(tmp_path, entry):
    path = tmp_path / "space.json"
    path.write_text(json.dumps({"learning_rate": entry}))
    with pytest.raises(ValueError, match="learning_rate"):
        load_search_space_file(str(path))


def test_unknown_shaping_key_in_file_is_an_error():
    with pytest.raises(ValueError, match="rew.nope"):
        build_search_space({}, {"rew.a": 1.0}, overrides={"rew.nope": ParamSpec("rew.nope")})


def test_flatten_unflatten_roundtrip():
    shaping = {
        "pickup": 0.05,
        "group": {"x": 1.0, "y": [0.5, 2]},
        "t": (0.1, -0.2),
        "name": "keep",
        "flag": True,
    }
    flat = flatten_shaping(shaping)
    assert flat == {
        "rew.pickup": 0.05,
        "rew.group.x": 1.0,
        "rew.group.y[0]": 0.5,
        "rew.group.y[1]": 2.0,
        "rew.t[0]": 0.1,
        "rew.t[1]": -0.2,
    }
    back = unflatten_shaping(flat, shaping)
    assert back == {**shaping, "group": {"x": 1.0, "y": [0.5, 2.0]}}
    assert isinstance(back["t"], tuple) and isinstance(back["group"]["y"], list)
    flat["rew.t[1]"] = -0.3
    assert unflatten_shaping(flat, shaping)["t"] == (0.1, -0.3)
    parsed = unflatten_shaping(flat)  # without a template: indexed leaves become tuples
    assert parsed["t"] == (0.1, -0.3) and parsed["group"]["x"] == 1.0
    assert math.isclose(parsed["pickup"], 0.05)


def _learning_values():
    """A full set of learning values for build_search_space."""
    hp = {k: 0.1 for k in DEFAULT_LEARNING_SPECS}
    hp.update(learning_rate=3e-4, max_grad_norm=4.0, gamma=0.99)
    return hp


def test_shipped_search_space_files_load():
    """configs/*search_space*.json parse and fit the envs they were written for."""
    from envs.arena.game import DEFAULT_REWARD_SHAPING as ARENA
    from envs.lure.env import DEFAULT_REWARD_SHAPING as LURE

    hp = _learning_values()
    lure = load_search_space_file(str(CONFIGS_DIR / "shaping_only.json"))
    space, notes = build_search_space(hp, flatten_shaping(LURE), overrides=lure)
    assert set(space) == {"rew.goal", "rew.lure", "rew.step_penalty"}
    (fixed,) = [n for n in notes if "tune: false" in n]
    assert all(name in fixed for name in DEFAULT_LEARNING_SPECS)
    example = load_search_space_file(str(CONFIGS_DIR / "pbt_search_space_example.json"))
    space, _ = build_search_space(hp, flatten_shaping(ARENA), True, overrides=example)
    assert "max_grad_norm" not in space and space["gamma"].high == 0.999
    assert space["rew.death"].kind == "log_float"


def test_shipped_arena_hunter_start_files_load():
    """configs/arena_hunter_start.json starts 8 arena members at one proximity weight far above
    the shipped default, and configs/arena_tune_proximity.json leaves PBT that weight alone to
    tune, over a prior that holds both the default and the start."""
    from envs.arena.game import DEFAULT_REWARD_SHAPING as ARENA
    from rl_pbt.config.policy_values import check_shaping_keys, load_policy_values

    start = load_policy_values(str(CONFIGS_DIR / "arena_hunter_start.json"), 8)
    check_shaping_keys(start, flatten_shaping(ARENA), "arena_duel")
    assert start == [{"rew.proximity": 0.05}] * 8 and ARENA["proximity"] < 0.05 / 10
    tune = load_search_space_file(str(CONFIGS_DIR / "arena_tune_proximity.json"))
    space, _ = build_search_space(_learning_values(), flatten_shaping(ARENA), overrides=tune)
    assert list(space) == ["rew.proximity"]
    prox = space["rew.proximity"]
    assert prox.kind == "log_float" and prox.low <= ARENA["proximity"] and 0.05 <= prox.high
