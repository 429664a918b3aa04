"""Every command-line flag, defined once: name, type, default, help, check and help topic.

Names follow Sample Factory 2 where the concept is the same; `FOREIGN_FLAGS` lists the Sample
Factory names that have no flag of their own here. `parse.py` builds the argument parser, the
help and the validation from these tables; nothing else defines flags.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from rl_pbt.extras import install_hint
from rl_pbt.logging.files import experiment_name_problem

Check = Callable[[Any], Optional[str]]  # returns an error message, or None when the value is fine


@dataclass(frozen=True)
class Flag:
    name: str
    type: type  # bool, int, float, str, or list (of item_type)
    default: Any
    help: str
    check: Optional[Check] = None
    choices: Optional[Sequence[Any]] = None
    group: str = "misc"  # help topic: a key of HELP_GROUPS (env integrations use "env")
    item_type: type = int  # the type of a list flag's items: int or str
    # an env flag for training games only (e.g. random openings): rl-pbt-enjoy and rl-pbt-match
    # play the run's env with its default
    training_only: bool = False


# Help topics in the order `--help` prints them: key (as in `--help=KEY`) -> title.
HELP_GROUPS: dict[str, str] = {
    "run": "run and experiment",
    "sampling": "sampling",
    "learning": "learning",
    "model": "model",
    "pbt": "Population Based Training",
    "selfplay": "self-play",
    "logging": "logging",
    "env": "env-specific",
}
HELP_ALIASES = {
    "exp": "run",
    "experiment": "run",
    "self-play": "selfplay",
    "self_play": "selfplay",
    "wandb": "logging",
    "sf": "sample_factory",
}


def ray_address_problem(v: Any) -> Optional[str]:
    if v is None or v in ("auto", "local"):
        return None
    host, _, port = str(v).removeprefix("ray://").rpartition(":")
    if host and port.isdigit():
        return None
    return "must be auto, local, or HOST:PORT (ray://HOST:PORT for Ray Client)"


MAX_POLICIES = 4096  # a population larger than this is a typo (and would take hours to set up)


def positive(v: Any) -> Optional[str]:
    return None if v > 0 else "must be > 0"


def non_negative(v: Any) -> Optional[str]:
    return None if v >= 0 else "must be >= 0"


def in_unit_interval(v: Any) -> Optional[str]:
    return None if 0.0 <= v <= 1.0 else "must be in [0, 1]"


def at_least(lo: float) -> Check:
    return lambda v: None if v >= lo else f"must be >= {lo}"


def in_range(lo: float, hi: float, lo_open: bool = False, hi_open: bool = False) -> Check:
    """lo <= v <= hi, either side open on request; the message writes the interval."""
    text = f"must be in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"

    def check(v: Any) -> Optional[str]:
        above = v > lo if lo_open else v >= lo
        below = v < hi if hi_open else v <= hi
        return None if above and below else text

    return check


def clip_below_one(v: Any) -> Optional[str]:
    """--ppo_clip_ratio: at 1 and above, [1-c, 1+c] has no lower side left."""
    if 0 < v < 1:
        return None
    return "must be in (0, 1): the ratio is clipped to [1-c, 1+c]"


def positive_ints(v: Any) -> Optional[str]:
    return None if all(x > 0 for x in v) else "every layer size must be > 0"


def layer_sizes(v: Any) -> Optional[str]:
    """The vector encoder's layers: at least one (none would make a linear policy)."""
    return positive_ints(v) if v else "give at least one layer size"


def population_size(v: Any) -> Optional[str]:
    return None if 0 < v <= MAX_POLICIES else f"must be in [1, {MAX_POLICIES}]"


def path_text(v: Any) -> Optional[str]:
    """A path flag's text: something, and nothing the file system refuses outright."""
    if not v.strip():
        return "must be a path, not empty"
    if "\0" in v:
        return "must not contain a NUL character"
    return None


def plain_name(v: Any) -> Optional[str]:
    problem = experiment_name_problem(v)
    if problem:
        return f"{problem}; give a plain folder name (no '/', no '..', not '.')"
    return None


