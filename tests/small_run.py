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
