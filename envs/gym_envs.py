"""Gymnasium envs: nothing to register, since `rl_pbt.envs.registry.make_env` accepts any
gymnasium id (e.g. `--env=CartPole-v1`) and wraps it as a 1-agent env.

Such envs may put `true_objective` in the final step's info and implement
`rl_pbt.RewardShapingInterface`; a custom factory is only needed for extra arguments.
"""