def feature_set_name(v: Any) -> Optional[str]:
    # which names exist depends on the env: checked against it once the env is known
    if v and not str(v).replace("_", "").replace("-", "").isalnum():
        return "must be empty or a name of letters, digits, '_' and '-'"
    return None


def non_empty(v: Any) -> Optional[str]:
    return None if v.strip() else "must not be empty"


def seed_range(v: Any) -> Optional[str]:
    return None if 0 <= v < 2**63 else "must be in [0, 2**63 - 1]"


def recurrence_length(v: Any) -> Optional[str]:
    return None if v == -1 or v > 0 else "must be -1 (automatic) or > 0"


# W&B refuses these characters in project and entity names; names are at most 128 characters
_WANDB_BAD_CHARS = "/\\#?%:"


def wandb_name(v: Any) -> Optional[str]:
    if not v.strip():
        return "must not be empty"
    if len(v) > 128:
        return "must be at most 128 characters"
    bad = sorted({c for c in v if c in _WANDB_BAD_CHARS})
    if bad:
        return f"must not contain {' '.join(bad)}"
    return None


def wandb_group_name(v: Any) -> Optional[str]:
    if not v.strip():
        return "must not be empty"
    return None if len(v) <= 128 else "must be at most 128 characters"


def wandb_tags(v: Any) -> Optional[str]:
    for tag in v:
        if not 0 < len(tag) <= 64:
            return f"tag {tag!r}: every tag must have 1 to 64 characters"
    return None


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
    Flag(
        "env",
        str,
        None,
        "environment name: a registered env or any gymnasium id",
        non_empty,
        group="run",
    ),
    Flag(
        "experiment",
        str,
        "default_experiment",
        "experiment name (folder under train_dir)",
        plain_name,
        group="run",
    ),
    Flag("train_dir", str, "train_dir", "root folder of experiments", path_text, group="run"),
    Flag(
        "preset",
        str,
        None,
        "a preset from configs/ (name or path to a .json); flags override it",
        path_text,
        group="run",
    ),
    Flag("seed", int, None, "random seed (None: random)", seed_range, group="run"),
    Flag(
        "device",
        str,
        "auto",
        "'gpu' or 'auto' (cuda when available) or 'cpu'",
        choices=["auto", "gpu", "cpu"],
        group="run",
    ),
    Flag(
        "num_gpus",
        int,
        -1,
        "GPUs to spread the policies over (policy p on cuda:(p % num_gpus)); -1: every visible "
        "one (counted without initialising CUDA in the main process)",
        at_least(-1),
        group="run",
    ),
    Flag(
        "mp_start_method",
        str,
        "auto",
        "how child processes start; auto: fork when no CUDA device is used, else forkserver "
        "(CUDA cannot be used in a forked child)",
        choices=["auto", "fork", "forkserver", "spawn"],
        group="run",
    ),
    Flag(
        "learner_processes",
        str,
        "per_policy",
        "per_policy: one learner process per policy; per_device: one process per device "
        "hosting the learners of every policy placed on it (fewer CUDA contexts, less memory)",
        choices=["per_policy", "per_device"],
        group="run",
    ),
    Flag(
        "restart_on_jam",
        bool,
        True,
        "rl-pbt-train only: when a learner or inference server dies by a signal, or a process "
        "killed inside a shared-queue operation leaves the run jammed, restart the whole run "
        "from its last checkpoints (at most 3 times an hour) instead of stopping",
        group="run",
    ),
    Flag(
        "restart_behavior",
        str,
        "resume",
        "resume: continue an existing experiment; restart: keep old files but start fresh; "
        "overwrite: delete the experiment folder first",
        choices=["resume", "restart", "overwrite"],
        group="run",
    ),
    Flag(
        "serial_mode",
        bool,
        False,
        "run every component in one process (debugging, tests)",
        group="run",
    ),
    Flag(
        "ray_address",
        str,
        None,
        "spread the population over a Ray cluster: 'auto' (the cluster this machine is part "
        "of), 'local' (start Ray here), or host:port; needs the ray extra",
        check=ray_address_problem,
        group="run",
    ),
    Flag(
        "policies_per_node",
        int,
        8,
        "with --ray_address: members per node group (one single-machine run each)",
        check=positive,
        group="run",
    ),
    Flag(
        "ray_node_dir",
        str,
        None,
        "with --ray_address: where node groups keep their runs on their own node (default: "
        "the experiment folder's groups/, right on one machine or a shared filesystem); the "
        "driver keeps a copy of every member's latest checkpoint in the experiment folder",
        path_text,
        group="run",
    ),
    Flag(
        "ray_cpus_per_group",
        float,
        1.0,
        "with --ray_address: CPUs Ray reserves for each node group",
        check=positive,
        group="run",
    ),
    Flag(
        "ray_gpus_per_group",
        float,
        0.0,
        "with --ray_address: GPUs Ray reserves for each node group",
        check=non_negative,
        group="run",
    ),
    Flag(
        "ray_group_timeout_s",
        int,
        900,
        "with --ray_address: stop the run (resumable) when a node group has not answered "
        "for this many seconds (its actor restarting, or waiting for a node with room)",
        check=positive,
        group="run",
    ),
    Flag(
        "train_for_env_steps",
        int,
        10_000_000_000,
        "stop when every policy has trained on this many env frames",
        positive,
        group="run",
    ),
    Flag(
        "train_for_seconds",
        int,
        10_000_000_000,
        "stop after this many seconds",
        positive,
        group="run",
    ),
    Flag("save_every_sec", int, 120, "checkpoint period in seconds", positive, group="run"),
    Flag(
        "keep_checkpoints", int, 2, "number of checkpoints kept per policy", positive, group="run"
    ),
    Flag(
        "stats_avg",
        int,
        100,
        "episodes averaged in status and summaries",
        positive,
        group="logging",
    ),
    Flag(
        "experiment_summaries_interval",
        int,
        10,
        "seconds between TensorBoard writes",
        positive,
        group="logging",
    ),
    Flag(
        "status_interval",
        float,
        5.0,
        "seconds between console status lines",
        positive,
        group="logging",
    ),
    Flag(
        "heartbeat_timeout",
        int,
        60,
        "seconds of silence after which a component is declared hung",
        positive,
        group="run",
    ),
    Flag(
        "env_frameskip",
        int,
        1,
        "env frames per agent step (for frame counting)",
        in_range(1, 1000),
        group="run",
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
        "placed on it; auto: device when the policies are on CUDA and have image inputs or "
        "1M parameters or more, else local",
        choices=["auto", "local", "device"],
        group="sampling",
    ),
    Flag("num_policies", int, 1, "population size", population_size, group="sampling"),
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
        recurrence_length,
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
    Flag("adam_beta1", float, 0.9, "Adam beta1", in_range(0, 1, hi_open=True), group="learning"),
    Flag("adam_beta2", float, 0.999, "Adam beta2", in_range(0, 1, hi_open=True), group="learning"),
    Flag("gamma", float, 0.99, "discount", in_unit_interval, group="learning"),
    Flag("gae_lambda", float, 0.95, "GAE lambda", in_unit_interval, group="learning"),
    Flag(
        "reward_scale",
        float,
        1.0,
        "the learner multiplies every reward by this before computing returns (episode "
        "returns in the logs stay unscaled)",
        positive,
        group="learning",
    ),
    Flag(
        "reward_clip",
        float,
        1000.0,
        "then clips each reward to [-reward_clip, reward_clip]",
        positive,
        group="learning",
    ),
    Flag(
        "value_bootstrap",
        bool,
        True,
        "an episode cut by a time limit (truncated, not terminated) bootstraps from the value "
        "of its last state instead of ending as if terminal",
        group="learning",
    ),
    Flag(
        "ppo_clip_ratio",
        float,
        0.1,
        "PPO policy clip: the ratio is clipped to [1-c, 1+c], so c is below 1 (Sample "
        "Factory clips to [1/(1+c), 1+c]: nearly the same below 0.3, apart from there)",
        clip_below_one,
        group="learning",
    ),
    Flag(
        "ppo_clip_value", float, 1.0, "value clip around the old value", positive, group="learning"
    ),
    Flag(
        "value_loss_coeff",
        float,
        0.5,
        "weight of the value loss, the mean squared error of the (clipped) values, as in "
        "Sample Factory",
        non_negative,
        group="learning",
    ),
    Flag(
        "exploration_loss_coeff",
        float,
        0.003,
        "entropy bonus weight",
        non_negative,
        group="learning",
    ),
    Flag(
        "anneal_env_steps",
        int,
        0,
        "the learning rate and the entropy bonus fall linearly over each policy's first N env "
        "steps, to --anneal_final_fraction of their values (PBT's values, scaled the same way), "
        "and stay there; 0: constant",
        non_negative,
        group="learning",
    ),
    Flag(
        "anneal_final_fraction",
        float,
        0.1,
        "with --anneal_env_steps: the fraction of the learning rate and entropy bonus left at "
        "the end of the annealing",
        in_range(0.0, 1.0, lo_open=True),
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
        path_text,
        group="learning",
    ),
    # --- model ---
    Flag("use_rnn", bool, False, "GRU core after the encoder", group="model"),
    Flag(
        "actor_critic_share_weights",
        bool,
        True,
        "the policy and the value read one encoder (False: the value has its own layers of "
        "the same sizes; needs --use_rnn=False)",
        group="model",
    ),
    Flag("rnn_size", int, 512, "GRU hidden size", positive, group="model"),
    Flag(
        "encoder_mlp_layers",
        list,
        [512, 512],
        "MLP encoder layer sizes",
        layer_sizes,
        group="model",
    ),
    Flag(
        "encoder_conv_architecture",
        str,
        "convnet_simple",
        "conv encoder for image inputs (convnet_board: small boards, e.g. connect four)",
        choices=["convnet_simple", "convnet_impala", "convnet_board"],
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
    Flag(
        "obs_features",
        bool,
        True,
        "append the env's registered observation features (register_env(obs_features=...), "
        "e.g. connect four's threats and forks) to the vector observation; no effect on envs "
        "without them",
        group="model",
    ),
    Flag(
        "obs_features_set",
        str,
        "",
        "which of the env's named feature sets to use (empty: its newest); config.json keeps "
        "the one a run trained with, and a resume must give the same; connect_four has "
        "threats and lookahead",
        feature_set_name,
        group="model",
    ),
    Flag(
        "mirror_symmetry",
        bool,
        True,
        "for an env that registers a mirror symmetry (register_env(symmetry=...), e.g. "
        "connect four's left-right mirror): the model sees each observation in one canonical "
        "orientation and mirrors its action back, so it learns each position once; no effect "
        "on other envs",
        group="model",
    ),
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
        "'vs_snapshots' by the win rate against frozen snapshots only; 'vs_scripted:NAME' "
        "by the score against the env's scripted player NAME (e.g. vs_scripted:alphabeta:"
        "depth=2; see --selfplay_scripted_prob)",
        non_empty,
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
    Flag(
        "pbt_search_space",
        str,
        None,
        "JSON file describing the typed search space (see configs/pbt_search_space_example.json)",
        path_text,
        group="pbt",
    ),
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
        in_range(0, 1, lo_open=True, hi_open=True),
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
        path_text,
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
        "fraction of opponent seats given to frozen past snapshots, in the episodes not "
        "played against a scripted player (--selfplay_scripted_prob)",
        in_unit_interval,
        group="selfplay",
    ),
    Flag(
        "selfplay_snapshot_temperature",
        float,
        1.0,
        "frozen snapshots sample their moves from softmax(logits / T) (continuous actions: std "
        "x T); below 1 they play sharper than the policy they froze",
        positive,
        group="selfplay",
    ),
    Flag(
        "selfplay_scripted_prob",
        float,
        0.0,
        "fraction of episodes played against the scripted player of "
        "--pbt_target_objective=vs_scripted:NAME (one member in a random seat, the player in "
        "every other)",
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
    # --- logging (TensorBoard always; Weights & Biases on request) ---
    Flag(
        "with_wandb",
        bool,
        False,
        f"also log to Weights & Biases (needs the wandb package: {install_hint('wandb')})",
        group="logging",
    ),
    Flag("wandb_project", str, "rl_pbt", "W&B project", wandb_name, group="logging"),
    Flag(
        "wandb_entity",
        str,
        None,
        "W&B user or team (None: the logged-in user's default)",
        wandb_name,
        group="logging",
    ),
    Flag(
        "wandb_group",
        str,
        None,
        "W&B run group",
        wandb_group_name,
        group="logging",
    ),
    Flag(
        "wandb_tags",
        list,
        [],
        "W&B tags: a,b,c or a b c",
        wandb_tags,
        group="logging",
        item_type=str,
    ),
]

