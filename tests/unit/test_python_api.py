"""Driving the trainer from Python: factories spawn children cannot define are named before
anything starts; train() checks a config changed after parse_cfg and leaves the caller's random
generators as they were; parse_cfg takes a command line as one string too."""

from __future__ import annotations

import random
import sys
import textwrap
import types

import numpy as np
import pytest
import torch

from rl_pbt import ConfigError, parse_cfg, train
from rl_pbt.runtime.processes import _main_definition
from tests.small_run import SERIAL_CARTPOLE

SCRIPT = """
import functools

def top(): ...

made = functools.partial(top)

try:
    def in_try(): ...
except ImportError:
    pass

def builder():
    def inner(): ...
    return inner

if __name__ == "__main__":
    def guarded(): ...
"""


def from_main(name: str):
    fn = lambda: None  # noqa: E731  (only its module and name matter here)
    fn.__module__, fn.__qualname__ = "__main__", name
    return fn


def test_where_a_main_module_factory_is_defined(tmp_path, monkeypatch):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(SCRIPT))
    main = types.ModuleType("__main__")
    main.__file__ = str(script)
    monkeypatch.setitem(sys.modules, "__main__", main)
    assert _main_definition(from_main("top")) is None
    assert _main_definition(from_main("made")) is None  # bound at the top level
    assert _main_definition(from_main("in_try")) is None
    assert _main_definition(from_main("guarded")) == "guard"
    assert _main_definition(from_main("inner")) == "elsewhere"  # not bound at the top level
    assert _main_definition(from_main("from_an_exec")) == "elsewhere"
    assert _main_definition(top_of_another_module) is None
    assert _main_definition(from_main("<lambda>")) is None  # pickling says "not a lambda"
    Factory = type("Factory", (), {"__module__": "__main__", "__call__": lambda self: None})
    assert _main_definition(Factory()) == "elsewhere"  # a callable object: its class's name
    Top = type("top", (), {"__module__": "__main__", "__call__": lambda self: None})
    assert _main_definition(Top()) is None
    notebook = types.ModuleType("__main__")  # a notebook kernel's, or python -c: no file
    monkeypatch.setitem(sys.modules, "__main__", notebook)
    assert _main_definition(from_main("make_env")) == "interactive"


def top_of_another_module(): ...


def test_train_checks_a_config_changed_after_parse_cfg(tmp_path):
    cfg = parse_cfg([*SERIAL_CARTPOLE, f"--train_dir={tmp_path}", "--train_for_env_steps=500"])
    cfg.rollout = 0  # a sweep's edit: a ZeroDivisionError deep in the run before
    with pytest.raises(ConfigError, match="--rollout"):
        train(cfg)
    assert not (tmp_path / "default").exists()


def test_train_leaves_the_callers_random_generators_as_they_were(tmp_path):
    cfg = parse_cfg(
        [*SERIAL_CARTPOLE, f"--train_dir={tmp_path}", "--train_for_env_steps=300", "--seed=3"]
    )
    random.seed(123)
    np.random.seed(123)
    torch.manual_seed(123)
    printing = np.get_printoptions()
    assert train(cfg) == 0
    after = (random.random(), float(np.random.random()), float(torch.rand(1)))
    random.seed(123)
    np.random.seed(123)
    torch.manual_seed(123)
    assert after == (random.random(), float(np.random.random()), float(torch.rand(1)))
    assert np.get_printoptions() == printing


def test_parse_cfg_takes_a_command_line_as_one_string():
    cfg = parse_cfg("--env=CartPole-v1 --seed=7 --encoder_mlp_layers 32 32")
    assert cfg.env == "CartPole-v1" and cfg.seed == 7 and list(cfg.encoder_mlp_layers) == [32, 32]
