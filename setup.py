from setuptools import find_packages, setup

setup(
    name="rl_pbt",
    version="0.1.0",
    description="Single-machine multi-GPU APPO trainer with PBT and self-play populations",
    packages=find_packages(include=["rl_pbt*", "envs*", "launch*", "configs"]),
    package_data={"configs": ["*.json"]},
    python_requires=">=3.9",
    install_requires=[
        "torch>=2.1",
        "gymnasium>=0.29",
        "numpy>=1.23",
        "faster-fifo>=1.4.5",
        "tensorboardX>=2.6",
    ],
    extras_require={
        "doom": ["vizdoom>=1.2.3"],
        # psutil: the benchmark scripts' tests measure process memory; the report, video,
        # W&B and PettingZoo tests run with their libraries, not skipped
        "test": [
            "pytest>=7",
            "ruff>=0.5",
            "psutil>=5.9",
            "matplotlib>=3.6",
            "imageio>=2.28",
            "imageio-ffmpeg>=0.4.8",
            "wandb>=0.16",
            "pettingzoo>=1.24",
            "pygame-ce>=2.3",
            "ray>=2.40,<3",
        ],
        "bench": ["psutil>=5.9"],
        # --ray_address: a population over several machines (tested with 2.60)
        "ray": ["ray>=2.40,<3"],
        # ParallelEnv and turn-based (AEC) envs; PettingZoo's classic games (connect_four)
        # import pygame at load time (its "classic" extra would also build open_spiel)
        "pettingzoo": ["pettingzoo>=1.24", "pygame-ce>=2.3"],
        # counts GPUs through NVML, so the main process never initialises CUDA to count them
        "gpu": ["nvidia-ml-py>=12"],
        # launch.report draws the population's story as PNGs and an offline HTML page;
        # tensorboard is the viewer of the curves every run writes
        "report": ["matplotlib>=3.6", "tensorboard>=2.10"],
        # enjoy/match --save_video write .mp4 through ffmpeg (or .gif without it)
        "video": ["imageio>=2.28", "imageio-ffmpeg>=0.4.8"],
        "wandb": ["wandb>=0.16"],
    },
    entry_points={
        "console_scripts": [
            "rl-pbt-train=launch.train:cli",
            "rl-pbt-enjoy=launch.enjoy:cli",
            "rl-pbt-match=launch.match:cli",
            "rl-pbt-report=launch.report:cli",
            "rl-pbt-replay=launch.replay:cli",
            "rl-pbt-sweep=launch.sweep:cli",
        ]
    },
)