FLAGS_BY_NAME: dict[str, Flag] = {f.name: f for f in FLAGS}


@dataclass(frozen=True)
class ForeignFlag:
    """A Sample Factory flag with no flag of its own here. Accepted with a one-line note so that
    ported commands run: `allowed` lists the values this trainer honours (compared without
    case; any other value is an error), None accepts any value; `renamed_to` passes the value on to
    the flag of that name. Only names whose accepted values change nothing about what is
    learned belong here: a flag that would change learning is better refused."""

    name: str
    meaning: str  # what this trainer does instead
    allowed: Optional[tuple[str, ...]] = None
    renamed_to: Optional[str] = None
    refused: bool = False  # for something this trainer lacks: any value is an error


FOREIGN_FLAGS: list[ForeignFlag] = [
    ForeignFlag("algo", "training is always APPO", allowed=("APPO",)),
    ForeignFlag(
        "async_rl", "sampling and learning always overlap (asynchronous)", allowed=("True",)
    ),
    ForeignFlag("rnn_type", "the recurrent core (--use_rnn) is a GRU", allowed=("gru",)),
    ForeignFlag("rnn_num_layers", "the recurrent core has one layer", allowed=("1",)),
    ForeignFlag(
        "exploration_loss",
        "the exploration loss is the entropy bonus (--exploration_loss_coeff)",
        allowed=("entropy",),
    ),
    ForeignFlag("optimizer", "the optimiser is Adam (--adam_eps, --adam_beta*)", allowed=("adam",)),
    ForeignFlag(
        "lr_schedule",
        "the learning rate stays constant between PBT changes, unless --anneal_env_steps "
        "lowers it linearly",
        allowed=("constant",),
    ),
    ForeignFlag("policy_workers_per_policy", "where actions are computed is set by --inference"),
    ForeignFlag(
        "batched_sampling",
        "envs that register a batched version are stepped in one call (--batched_envs)",
    ),
    ForeignFlag(
        "decorrelate_experience_max_seconds",
        "env copies are decorrelated by steps at start (--decorrelate_envs_on_one_worker)",
    ),
    ForeignFlag("set_workers_cpu_affinity", "rollout workers are not pinned to CPU cores"),
    ForeignFlag("heartbeat_interval", "silent components are detected after --heartbeat_timeout"),
    ForeignFlag("wandb_user", "the W&B user or team", renamed_to="wandb_entity"),
    # Sample Factory's VizDoom flags at its defaults, which are this trainer's Doom defaults
    ForeignFlag(
        "wide_aspect_ratio",
        "Doom frames are rendered at 4:3 (160x120) and resized to --doom_resolution",
        allowed=("False",),
    ),
    ForeignFlag(
        "res_w", "the observation size is --doom_resolution=WIDTHxHEIGHT", allowed=("128",)
    ),
    ForeignFlag("res_h", "the observation size is --doom_resolution=WIDTHxHEIGHT", allowed=("72",)),
    ForeignFlag("num_bots", "the bots in a Doom game", renamed_to="doom_num_bots"),
    ForeignFlag("num_agents", "the agents in a Doom self-play game", renamed_to="doom_num_agents"),
    # Sample Factory's flags for what is done one way here
    ForeignFlag(
        "shuffle_minibatches",
        "each epoch draws its minibatches in a fresh random order (Sample Factory's default is "
        "not to)",
    ),
    ForeignFlag(
        "summaries_use_frameskip",
        "frames are env steps x --env_frameskip wherever they are counted",
        allowed=("True",),
    ),
    ForeignFlag("pixel_format", "images are stored channels first", allowed=("CHW",)),
    ForeignFlag(
        "load_checkpoint_kind",
        "a resume loads each policy's newest checkpoint",
        allowed=("latest",),
    ),
    ForeignFlag(
        "env_framestack",
        "no frames are stacked by a flag (an env may stack its own; --use_rnn keeps a memory)",
        allowed=("1",),
    ),
    ForeignFlag(
        "benchmark",
        "there is no benchmark mode (benchmarks/ holds the speed scripts)",
        allowed=("False",),
    ),
    ForeignFlag(
        "use_env_info_cache", "the env's spaces are probed once at each start", allowed=("False",)
    ),
    ForeignFlag(
        "use_record_episode_statistics",
        "each episode's return and length are counted by the rollout workers",
    ),
    ForeignFlag(
        "force_envs_single_thread", "the threads of an env's own libraries are not set by a flag"
    ),
    ForeignFlag("default_niceness", "processes keep the niceness they start with", allowed=("0",)),
    ForeignFlag(
        "log_to_file",
        "messages go to the terminal (redirect them to keep them); statistics go to "
        "stats/scalars.jsonl and TensorBoard",
    ),
    ForeignFlag(
        "flush_summaries_interval",
        "the scalar logs are written every --experiment_summaries_interval",
    ),
    ForeignFlag(
        "heartbeat_reporting_interval", "silent components are detected after --heartbeat_timeout"
    ),
    ForeignFlag("wandb_job_type", "W&B runs have no job type"),
]


