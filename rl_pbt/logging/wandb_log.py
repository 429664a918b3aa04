"""Weights & Biases sink for PopulationStats (--with_wandb): one W&B run for the population.

Policy p's scalars are logged as `p{p}/<tag>` and plotted against `p{p}/env_steps`, its own
step count, so members that progress at different speeds line up on their own axes. PBT
events are logged as they happen and as a table at the end; the report's PNGs (if any) are
uploaded at close. wandb is imported here only, when the sink is built.
"""

from __future__ import annotations

import glob
import math
import os
import secrets
import time
from typing import Any, Optional

from rl_pbt.config.parse import ConfigError
from rl_pbt.extras import install_hint

INSTALL_HINT = install_hint("wandb")


def run_id_path(exp_dir: str) -> str:
    """The W&B run id of this experiment: a resumed run continues the same W&B run."""
    return os.path.join(exp_dir, "stats", "wandb_run_id.txt")


def _import_wandb():
    try:
        import wandb
    except ImportError:
        raise ConfigError(
            f"--with_wandb: the wandb package is not installed; install it with {INSTALL_HINT}"
        ) from None
    return wandb


def _tags(value: Any) -> Optional[list[str]]:
    if not value:
        return None
    if isinstance(value, str):
        value = value.split(",")
    return [str(t).strip() for t in value if str(t).strip()] or None


def _config_dict(cfg) -> dict[str, Any]:
    if hasattr(cfg, "to_dict"):
        return dict(cfg.to_dict())
    return dict(vars(cfg))


def _read_run_id(path: str) -> Optional[str]:
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return f.read().strip() or None


class WandbSink:
    """Receives the same per-policy scalar dicts as TensorBoard and stats/scalars.jsonl."""

    def __init__(self, cfg, exp_dir: str, num_policies: int):
        self.wandb = _import_wandb()
        self.exp_dir = exp_dir
        self.num_policies = num_policies
        self.pbt_rows: list[list[Any]] = []
        id_path = run_id_path(exp_dir)
        run_id = _read_run_id(id_path) or secrets.token_hex(6)  # W&B ids: [a-z0-9]
        try:
            self.run = self.wandb.init(
                project=getattr(cfg, "wandb_project", None) or "rl_pbt",
                entity=getattr(cfg, "wandb_entity", None) or None,
                group=getattr(cfg, "wandb_group", None) or None,
                tags=_tags(getattr(cfg, "wandb_tags", None)),
                name=getattr(cfg, "experiment", None) or os.path.basename(exp_dir),
                id=run_id,
                resume="allow",
                dir=os.environ.get("WANDB_DIR") or exp_dir,
                config=_config_dict(cfg),
            )
        except Exception as e:  # no login, no network, bad entity: fail before training
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise ConfigError(
                f"--with_wandb: wandb.init failed ({first}); run `wandb login`, "
                "or set WANDB_MODE=offline and `wandb sync` later"
            ) from None
        os.makedirs(os.path.dirname(id_path), exist_ok=True)
        with open(id_path, "w") as f:
            f.write(self.run.id)
        for p in range(num_policies):
            self.run.define_metric(f"p{p}/env_steps")
            self.run.define_metric(f"p{p}/*", step_metric=f"p{p}/env_steps")

    def log_scalars(self, rows: dict[int, tuple[int, dict[str, Optional[float]]]]) -> None:
        """rows: policy -> (its env steps, {tag: value}); one W&B step for the population."""
        data: dict[str, float] = {}
        for p, (env_steps, scalars) in rows.items():
            data[f"p{p}/env_steps"] = int(env_steps)
            for tag, value in scalars.items():
                if value is not None and math.isfinite(value):
                    data[f"p{p}/{tag}"] = float(value)
        if data:
            self.run.log(data)

    def log_pbt_event(
        self, policy: int, source: Optional[int], env_steps: int, description: str
    ) -> None:
        self.pbt_rows.append([time.time(), int(env_steps), policy, source, description])
        data: dict[str, Any] = {f"p{policy}/env_steps": int(env_steps)}
        if source is not None:
            data[f"p{policy}/pbt/copied_from"] = int(source)
        else:
            data[f"p{policy}/pbt/mutated"] = 1
        self.run.log(data)

    def close(self) -> None:
        if self.run is None:
            return
        if self.pbt_rows:
            columns = ["time", "env_steps", "policy", "source", "event"]
            self.run.log({"pbt/events": self.wandb.Table(columns=columns, data=self.pbt_rows)})
        pngs = sorted(glob.glob(os.path.join(self.exp_dir, "report", "*.png")))
        if pngs:
            images = {
                f"report/{os.path.splitext(os.path.basename(path))[0]}": self.wandb.Image(path)
                for path in pngs
            }
            self.run.log(images)
        self.run.finish()
        self.run = None
