"""Built-in env integrations. Importing this package registers every env it holds.

Each subpackage registers its own names with `rl_pbt.register_env`; VizDoom envs are
registered only when the `vizdoom` package is installed (`pip install "rl_pbt[doom]"`).
"""

import importlib
import importlib.util

from rl_pbt.envs.registry import builtin_registration

with builtin_registration():  # an env a script registered under one of these names stays
    for _module in (
        "envs.gym_envs",
        "envs.lure",
        "envs.arena",
        "envs.pettingzoo_adapter",
        "envs.connect_four",
    ):
        if importlib.util.find_spec(_module) is not None:
            importlib.import_module(_module)

    if importlib.util.find_spec("vizdoom") is not None and importlib.util.find_spec("envs.vizdoom"):
        importlib.import_module("envs.vizdoom")
