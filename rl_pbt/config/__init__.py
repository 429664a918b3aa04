"""Typed configuration: flag table (`flags.py`), parsing, presets and validation (`parse.py`)."""

from rl_pbt.config.parse import Cfg, ConfigError, experiment_dir, load_cfg, parse_cfg, save_cfg

__all__ = ["Cfg", "ConfigError", "parse_cfg", "experiment_dir", "load_cfg", "save_cfg"]
