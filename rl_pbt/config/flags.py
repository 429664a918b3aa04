"""Every command-line flag, defined once: name, type, default, help and check.

Names follow Sample Factory 2 where the concept is the same. `parse.py` builds the
argument parser and the validation from this table; nothing else defines flags.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

Check = Callable[[Any], Optional[str]]  # returns an error message, or None when the value is fine


@dataclass(frozen=True)
class Flag:
    name: str
    type: type  # bool, int, float, str, or list (a list of ints)
    default: Any
    help: str
    check: Optional[Check] = None
    choices: Optional[Sequence[Any]] = None
    group: str = "misc"


def positive(v: Any) -> Optional[str]:
    return None if v > 0 else "must be > 0"


def non_negative(v: Any) -> Optional[str]:
    return None if v >= 0 else "must be >= 0"


def in_unit_interval(v: Any) -> Optional[str]:
    return None if 0.0 <= v <= 1.0 else "must be in [0, 1]"


def at_least(lo: float) -> Check:
    return lambda v: None if v >= lo else f"must be >= {lo}"


def positive_ints(v: Any) -> Optional[str]:
    return None if all(x > 0 for x in v) else "every layer size must be > 0"


# Learning values a learner changes while it runs (PBT, --policy_values): everything else in
# the config is fixed for the whole run.
TUNED_HPARAMS = (
    "learning_rate",
    "exploration_loss_coeff",
    "value_loss_coeff",
    "max_grad_norm",
    "ppo_clip_ratio",
    "ppo_clip_value",
    "gamma",
)


FLAGS: list[Flag] = [
    # --- experiment ---
    Flag("env", str, None, "environment name: a registered env or any gymnasium id", group="exp"),
    Flag(
        "experiment",
        str,
        "default_experiment",
        "experiment name (folder under train_dir)",
        group="exp",
    ),
    Flag("train_dir", str, "train_dir", "root folder of experiments", group="exp"),
    Flag(
        "preset",
        str,
        None,
        "a preset from configs/ (name or path to a .json); flags override it",
        group="exp",
    ),
    Flag("seed", int, None, "random seed (None: random)", group="exp"),
    Flag(
        "device",
        str,
        "auto",
        "'gpu' or 'auto' (cuda when available) or 'cpu'",
        choices=["auto", "gpu", "cpu"],
        group="exp",
    ),
    Flag(
        "num_gpus",
        int,
        -1,
        "GPUs to spread the policies over (policy p on cuda:(p % num_gpus)); -1: every visible "
        "one (counted without initialising CUDA in the main process)",
        at_least(-1),
        group="exp",
    ),
    Flag(
        "mp_start_method",
        str,
        "auto",
        "how child processes start; auto: fork when no CUDA device is used, else forkserver "
        "(CUDA cannot be used in a forked child)",
        choices=["auto", "fork", "forkserver", "spawn"],
        group="exp",
    ),
    Flag(
        "learner_processes",
        str,
        "per_policy",
        "per_policy: one learner process per policy; per_device: one process per device "
        "hosting the learners of every policy placed on it (fewer CUDA contexts, less memory)",
        choices=["per_policy", "per_device"],
        group="exp",
    ),
    Flag(
        "restart_behavior",
        str,
        "resume",
        "resume: continue an existing experiment; restart: keep old files but start fresh; "
        "overwrite: delete the experiment folder first",
        choices=["resume", "restart", "overwrite"],
        group="exp",
    ),
    Flag(
        "serial_mode",
        bool,
        False,
        "run every component in one process (debugging, tests)",
        group="exp",
    ),
    Flag(
        "train_for_env_steps",
        int,
        10_000_000_000,
        "stop when every policy has trained on this many env frames",
        positive,
        group="exp",
    ),
    Flag(
        "train_for_seconds",
        int,
        10_000_000_000,
        "stop after this many seconds",
        positive,
        group="exp",
    ),
    Flag("save_every_sec", int, 120, "checkpoint period in seconds", positive, group="exp"),
    Flag(
        "keep_checkpoints", int, 2, "number of checkpoints kept per policy", positive, group="exp"
    ),
    Flag("stats_avg", int, 100, "episodes averaged in status and summaries", positive, group="exp"),
    Flag(
        "experiment_summaries_interval",
        int,
        10,
        "seconds between TensorBoard writes",
        positive,
        group="exp",
    ),
    Flag(
        "status_interval", float, 5.0, "seconds between console status lines", positive, group="exp"
    ),
    Flag(
        "heartbeat_timeout",
        int,
        60,
        "seconds of silence after which a component is declared hung",
        positive,
        group="exp",
    ),
    Flag(
        "env_frameskip",
        int,
        1,
        "env frames per agent step (for frame counting)",
        positive,
        group="exp",
    ),
    # --- sampling ---
    Flag("num_workers", int, 2, "rollout worker processes", positive, group="sampling"),
    Flag(
        "num_envs_per_worker", int, 8, "env copies per rollout worker", positive, group="sampling"
    ),
    Flag(
        "worker_num_splits",
        int,
        2,
        "with --inference=device: groups a worker's envs are stepped in, so one group steps "
        "while the other's actions are computed (double buffering); num_envs_per_worker must "
        "divide evenly. Local inference computes and steps in turn and ignores it",
        positive,
        group="sampling",
    ),
    Flag(
        "inference",
        str,
        "auto",
        "where actions are computed. local: in each rollout worker (CPU); device: one "
        "inference process per device batches the requests of every worker for the policies "
        "placed on it; auto: device when the policies are on CUDA, else local",
        choices=["auto", "local", "device"],
        group="sampling",
    ),
    Flag("num_policies", int, 1, "population size", positive, group="sampling"),
    Flag("rollout", int, 32, "trajectory length sent to the learner", positive, group="sampling"),
    Flag(
        "decorrelate_envs_on_one_worker",
        bool,
        True,
        "advance env copies by different random numbers of steps at start",
        group="sampling",
    ),
    Flag(
        "fused_inference",
        bool,
        True,
        "rollout workers run every policy's forward pass at once over stacked weights "
        "(feed-forward models over vector observations); False: one pass per policy",
        group="sampling",
    ),
    Flag(
        "policy_focus_env_steps",
        int,
        16384,
        "single-agent envs with a population: a rollout worker starts new episodes with one "
        "policy of its share until that policy is this many env steps ahead of the least "
        "served one, then turns to the least served; fewer policies per step means fewer "
        "weights read per forward pass and fewer learners awake at once. 0: every episode "
        "goes to the least served policy",
        non_negative,
        group="sampling",
    ),
    Flag(
        "batched_envs",
        bool,
        True,
        "step a worker's env copies in one call when the env registers a batched version "
        "(e.g. the arena); False: one env object per copy",
        group="sampling",
    ),
    # --- learning ---
    Flag(
        "recurrence",
        int,
        -1,
        "truncated BPTT length; -1: rollout when use_rnn, else 1",
        group="learning",
    ),
    Flag("batch_size", int, 1024, "minibatch size in samples", positive, group="learning"),
    Flag(
        "num_batches_per_epoch",
        int,
        1,
        "minibatches per training iteration",
        positive,
        group="learning",
    ),
    Flag(
        "num_epochs",
        int,
        1,
        "passes over each training iteration's data",
        positive,
        group="learning",
    ),
    Flag("learning_rate", float, 1e-4, "Adam learning rate", positive, group="learning"),
    Flag("adam_eps", float, 1e-6, "Adam epsilon", positive, group="learning"),
    Flag("adam_beta1", float, 0.9, "Adam beta1", in_unit_interval, group="learning"),
    Flag("adam_beta2", float, 0.999, "Adam beta2", in_unit_interval, group="learning"),
    Flag("gamma", float, 0.99, "discount", in_unit_interval, group="learning"),
    Flag("gae_lambda", float, 0.95, "GAE lambda", in_unit_interval, group="learning"),
    Flag(
        "ppo_clip_ratio",
        float,
        0.1,
        "PPO policy clip (ratio in [1-c, 1+c])",
        positive,
        group="learning",
    ),
    Flag(
        "ppo_clip_value", float, 1.0, "value clip around the old value", positive, group="learning"
    ),
    Flag("value_loss_coeff", float, 0.5, "value loss weight", non_negative, group="learning"),
    Flag(
        "exploration_loss_coeff",
        float,
        0.003,
        "entropy bonus weight",
        non_negative,
        group="learning",
    ),
    Flag(
        "max_grad_norm",
        float,
        4.0,
        "gradient clipping norm (0: off)",
        non_negative,
        group="learning",
    ),
    Flag(
        "amp",
        bool,
        False,
        "bfloat16 autocast of the learner's forward and loss (CUDA; on the CPU too when asked)",
        group="learning",
    ),
    Flag(
        "cudnn_benchmark",
        bool,
        False,
        "let cuDNN pick the fastest conv kernels for the batch shapes seen (CUDA)",
        group="learning",
    ),
    Flag(
        "tf32",
        bool,
        True,
        "TensorFloat-32 matmuls and convolutions on CUDA devices that have them",
        group="learning",
    ),
    Flag(
        "with_vtrace",
        bool,
        False,
        "V-trace targets and advantages instead of GAE",
        group="learning",
    ),
    Flag("vtrace_rho", float, 1.0, "V-trace rho-bar", positive, group="learning"),
    Flag("vtrace_c", float, 1.0, "V-trace c-bar", positive, group="learning"),
    Flag(
        "max_policy_lag",
        int,
        1000,
        "samples more versions old than this are masked",
        positive,
        group="learning",
    ),
    Flag(
        "normalize_input",
        bool,
        True,
        "running mean/std normalisation of vector observations",
        group="learning",
    ),
    Flag(
        "normalize_returns",
        bool,
        True,
        "running std normalisation of value targets",
        group="learning",
    ),
    Flag("normalize_advantage", bool, True, "normalise advantages per minibatch", group="learning"),
    Flag(
        "policy_values",
        str,
        None,
        "JSON file with one object per policy: the learning values and reward-shaping leaves "
        "(rew.<key>) in which that policy differs from the defaults ({} keeps them all); keys "
        "starting with _ are ignored. Without PBT a fixed, mixed population (name the file "
        "again when resuming); with PBT the members' starting values, policy 0 included (a "
        "fresh run; a resumed one keeps its PBT state)",
        group="learning",
    ),
    # --- model ---
    Flag("use_rnn", bool, False, "GRU core after the encoder", group="model"),
    Flag("rnn_size", int, 512, "GRU hidden size", positive, group="model"),
    Flag(
        "encoder_mlp_layers",
        list,
        [512, 512],
        "MLP encoder layer sizes",
        positive_ints,
        group="model",
    ),
    Flag(
        "encoder_conv_architecture",
        str,
        "convnet_simple",
        "conv encoder for image inputs",
        choices=["convnet_simple", "convnet_impala"],
        group="model",
    ),
    Flag(
        "encoder_conv_mlp_layers",
        list,
        [512],
        "MLP after the conv encoder",
        positive_ints,
        group="model",
    ),
    Flag("nonlinearity", str, "elu", "activation", choices=["elu", "relu", "tanh"], group="model"),
    # --- PBT (Sample Factory names and defaults) ---
    Flag("with_pbt", bool, False, "enable Population Based Training", group="pbt"),
    Flag(
        "pbt_period_env_steps",
        int,
        5_000_000,
        "env steps between PBT updates of a policy",
        positive,
        group="pbt",
    ),
    Flag(
        "pbt_start_mutation",
        int,
        20_000_000,
        "env steps before the first PBT update",
        non_negative,
        group="pbt",
    ),
    Flag(
        "pbt_replace_fraction",
        float,
        0.3,
        "bottom/top fraction used by exploit",
        lambda v: None if 0.0 < v <= 0.5 else "must be in (0, 0.5]",
        group="pbt",
    ),
    Flag(
        "pbt_mutation_rate",
        float,
        0.15,
        "probability that each parameter mutates",
        in_unit_interval,
        group="pbt",
    ),
    Flag(
        "pbt_replace_reward_gap",
        float,
        0.1,
        "relative objective gap needed to replace",
        non_negative,
        group="pbt",
    ),
    Flag(
        "pbt_replace_reward_gap_absolute",
        float,
        1e-6,
        "absolute objective gap needed to replace",
        non_negative,
        group="pbt",
    ),
    Flag("pbt_optimize_gamma", bool, False, "also tune gamma", group="pbt"),
    Flag(
        "pbt_target_objective",
        str,
        "true_objective",
        "info key ranked by PBT (episode return when absent); 'elo' ranks by rating; "
        "'vs_snapshots' by the win rate against frozen snapshots only",
        group="pbt",
    ),
    Flag("pbt_perturb_min", float, 1.1, "smallest perturbation factor", at_least(1.0), group="pbt"),
    Flag("pbt_perturb_max", float, 1.5, "largest perturbation factor", at_least(1.0), group="pbt"),
    Flag(
        "pbt_mix_policies_in_one_env",
        bool,
        True,
        "draw a random policy for every agent seat of every episode",
        group="pbt",
    ),
    Flag(
        "pbt_exploit",
        str,
        "truncation",
        "exploit strategy",
        choices=["truncation", "tournament", "ttest"],
        group="pbt",
    ),
    Flag(
        "pbt_resample_probability",
        float,
        0.0,
        "probability that a mutation resamples from the prior instead of perturbing",
        in_unit_interval,
        group="pbt",
    ),
    Flag("pbt_search_space", str, None, "JSON file describing the typed search space", group="pbt"),
    Flag(
        "pbt_objective_window",
        int,
        100,
        "recent episodes averaged for the objective",
        positive,
        group="pbt",
    ),
    Flag(
        "pbt_ttest_min_episodes",
        int,
        10,
        "episodes each side needs for the t-test",
        positive,
        group="pbt",
    ),
    Flag(
        "pbt_ttest_alpha",
        float,
        0.05,
        "significance level of the t-test",
        in_unit_interval,
        group="pbt",
    ),
    Flag(
        "pbt_mutate_reference_policy",
        bool,
        False,
        "let policy 0 be mutated and replaced too (default keeps it as a reference)",
        group="pbt",
    ),
    Flag(
        "pbt_init_random",
        bool,
        False,
        "start every member but the reference from values drawn from the search space "
        "(after --policy_values: the values PBT does not tune stay as that file gives them)",
        group="pbt",
    ),
    Flag(
        "pbt_replay_lineage",
        str,
        None,
        "train one policy on the schedule recorded in this lineage.jsonl (see launch/replay)",
        group="pbt",
    ),
    Flag(
        "pbt_replay_policy",
        int,
        0,
        "population member whose schedule is replayed",
        non_negative,
        group="pbt",
    ),
    # --- self-play ---
    Flag(
        "matchmaking",
        str,
        "uniform",
        "how opponents are drawn",
        choices=["uniform", "elo"],
        group="selfplay",
    ),
    Flag(
        "selfplay_snapshot_prob",
        float,
        0.0,
        "fraction of opponent seats given to frozen past snapshots",
        in_unit_interval,
        group="selfplay",
    ),
    Flag(
        "selfplay_snapshot_pool_size",
        int,
        8,
        "snapshots kept per population",
        positive,
        group="selfplay",
    ),
    Flag(
        "selfplay_snapshot_every_env_steps",
        int,
        1_000_000,
        "env steps between snapshots",
        positive,
        group="selfplay",
    ),
]

FLAGS_BY_NAME: dict[str, Flag] = {f.name: f for f in FLAGS}
