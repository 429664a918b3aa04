"""A script that uses the Python API gets the built-in envs and presets without importing
`envs` itself; an env it registered under a built-in's name stays its own; another package
named `envs` that Python finds first is named in the unknown-env message. Each case runs in
a fresh interpreter (the test process has the built-ins already)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


# a script's own env under a built-in's name, with its own scripted player of a built-in name
OWN_ARENA = """
from rl_pbt import register_env, register_scripted_policy
from rl_pbt.envs import scripted
from rl_pbt.envs.registry import make_env
def mine(name, cfg, env_config, render_mode=None):
    return "mine"
def my_chaser(env, seat, rng):
    return None
register_env("arena_duel", mine)
register_scripted_policy("arena_duel", "chaser", my_chaser)
"""


def test_a_script_gets_the_built_in_envs_and_presets_and_keeps_its_own(tmp_path):
    out = run(
        OWN_ARENA
        + textwrap.dedent(
            """
        import sys
        from rl_pbt import parse_cfg
        assert "envs" not in sys.modules
        cfg = parse_cfg(["--env=connect_four", "--random_opening_moves=2"])
        print(cfg.env, cfg.random_opening_moves)
        cfg = parse_cfg(["--preset=lure_pbt"])
        print(cfg.env, cfg.with_pbt)
        print(make_env("arena_duel", None, {}))
        assert scripted._SCRIPTED["arena_duel"] == {"chaser": my_chaser}
        """
        ),
        tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["connect_four", "2", "lure", "True", "mine"]
    # the commands import the built-ins themselves (launch.enjoy here): the same holds
    out = run(
        OWN_ARENA
        + textwrap.dedent(
            """
        from launch import enjoy
        print(make_env("arena_duel", None, {}), make_env("connect_four", None, {}) is not None)
        assert scripted._SCRIPTED["arena_duel"] == {"chaser": my_chaser}
        assert "alphabeta" in scripted._SCRIPTED["connect_four"]
        """
        ),
        tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["mine", "True"]


def test_another_envs_package_first_on_the_path_is_named(tmp_path):
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "__init__.py").write_text("")
    out = run(
        """
        import sys
        sys.path.insert(0, "")
        from rl_pbt import ConfigError, parse_cfg
        try:
            parse_cfg(["--env=arena_duel"])
        except ConfigError as e:
            print(e)
        """,
        tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    line = out.stdout.strip()
    assert line.startswith("--env='arena_duel': unknown env;"), line
    assert f"the package 'envs' at {tmp_path / 'envs'} hides the built-in envs" in line
