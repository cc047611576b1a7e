"""Simulator backends behind the `embodied.envs.VecEnv` contract (registered in `embodied.registry`)."""
