"""Flags shared by the short integration runs."""

# The small parallel layout of the short integration runs: 2 workers x 4 envs, rollout 16,
# batch 128, a 32-unit MLP.
SMALL_RUN = [
    "--num_workers=2",
    "--num_envs_per_worker=4",
    "--rollout=16",
    "--batch_size=128",
    "--encoder_mlp_layers",
    "32",
]

# The CartPole learning runs: 300k frames per policy, judged on the mean of the last 20
# episodes (>= 195). The env flag is left to each test.
CARTPOLE_LEARN = [
    "--num_envs_per_worker=8",
    "--rollout=32",
    "--batch_size=512",
    "--encoder_mlp_layers",
    "64",
    "64",
    "--learning_rate=3e-4",
    "--stats_avg=20",
    "--train_for_env_steps=300000",
    "--save_every_sec=30",
    "--seed=1",
    "--status_interval=10",
    "--exploration_loss_coeff=0.0",
]
