"""Env registry, the interfaces envs may implement, and the wrappers the sampler relies on."""