def _lacks(names: str, meaning: str) -> list[ForeignFlag]:
    return [ForeignFlag(n, meaning, refused=True) for n in names.split()]


# Sample Factory flags for what this trainer lacks: refused by name, with what to use instead,
# so that a ported command line is not taken for one with a typo
FOREIGN_FLAGS += [
    *_lacks("kl_loss_coeff", "there is no KL penalty; the PPO clip (--ppo_clip_ratio) bounds "
            "each update"),
    *_lacks("obs_subtract_mean obs_scale normalize_input_keys", "observations are not shifted "
            "or scaled by fixed numbers; --normalize_input keeps running statistics of them"),
    *_lacks("lr_schedule_kl_threshold lr_adaptive_min lr_adaptive_max", "there is no "
            "KL-adaptive learning rate; --anneal_env_steps lowers it linearly, PBT tunes it"),
    *_lacks("max_entropy_coeff", "there is no entropy reward; the entropy bonus is "
            "--exploration_loss_coeff"),
    *_lacks("policy_initialization policy_init_gain", "the network's initialisation is not "
            "set by a flag"),
    *_lacks("adaptive_stddev initial_stddev continuous_tanh_scale", "the Gaussian of "
            "continuous actions is not set by flags"),
    *_lacks("num_batches_to_accumulate", "each minibatch takes one optimiser step"),
    *_lacks("decoder_mlp_layers", "the heads sit on the encoder (and the --use_rnn core); "
            "there is no decoder"),
    *_lacks("actor_worker_gpus env_gpu_actions env_gpu_observations", "envs step on the CPU "
            "in the rollout workers; --device and --inference place the networks"),
    *_lacks("save_milestones_sec save_best_every_sec save_best_metric save_best_after",
            "checkpoints are saved every --save_every_sec, the newest --keep_checkpoints kept"),
    *_lacks("timelimit", "a Doom episode's length is --doom_episode_timeout, in game tics "
            "(35 a second)"),
    *_lacks("start_bot_difficulty", "the bots play at the scenario's own skill"),
]  # fmt: skip

# values of Sample Factory's own for a flag of the same name, and what to use here
FOREIGN_CHOICES: dict[tuple[str, str], str] = {
    ("encoder_conv_architecture", "convnet_atari"): "Sample Factory's convnet_atari (the DQN "
    "network) is not built in; convnet_simple is the closest (32x8/4, 64x4/2, 128x3/2)",
}

FOREIGN_BY_NAME: dict[str, ForeignFlag] = {f.name: f for f in FOREIGN_FLAGS}
